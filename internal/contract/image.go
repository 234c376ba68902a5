package contract

import "github.com/tpdeploy/tpdeploy/internal/failure"

// ActivityReadImage reads what the spec's image holds on a node (release.ReadScript in a
// short-lived container of it); the result is a release.Image.
const ActivityReadImage = "ReadImage"

// ImageRequest asks a node's agent to read an image.
type ImageRequest struct {
	Node       string `json:"node"`
	DockerHost string `json:"docker_host,omitempty"`
	Image      string `json:"image"`
}

// Error types of the image read and the release decision (package release).
const (
	ErrImageLacksRay       = failure.ImageLacksRay
	ErrImageLacksNnodes    = failure.ImageLacksNnodes
	ErrImageNICSelection   = failure.ImageNICSelection
	ErrExecutorUnavailable = failure.ExecutorUnavailable
	ErrImageUnreadable     = failure.ImageUnreadable
)
