package contract

import (
	"net/netip"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/failure"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// The model-weight activities (activities.Weights; the server and the copy are package
// weights/transfer's): manifests compared at preflight, and the agent-to-agent copy of
// model.sync: from-head. Paths are the node's own (the agent applies its host root, if
// any).

// Error types of the model-weight activities (meanings in failure.All).
const (
	ErrModelIncomplete = failure.ModelIncomplete
	ErrModelCorrupt    = failure.ModelCorrupt
	// ErrModelServerGone: the head's model server refused the connection or the key
	// (closed, expired, or its agent restarted), or the copying node's agent no longer
	// holds its key (it restarted since PrepareModelCopy); make new keys, open another
	// server and copy again.
	ErrModelServerGone = failure.ModelServerGone
)

// Model layouts SyncModel writes.
const (
	// ModelLayoutDir writes files at Root/<name> (model.host_dir).
	ModelLayoutDir = "dir"
	// ModelLayoutHF writes files into a Hugging Face cache as huggingface_hub does: Root is
	// the snapshot directory <hf_cache>/hub/models--Org--Name/snapshots/<commit>, content
	// goes to ../../blobs/<hash>, the snapshot entry links to it, and refs/<Ref> names
	// the commit once every file is in place.
	ModelLayoutHF = "hf"
)

// ModelManifestRequest asks a node to describe the model it holds.
type ModelManifestRequest struct {
	Node string `json:"node"`
	// HFCache is the node's hf_cache (the directory holding hub/).
	HFCache string `json:"hf_cache,omitempty"`
	// Repo is the model's Hugging Face name (model.path).
	Repo string `json:"repo,omitempty"`
	// Revision is model.revision: a branch, tag or commit; empty means what refs/main names.
	Revision string `json:"revision,omitempty"`
	// Dir, when set, is model.host_dir: it is scanned instead of the cache.
	Dir string `json:"dir,omitempty"`
	// Checksums reads and hashes every file (model.checksums).
	Checksums bool `json:"checksums,omitempty"`
	// Hash names files to read and hash without Checksums: the files a copy will send
	// that have no hash in the manifest yet (a model.host_dir's), which the copy verifies
	// by it.
	Hash []string `json:"hash,omitempty"`
}

// PrepareModelCopyRequest asks a node that will copy model files (SyncModel) for the key
// its copy presents to the head's model server. The agent makes a random secret and keeps
// it in memory; only the secret's SHA-256 leaves it, so workflow history holds nothing a
// model server accepts.
type PrepareModelCopyRequest struct {
	Node string `json:"node"`
	// Root is the copy's destination (SyncModelRequest.Root).
	Root string `json:"root"`
	// TTL forgets the key after this long unused, if the copy never comes (default 5
	// minutes, at most an hour); a copy that holds it keeps it.
	TTL    time.Duration `json:"ttl,omitempty"`
	Intent *Intent       `json:"intent,omitempty"`
}

// ModelCopyKey is the key a node's copy will present: the hex SHA-256 of a secret only
// that node's agent holds.
type ModelCopyKey struct {
	Key string `json:"key"`
}

// OpenModelServerRequest asks the head's node to serve model files to the other nodes.
type OpenModelServerRequest struct {
	Node string `json:"node"`
	// Addr is the node's planned address (on the fast subnet); the server listens there
	// on an ephemeral port.
	Addr netip.Addr `json:"addr"`
	// Root is the directory the files are in, on the node: the snapshot
	// (the head's Manifest.Dir) or model.host_dir.
	Root string `json:"root"`
	// Files are the names, relative to Root, the server serves; nothing else is.
	Files []string `json:"files"`
	// Relay are the files of Files this node is itself receiving meanwhile (a copy
	// chain's relay: weights.Link.Relay), with their sizes: served as they arrive, each
	// one's last byte only once this node has verified it.
	Relay map[string]int64 `json:"relay,omitempty"`
	// Keys are the copying nodes' keys (ModelCopyKey): a request is served only with the
	// secret of one of them.
	Keys []string `json:"keys"`
	// Peers are the copying nodes' planned addresses: a request is served only from one
	// of them.
	Peers []netip.Addr `json:"peers"`
	// TTL closes the server by itself after this long without a request in flight, if the
	// close never arrives (default 5 minutes, at most an hour).
	TTL    time.Duration `json:"ttl,omitempty"`
	Intent *Intent       `json:"intent,omitempty"`
}

// ModelServer is a server OpenModelServer opened. Its ID closes it and reads nothing.
type ModelServer struct {
	Addr netip.AddrPort `json:"addr"`
	ID   string         `json:"id"`
}

// CloseModelServerRequest closes a server opened by OpenModelServer.
type CloseModelServerRequest struct {
	Node string `json:"node"`
	ID   string `json:"id"`
}

// SyncModelRequest asks a node to copy model files from the head's model server.
type SyncModelRequest struct {
	Node string         `json:"node"`
	From netip.AddrPort `json:"from"`
	// Source is the node whose model server From is: empty for the head, the node before
	// this one in a copy chain (weights.Chain). The agent checks it against the signed
	// spec: a node before this one, From at its pinned address.
	Source string `json:"source,omitempty"`
	// Key is this node's key (PrepareModelCopy): the agent presents the secret it keeps.
	Key string `json:"key"`
	// Addr is this node's planned address; the copy dials from it (the server accepts
	// its peers' addresses only).
	Addr netip.Addr `json:"addr"`
	// Root is the destination directory on the node: model.host_dir, or for
	// ModelLayoutHF the snapshot directory (weights.HFSnapshotDir of the node's hf_cache,
	// the repository and the head's Manifest.Revision).
	Root string `json:"root"`
	// Layout is ModelLayoutDir (the default) or ModelLayoutHF.
	Layout string `json:"layout,omitempty"`
	// Ref, for ModelLayoutHF, is the ref pointed at the snapshot's commit once every file
	// is in place: "main" when the spec pins no revision, the spec's branch when it names
	// one; empty writes no ref (a pinned commit).
	Ref string `json:"ref,omitempty"`
	// Files are what to copy (weights.Lacking), with the head's sizes and hashes.
	Files []weights.File `json:"files"`
	// Parallel is how many files are copied at once (default 4).
	Parallel int     `json:"parallel,omitempty"`
	Intent   *Intent `json:"intent,omitempty"`
}

// SyncProgress is SyncModel's heartbeat.
type SyncProgress struct {
	// Node is the node receiving the copy, From the node it receives from (a chain's
	// predecessor; empty for the head or the hub).
	Node string `json:"node,omitempty"`
	From string `json:"from,omitempty"`
	// Done is the bytes in place of Total: copied, resumed from partial files, or found.
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
	// Received is what came over the network in this attempt.
	Received int64    `json:"received"`
	MBps     float64  `json:"mbps"`
	Current  []string `json:"current,omitempty"`
	Copied   []string `json:"copied,omitempty"`
}

// SyncResult is what SyncModel copied.
type SyncResult struct {
	// Bytes came over the network in this attempt; Reused were already on this node
	// (partial files of an earlier attempt, blobs another snapshot shares).
	Bytes   int64   `json:"bytes"`
	Reused  int64   `json:"reused,omitempty"`
	Seconds float64 `json:"seconds"`
	// MBps is Bytes per second, in decimal megabytes.
	MBps float64 `json:"mbps"`
	// Copied names the files now in place, sorted.
	Copied []string `json:"copied"`
}

// RemovePartialModelRequest asks a node to remove the partial copies under a model
// directory (SyncModel's compensation).
type RemovePartialModelRequest struct {
	Node string `json:"node"`
	// Root is SyncModel's destination directory on the node.
	Root   string  `json:"root"`
	Intent *Intent `json:"intent,omitempty"`
}

// RemovePartialModelResult names the partial files removed, relative to Root.
type RemovePartialModelResult struct {
	Removed []string `json:"removed"`
}
