// Package weights describes a model's files as a node holds them (a Hugging Face cache
// snapshot or a plain directory) and compares those descriptions across nodes: which files
// a node lacks, holds at another size or hash, or holds at another revision. Scanning reads
// only through the fs.FS the caller gives, and follows no symbolic link by the file
// system's own resolution (scan.go); comparing is pure, so the preflight's decisions can
// be table-tested and recorded in workflow history.
package weights

import (
	"fmt"
	"strconv"
	"strings"
)

// File is one file of a model, named relative to the model's directory (slash-separated).
type File struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	// SHA256 is the content's hash, when known: computed when the scan hashed the file
	// (checksums, or a file a copy will send), otherwise the blob's name for an LFS file of
	// a Hugging Face cache (what HF recorded when it downloaded the file; it is not
	// re-read).
	SHA256 string `json:"sha256,omitempty"`
	// Blob is the name of the file's blob in a Hugging Face cache (the sha256 for LFS
	// files, the git blob sha1 for small files); empty for a plain directory.
	Blob string `json:"blob,omitempty"`
}

// Hashed says whether the file's content hash is known, so that a copy of it can be
// verified: its sha256, or the name a Hugging Face cache gives its blob (the sha256 of an
// LFS file, the git blob id of a small one).
func (f File) Hashed() bool { return IsSHA256(f.SHA256) || IsSHA256(f.Blob) || IsGitSHA1(f.Blob) }

// Manifest is what one node holds of a model.
type Manifest struct {
	// Source is the Hugging Face repository ("Org/Name") or the directory scanned.
	Source string `json:"source"`
	// Revision is the commit of the Hugging Face snapshot scanned; empty for a directory.
	Revision string `json:"revision,omitempty"`
	// Dir is the directory scanned: the snapshot for a Hugging Face model.
	Dir string `json:"dir,omitempty"`
	// Files are the files present, sorted by name.
	Files []File `json:"files,omitempty"`
	// Missing names files the model needs that are not there: config.json, a file the
	// index lists, or a snapshot link whose blob is gone (a half-finished download).
	Missing []string `json:"missing,omitempty"`
	// Absent, when set, says why no model was found at all (no repository in the cache,
	// no ref, no snapshot, no directory); Files and Missing are then empty.
	Absent string `json:"absent,omitempty"`
	// Free is the free bytes of the file system the model's files go to (statfs's
	// f_bavail × f_bsize at the deepest directory of the destination that exists): what
	// the disk check compares with the bytes the node must receive. Nil when not
	// measured (an agent older than the check).
	Free *int64 `json:"free,omitempty"`
}

// File returns the named file of the manifest.
func (m Manifest) File(name string) (File, bool) {
	for _, f := range m.Files {
		if f.Name == name {
			return f, true
		}
	}
	return File{}, false
}

// Size is the total size of the manifest's files.
func (m Manifest) Size() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Names returns the names of files, in order.
func Names(files []File) []string {
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	return names
}

// Kinds of Problem.
const (
	KindAbsent   = "absent"   // the node holds no model at all
	KindMissing  = "missing"  // a file the node's own model needs is not there
	KindLacks    = "lacks"    // a file the head holds is not on the node
	KindSize     = "size"     // a file differs in size from the head's
	KindSHA256   = "sha256"   // a file differs in content from the head's
	KindRevision = "revision" // the node holds another snapshot than the head
	KindBlob     = "blob"     // a file's content does not match its blob's name
)

// Problem is one way a node's copy of the model falls short.
type Problem struct {
	Node    string `json:"node"`
	Kind    string `json:"kind"`
	File    string `json:"file,omitempty"`
	Message string `json:"message"`
}

// String returns the problem's message.
func (p Problem) String() string { return p.Message }

// Check reports what a node's manifest lacks by its own account: no model at all, files
// its config and index call for that are not there, and (with checksums) contents that
// do not match their blob's name. The head's manifest is checked with it before nodes are
// compared to the head.
func Check(node string, m Manifest) []Problem {
	if m.Absent != "" {
		return []Problem{{Node: node, Kind: KindAbsent, Message: fmt.Sprintf("%s lacks the model: %s", node, m.Absent)}}
	}
	var ps []Problem
	for _, name := range m.Missing {
		msg := fmt.Sprintf("%s lacks %s", node, name)
		if name != "config.json" {
			msg += " (the model's index lists it)"
		}
		ps = append(ps, Problem{Node: node, Kind: KindMissing, File: name, Message: msg})
	}
	for _, f := range m.Files {
		if IsSHA256(f.Blob) && f.SHA256 != "" && f.SHA256 != f.Blob {
			ps = append(ps, Problem{Node: node, Kind: KindBlob, File: f.Name, Message: fmt.Sprintf(
				"%s has %s with sha256 %s, but its blob is named %s", node, f.Name, short(f.SHA256), short(f.Blob))})
		}
	}
	return ps
}

