package contract

import "github.com/tpdeploy/tpdeploy/internal/spec"

// Which node activities need an operator's signature (package intent), decided here once
// for every activity a node agent serves on its queue: a request that makes the agent act —
// a container started, vLLM launched or watched, model files served, written or removed,
// containers removed — is Signed; the reads and probes are in Unsigned, each with why. The
// agent's gate (activities.Agent.Gate) reads nothing else: with trusted_keys it verifies
// a Signed request before the activity runs, lets the Unsigned through, and refuses an
// activity that is in neither.

// Signed is a request that makes a node agent act: what it asks of its intent.
type Signed interface {
	Signature() Signature
}

// Signature is a request's intent and what the signed spec must say of the request.
type Signature struct {
	// Intent is the operator's signed spec the request carries (nil: unsigned).
	Intent *Intent
	// Removal marks a request that starts nothing: a removal of what the cluster made.
	// An expired or revoked signature (not_after, intents_not_before) still does it, so a
	// deploy whose signature expires midway cleans up after itself and an old cluster is
	// torn down without a new signature. The key must still be trusted.
	Removal bool
	// Spec, when set, is the spec the request carries: it must be the signed one (a signed
	// executor auto may have become ray or mp).
	Spec *spec.Cluster
	// Deployment, when set, is the deployment of what the request starts: the signed
	// spec's cluster and hash.
	Deployment *Deployment
	// Cluster, when set, is the cluster a request without a spec names: the signed spec's.
	Cluster *string
}

func (r PreflightRequest) Signature() Signature { return Signature{Intent: r.Intent, Spec: r.Spec} }

func (r StartRayRequest) Signature() Signature {
	return Signature{Intent: r.Intent, Spec: &r.Spec, Deployment: &r.Deployment}
}

func (r LaunchRequest) Signature() Signature {
	return Signature{Intent: r.Intent, Spec: &r.Spec, Deployment: &r.Deployment}
}

// Signature of a rank: StartVLLMRank, and PrepareMaster (which removes the old rank 0 and
// listens on the master port).
func (r RankRequest) Signature() Signature {
	return Signature{Intent: r.Intent, Spec: &r.Spec, Deployment: &r.Deployment}
}

func (r WatchRequest) Signature() Signature { return Signature{Intent: r.Intent, Spec: &r.Spec} }

// Signature of the data-plane proof: it runs a program in the cluster's container, or in
// a container of its own (Fresh), which is then signed as the rank's.
func (r ProofRequest) Signature() Signature {
	if r.Fresh == nil {
		return Signature{Intent: r.Intent}
	}
	s := r.Fresh.Signature()
	if s.Intent == nil {
		s.Intent = r.Intent
	}
	return s
}

func (r RemoveRequest) Signature() Signature {
	return Signature{Intent: r.Intent, Removal: true, Cluster: &r.Cluster}
}

// Signature of a start-up reconcile: a removal of the cluster's containers, on the
// signature of the teardown or deploy run the controller read it from.
func (r ReconcileRequest) Signature() Signature {
	return Signature{Intent: r.Intent, Removal: true, Cluster: &r.Cluster}
}

func (r PrepareModelCopyRequest) Signature() Signature { return Signature{Intent: r.Intent} }

func (r OpenModelServerRequest) Signature() Signature { return Signature{Intent: r.Intent} }

func (r SyncModelRequest) Signature() Signature { return Signature{Intent: r.Intent} }

func (r RemovePartialModelRequest) Signature() Signature {
	return Signature{Intent: r.Intent, Removal: true}
}

// Unsigned are the node activities that need no signature, and why: each reads, probes or
// closes what a request opened, and none starts, writes or removes anything of the node's.
var Unsigned = map[string]string{
	ActivityProbeNode:           "reads the node's links, routes, RDMA devices, GPUs",
	ActivityOpenProbeListeners:  "short-lived reachability listeners on the node's own addresses, closed by their TTL",
	ActivityDialPeers:           "dials peers in the node's own subnets for the reachability matrix",
	ActivityCloseProbeListeners: "closes what OpenProbeListeners opened, by its token",
	ActivityReadImage:           "reads what an image the policy allows holds",
	ActivityCheckPlacement:      "reads Ray's node table",
	ActivityRayNodesAlive:       "reads Ray's node table",
	ActivityLastOutput:          "reads what the cluster's containers printed last",
	ActivityBootID:              "reads the kernel's boot ID",
	ActivityGuardTrip:           "reads whether the node's memory guard stopped the cluster's engines",
	ActivityAddressHolds:        "reads whether an address is still on its interface",
	ActivityModelManifest:       "describes the model's files under an allowed mount",
	ActivityResolveHubModel:     "reads a repository's file list from a hub the policy allows (allowed_hub_endpoints), with a token the policy allows",
	ActivityCloseModelServer:    "closes what OpenModelServer opened, by its ID",
	ActivityCheckDeployment:     "reads the cluster's latest deploy and its endpoint (the API key only for a signed spec, EndpointKey)",
	ActivityWatchCluster:        "reads the cluster's health",
	ActivityServingDeployment:   "reads which deploy serves the cluster and its endpoint (the API key only for a signed spec, EndpointKey)",
	ActivityCheckTarget:         "checks the endpoint of a deploy the controller read, derived from its spec and plan (the API key only to the node's own address, for a signed spec, EndpointKey)",
	ActivityWatchTarget:         "watches the health of a deploy the controller read, as CheckTarget checks it",
}
