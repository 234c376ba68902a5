package contract

import (
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// The fleet's router (router/, internal/router): one OpenAI endpoint in front of every
// cluster whose spec names it (spec.Router). The agent of the router's node starts it and
// is the one caller of its admin API; the workflows push each cluster's route through that
// agent (docs/decisions.md, "The router's routes").
const (
	// ActivityEnsureRouter starts the router's container on the node, or keeps the one
	// running.
	ActivityEnsureRouter = "EnsureRouter"
	// ActivitySetRoute replaces one cluster's replicas in the router's routes (the others'
	// are kept: the routes are the union of what every cluster's deploy pushed).
	ActivitySetRoute = "SetRoute"
	// ActivityDrainRoute marks a cluster's replica draining (the router holds new requests
	// of a model with no other replica) and answers once its requests in flight ended.
	ActivityDrainRoute = "DrainRoute"
)

// RouterImage is the router's image when the node's agent is given none.
const RouterImage = "tpdeploy/router:dev"

// RouterContainer is the name of the router's container on node, whose agent runs its
// containers in network mode network: one per node, shared by every cluster routed through
// it (it carries no cluster label, so no cluster's teardown or reconcile removes it).
// Container names are global on a Docker engine, and labs whose nodes share one engine
// reuse node names, so a node that is itself a container (network container:PEER, the
// lab's) adds PEER, which is unique on the engine: tpd_router_node-a.tpd-lab1-node-a. A
// real node (host: one agent per engine) keeps tpd_router_NODE, the name its router has
// had from the start, so an upgraded agent adopts it.
func RouterContainer(node, network string) string {
	peer, ok := strings.CutPrefix(network, "container:")
	if network == "" || network == "host" {
		return "tpd_router_" + node
	}
	if !ok {
		peer = network
	}
	// Docker's names are [a-zA-Z0-9][a-zA-Z0-9_.-]*; anything else becomes '-'.
	safe := strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf && (r == '_' || r == '.' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return r
		}
		return '-'
	}, peer)
	return "tpd_router_" + node + "." + safe
}

// RoleRouter is the router's container role label.
const RoleRouter = "router"

// EnsureRouterRequest asks the router node's agent to run the router. The port is the
// signed spec's router.port; the API key clients must send is the spec's secrets.api_key
// (the engines' own, which the router also sends them).
type EnsureRouterRequest struct {
	Node       string `json:"node"`
	DockerHost string `json:"docker_host"`
	// Address is where clients reach the router: the node's planned address when the
	// cluster runs on the router's node; else the agent answers with the source address
	// of its default route.
	Address netip.Addr   `json:"address,omitzero"`
	Spec    spec.Cluster `json:"spec"`
	Intent  *Intent      `json:"intent,omitempty"`
}

// RouterRef is where the router serves: its OpenAI endpoint (http://ADDRESS:PORT), and its
// container.
type RouterRef struct {
	Endpoint  string       `json:"endpoint"`
	Container ContainerRef `json:"container"`
}

// RouteRequest is one cluster's entry in the router's routes: its served model and its
// replica (named after the cluster) at Endpoint. Down and Draining are the cluster's state
// as its workflow sees it; Remove takes the cluster's replica out (its teardown).
type RouteRequest struct {
	Node     string       `json:"node"`
	Spec     spec.Cluster `json:"spec"`
	Endpoint string       `json:"endpoint"`
	Down     bool         `json:"down,omitempty"`
	Draining bool         `json:"draining,omitempty"`
	Remove   bool         `json:"remove,omitempty"`
	// Timeout bounds DrainRoute's wait for the requests in flight.
	Timeout spec.Duration `json:"timeout,omitempty"`
	Intent  *Intent       `json:"intent,omitempty"`
}

func (r EnsureRouterRequest) Signature() Signature { return Signature{Intent: r.Intent, Spec: &r.Spec} }

func (r RouteRequest) Signature() Signature {
	return Signature{Intent: r.Intent, Spec: &r.Spec, Removal: r.Remove}
}

// RouteResult is the router's routes after the change: the models it fronts.
type RouteResult struct {
	Models []string `json:"models"`
}