// Compare reports how a node's manifest differs from the head's: files it lacks, holds at
// another size or (when both hashes are known) another hash, or another revision. Files
// the node holds beyond the head's are not problems.
func Compare(head Manifest, node string, m Manifest) []Problem {
	if m.Absent != "" {
		return []Problem{{Node: node, Kind: KindAbsent, Message: fmt.Sprintf("%s lacks the model: %s (head has %d files, %s)",
			node, m.Absent, len(head.Files), HumanSize(head.Size()))}}
	}
	if head.Revision != m.Revision {
		// Another snapshot: its files are not comparable one by one.
		return []Problem{{Node: node, Kind: KindRevision, Message: fmt.Sprintf("%s holds revision %s, head holds %s",
			node, orNone(m.Revision), orNone(head.Revision))}}
	}
	var ps []Problem
	for _, hf := range head.Files {
		nf, ok := m.File(hf.Name)
		switch {
		case !ok:
			ps = append(ps, Problem{Node: node, Kind: KindLacks, File: hf.Name, Message: fmt.Sprintf(
				"%s lacks %s (head has %s)", node, hf.Name, HumanSize(hf.Size))})
		case nf.Size != hf.Size:
			ns, hs := HumanSize(nf.Size), HumanSize(hf.Size)
			if ns == hs {
				ns, hs = strconv.FormatInt(nf.Size, 10)+" bytes", strconv.FormatInt(hf.Size, 10)+" bytes"
			}
			ps = append(ps, Problem{Node: node, Kind: KindSize, File: hf.Name, Message: fmt.Sprintf(
				"%s has %s at %s, head has %s", node, hf.Name, ns, hs)})
		case nf.SHA256 != "" && hf.SHA256 != "" && nf.SHA256 != hf.SHA256:
			ps = append(ps, Problem{Node: node, Kind: KindSHA256, File: hf.Name, Message: fmt.Sprintf(
				"%s has %s with sha256 %s, head has %s", node, hf.Name, short(nf.SHA256), short(hf.SHA256))})
		}
	}
	return ps
}

// Lacking returns the head's files that a node must receive to hold what the head holds:
// every file when the node holds no model or another revision (the head's snapshot is
// then a new directory there), otherwise those it lacks or holds at another size or hash.
func Lacking(head, node Manifest) []File {
	if node.Absent != "" || head.Revision != node.Revision {
		return append([]File(nil), head.Files...)
	}
	var out []File
	for _, hf := range head.Files {
		nf, ok := node.File(hf.Name)
		if !ok || nf.Size != hf.Size || (nf.SHA256 != "" && hf.SHA256 != "" && nf.SHA256 != hf.SHA256) {
			out = append(out, hf)
		}
	}
	return out
}

// HumanSize writes a byte count in decimal units with one decimal, as Hugging Face shows
// file sizes: 812 B, 1.2 kB, 4.9 GB.
func HumanSize(n int64) string {
	if n < 1000 && n > -1000 {
		return strconv.FormatInt(n, 10) + " B"
	}
	const units = "kMGTPE"
	v := float64(n) / 1000
	i := 0
	for (v >= 999.95 || v <= -999.95) && i < len(units)-1 {
		v /= 1000
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i:i+1] + "B"
}

func orNone(rev string) string {
	if rev == "" {
		return "none"
	}
	return rev
}

// short abbreviates a hash for a message; twelve hex digits identify a file well enough.
func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool {
		return !('0' <= r && r <= '9' || 'a' <= r && r <= 'f')
	}) < 0
}

// IsSHA256 reports whether s is a sha256 in lowercase hex: the name Hugging Face gives the
// blob of an LFS file.
func IsSHA256(s string) bool { return isHex(s, 64) }

// IsGitSHA1 reports whether s is a git object id in lowercase hex: the name Hugging Face
// gives the blob of a small (non-LFS) file.
func IsGitSHA1(s string) bool { return isHex(s, 40) }
