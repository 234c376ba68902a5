package weights

import (
	"fmt"
	"slices"
	"strings"
)

// KindDisk is a Problem of a node whose model directory lacks the space for what it must
// receive (failure.DiskInsufficient).
const KindDisk = "disk"

// Disk is one node's side of the disk check: the directory the model's files go to, its
// free bytes (statfs's f_bavail × f_frsize: what an unprivileged writer may use) and the
// files the node must receive (Lacking, or a hub download's selection).
type Disk struct {
	Node    string
	Dir     string
	Free    int64
	Receive []File
}

// Need is the bytes the node must write. A file arrives through a partial file that is
// renamed into place (and a Hugging Face cache links its snapshot to the blob), so each
// file takes its size once; nothing is counted twice.
func (d Disk) Need() int64 { return CopySize(d.Receive) }

// CheckDisk reports each node whose directory has less free space than it must receive,
// in node order, naming the node, the directory, the need and the free space. It is
// checked before anything is written, so that a full disk is a refusal at preflight
// rather than a copy that fails at 95 %.
func CheckDisk(disks []Disk) []Problem {
	var ps []Problem
	for _, d := range disks {
		need := d.Need()
		if need <= d.Free {
			continue
		}
		ps = append(ps, Problem{Node: d.Node, Kind: KindDisk, Message: fmt.Sprintf(
			"%s: %s needs %s for %s of the model and has %s free (%s short)",
			d.Node, d.Dir, HumanSize(need), fileCount(len(d.Receive)), HumanSize(d.Free), HumanSize(need-d.Free))})
	}
	slices.SortFunc(ps, func(a, b Problem) int { return strings.Compare(a.Node, b.Node) })
	return ps
}

func fileCount(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}
