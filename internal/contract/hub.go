package contract

import (
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// The hub activities (model.source: hub; activities.Weights): the head's agent resolves
// the model's revision at plan, and downloads the files a node lacks once, into its
// hf_cache; the other nodes then receive them as model.sync copies.

// ResolveHubModelRequest asks the head's agent what the hub holds of the model.
type ResolveHubModelRequest struct {
	Node string `json:"node"`
	// Repo is the model's Hugging Face name; Revision model.revision ("" is main).
	Repo     string `json:"repo"`
	Revision string `json:"revision,omitempty"`
	// Endpoint is the head's HF_ENDPOINT (spec.Cluster.HubEndpoint), "" for
	// huggingface.co; the agent's policy must allow it (allowed_hub_endpoints).
	Endpoint string `json:"endpoint,omitempty"`
	// Token is secrets.hf_token, a reference the agent resolves within its policy.
	Token *spec.SecretRef `json:"token,omitempty"`
}

// HubModel is the model as the hub holds it at the resolved commit: the files vLLM's
// default loader reads (hub.Select), with their sizes and hashes.
type HubModel struct {
	Repo     string `json:"repo"`
	Revision string `json:"revision,omitempty"`
	// Commit is the revision resolved: what every node gets.
	Commit   string `json:"commit"`
	Endpoint string `json:"endpoint"`
	// Format is the weights' format ("safetensors" or "bin"); Skipped counts the
	// repository's files left out.
	Format  string         `json:"format"`
	Files   []weights.File `json:"files"`
	Skipped int            `json:"skipped,omitempty"`
}

// Size is the total size of the model's files.
func (m HubModel) Size() int64 { return weights.CopySize(m.Files) }

// DownloadHubModelRequest asks the head's agent to download the files it lacks of the
// resolved commit into its hf_cache (resumable from partial files, each verified by its
// size and hash), and to point Ref at the commit once all are in place.
type DownloadHubModelRequest struct {
	Node string `json:"node"`
	// Root is the snapshot directory (weights.HFSnapshotDir of the node's hf_cache, the
	// repository and Commit).
	Root     string          `json:"root"`
	Repo     string          `json:"repo"`
	Commit   string          `json:"commit"`
	Endpoint string          `json:"endpoint,omitempty"`
	Token    *spec.SecretRef `json:"token,omitempty"`
	// Ref is the ref pointed at the commit ("main", the spec's branch; "" for a pinned
	// commit).
	Ref    string         `json:"ref,omitempty"`
	Files  []weights.File `json:"files"`
	Intent *Intent        `json:"intent,omitempty"`
}

func (r DownloadHubModelRequest) Signature() Signature { return Signature{Intent: r.Intent} }

// Activity names of the hub activities.
const (
	ActivityResolveHubModel  = "ResolveHubModel"
	ActivityDownloadHubModel = "DownloadHubModel"
)
