// Package activities holds tpdeploy's side effects, grouped by what they touch: the node
// (netlink, sysfs), reachability (TCP), containers (Docker Engine API), Ray and vLLM. Every
// node-bound activity runs on that node's own task queue, served by the node's agent. Their
// requests, results and error types are package contract's; the names here are aliases.
package activities

import "github.com/tpdeploy/tpdeploy/contract"

// NodeQueue is the task queue served by the named node's agent.
func NodeQueue(node string) string { return contract.NodeQueue(node) }

// ContainerName is the deterministic name of a role's container on a node.
func ContainerName(cluster, node, role string) string {
	return contract.ContainerName(cluster, node, role)
}

// Requests and results (package contract).
type (
	ProbeRequest           = contract.ProbeRequest
	ListenRequest          = contract.ListenRequest
	ListenResult           = contract.ListenResult
	DialRequest            = contract.DialRequest
	CloseRequest           = contract.CloseRequest
	Deployment             = contract.Deployment
	PreflightRequest       = contract.PreflightRequest
	PreflightResult        = contract.PreflightResult
	StartRayRequest        = contract.StartRayRequest
	ContainerRef           = contract.ContainerRef
	PlacementRequest       = contract.PlacementRequest
	RegisteredNode         = contract.RegisteredNode
	PlacementReport        = contract.PlacementReport
	LaunchRequest          = contract.LaunchRequest
	WatchRequest           = contract.WatchRequest
	ServingProgress        = contract.ServingProgress
	RemoveRequest          = contract.RemoveRequest
	RemoveResult           = contract.RemoveResult
	CheckDeploymentRequest = contract.CheckDeploymentRequest
	DeploymentCheck        = contract.DeploymentCheck
	BootIDRequest          = contract.BootIDRequest
)

// Queue, role and error type names (package contract).
const (
	ErrWrongNode            = contract.ErrWrongNode
	ErrBadRequest           = contract.ErrBadRequest
	ErrNotImplemented       = contract.ErrNotImplemented
	ErrNodeAgentDown        = contract.ErrNodeAgentDown
	ErrDockerUnreachable    = contract.ErrDockerUnreachable
	ErrDocker               = contract.ErrDocker
	ErrImageMissing         = contract.ErrImageMissing
	ErrImageMismatch        = contract.ErrImageMismatch
	ErrNoViableSubnet       = contract.ErrNoViableSubnet
	ErrInsufficientGPUs     = contract.ErrInsufficientGPUs
	ErrPlacementMismatch    = contract.ErrPlacementMismatch
	ErrDuplicateAddress     = contract.ErrDuplicateAddress
	ErrNodeNotRegistered    = contract.ErrNodeNotRegistered
	ErrPlacementPending     = contract.ErrPlacementPending
	ErrC10dUnreachable      = contract.ErrC10dUnreachable
	ErrNCCLNoInterface      = contract.ErrNCCLNoInterface
	ErrNCCL                 = contract.ErrNCCL
	ErrGlooLoopback         = contract.ErrGlooLoopback
	ErrCUDAOutOfMemory      = contract.ErrCUDAOutOfMemory
	ErrEngineDead           = contract.ErrEngineDead
	ErrGCSUnreachable       = contract.ErrGCSUnreachable
	ErrModelUnsupported     = contract.ErrModelUnsupported
	ErrModelUnavailable     = contract.ErrModelUnavailable
	ErrKVCacheTooSmall      = contract.ErrKVCacheTooSmall
	ErrParallelLayout       = contract.ErrParallelLayout
	ErrGlooNoInterface      = contract.ErrGlooNoInterface
	ErrResourcesBusy        = contract.ErrResourcesBusy
	ErrRayDriverAttach      = contract.ErrRayDriverAttach
	ErrRayUnreachable       = contract.ErrRayUnreachable
	ErrRayNodeDead          = contract.ErrRayNodeDead
	ErrContainerExited      = contract.ErrContainerExited
	ErrVLLMExited           = contract.ErrVLLMExited
	ErrPolicyDenied         = contract.ErrPolicyDenied
	ErrStepTimeout          = contract.ErrStepTimeout
	ErrRetriesExhausted     = contract.ErrRetriesExhausted
	ErrCanceled             = contract.ErrCanceled
	ErrCompensationFailed   = contract.ErrCompensationFailed
	RoleRayHead             = contract.RoleRayHead
	RoleRayWorker           = contract.RoleRayWorker
	RoleVLLM                = contract.RoleVLLM
	WorkflowQueue           = contract.WorkflowQueue
	ActivityCheckDeployment = contract.ActivityCheckDeployment
)
