// Package spec defines the cluster spec — the operator's one input — with strict parsing,
// defaults, validation that reports every problem at once, and a stable hash.
//
// The same structure is read from YAML (files, the CLI) and JSON (the Temporal UI's Start
// Workflow form): YAML is converted to JSON and decoded with the json tags, so the two forms
// cannot drift apart.
package spec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Cluster is one model served across a set of GPU nodes.
type Cluster struct {
	Name     string   `json:"name"`
	Image    string   `json:"image"`
	Model    Model    `json:"model"`
	Parallel Parallel `json:"parallel"`
	// Executor is vLLM's distributed executor backend: "ray" (a Ray cluster; vLLM's driver
	// in the Ray head's container), "mp" (vLLM's own multi-node mode: one `vllm serve`
	// per node with --nnodes/--node-rank/--master-addr, no Ray) or "auto" (the default:
	// decided at preflight from what the image holds, package release).
	Executor string   `json:"executor,omitempty"`
	Nodes    []Node   `json:"nodes"`
	Network  Network  `json:"network,omitempty"`
	Ports    Ports    `json:"ports,omitempty"`
	HFCache  string   `json:"hf_cache,omitempty"`
	Secrets  Secrets  `json:"secrets,omitempty"`
	Timeouts Timeouts `json:"timeouts,omitempty"`
	// ImageMismatch says what to do when nodes hold different image IDs under the same
	// reference: "fail" (default) or "warn".
	ImageMismatch string `json:"image_mismatch,omitempty"`
	// SmokeTest asks for one completion before the deploy is declared serving.
	SmokeTest bool `json:"smoke_test,omitempty"`
	// DataPlane says what the data-plane proof (package dataplane: one NCCL all_reduce
	// across every node before vLLM starts, reading the transport NCCL chose) decides:
	// "require" fails the deploy when RDMA is planned and a rank is on sockets, "warn"
	// serves and says so, "skip" runs no proof. Empty is require when the plan has RDMA,
	// skip otherwise.
	DataPlane string `json:"data_plane,omitempty"`
	// Canary is the supervisor's request to the serving endpoint; it is not part of the
	// spec's hash (a changed canary changes nothing vLLM runs).
	Canary Canary `json:"canary,omitempty"`
	// Router, when set, puts the cluster's model behind the fleet's OpenAI router (package
	// internal/router) on the node it names: the deploy starts the router there (or keeps
	// the one running) and routes the served model to this cluster's endpoint. Several
	// clusters naming the same router share it: its routes are the union of theirs.
	Router *Router `json:"router,omitempty"`
	// Replicas, above 1, serves the model as that many independent engine groups, each its
	// own tensor x pipeline over its share of the nodes (Members): deployed, supervised and
	// recovered as clusters of their own, routed under the one served name by the router.
	Replicas int `json:"replicas,omitempty"`
}

// Router is where the fleet's router runs: one of the cluster's nodes, and the port of its
// OpenAI API there (default DefaultRouterPort).
type Router struct {
	Node string `json:"node"`
	Port int    `json:"port,omitempty"`
}

// DefaultRouterPort is the router's API port when the spec gives none (vLLM's own 8000
// being the engines').
const DefaultRouterPort = 8080

// APIPort is the router's port, DefaultRouterPort when unset.
func (r Router) APIPort() int {
	if r.Port > 0 {
		return r.Port
	}
	return DefaultRouterPort
}

// Canary: every Every the supervisor sends one tiny completion (one token) and waits up
// to Timeout for it; Failures unanswered in a row are the incident EngineWedged. /health
// does not tell a frozen engine from a serving one (vLLM PR #36451); only an answer does.
type Canary struct {
	Every    Duration `json:"every,omitempty"`
	Timeout  Duration `json:"timeout,omitempty"`
	Failures int      `json:"failures,omitempty"`
	// Off turns the canary off (the supervisor then checks /health, /v1/models, Ray's
	// node table and the ranks' containers only).
	Off bool `json:"off,omitempty"`
}

// Canary defaults: a request every 30 s, 20 s for its one token, two in a row: a wedged
// engine is EngineWedged within every + 2 × timeout = 70 s of freezing, well before
// vLLM's own execute timeout ends the engine (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 s,
// under the mp executor and RayExecutorV2; the legacy Ray executor and a frozen EngineCore
// have none: docs/engines.md, "When the engine dies").
const (
	DefaultCanaryEvery    = Duration(30 * time.Second)
	DefaultCanaryTimeout  = Duration(20 * time.Second)
	DefaultCanaryFailures = 2
)

// WithDefaults fills what is zero.
func (c Canary) WithDefaults() Canary {
	if c.Every == 0 {
		c.Every = DefaultCanaryEvery
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultCanaryTimeout
	}
	if c.Failures == 0 {
		c.Failures = DefaultCanaryFailures
	}
	return c
}

// Data-plane modes (spec data_plane).
const (
	DataPlaneRequire = "require"
	DataPlaneWarn    = "warn"
	DataPlaneSkip    = "skip"
)

// Model is what vLLM serves.
type Model struct {
	// Path is a path inside the container or a Hugging Face model name.
	Path       string   `json:"path"`
	ServedName string   `json:"served_name,omitempty"`
	ExtraArgs  []string `json:"extra_args,omitempty"`
	// Revision pins a Hugging Face model's branch, tag or commit (vLLM's --revision);
	// empty is what the cache's refs/main names.
	Revision string `json:"revision,omitempty"`
	// HostDir is a directory on every node holding the model; it is mounted read-only at
	// Path (then an absolute path in the container) and checked on every node.
	HostDir string `json:"host_dir,omitempty"`
	// Sync is "" (a node lacking files fails preflight) or "from-head": the agents copy
	// what a node lacks from the head's node over the planned subnet before Ray starts.
	Sync string `json:"sync,omitempty"`
	// Checksums makes the preflight hash every file on every node (reads every byte:
	// minutes for a large model), so nodes are compared by content; by default they are
	// compared by name and size. A model.sync copy verifies every file it copies by its
	// hash either way (the head hashes what it sends), so it stays opt-in: the bytes it
	// reads at every deploy buy only the comparison of files already in place.
	Checksums bool `json:"checksums,omitempty"`
	// Source is "" (the nodes hold the model, or vLLM downloads it on each) or "hub": the
	// head's agent downloads the Hugging Face name's files vLLM needs (only those:
	// hub.Select) once into its hf_cache, with secrets.hf_token and from the head's
	// HF_ENDPOINT (nodes[].env, a mirror; the agent's policy must allow it), and the
	// other nodes receive them from the head as model.sync: from-head copies. The
	// revision is resolved to a commit when the deploy plans, and that commit is what
	// every node gets.
	Source string `json:"source,omitempty"`
}

// Model sources.
const (
	SourceNodes = ""
	SourceHub   = "hub"
)

// FromHub says whether the head downloads the model from the hub (model.source: hub).
func (m Model) FromHub() bool { return m.Source == SourceHub }

// HubEndpoint is the hub the head downloads from: the head's HF_ENDPOINT (nodes[].env),
// as huggingface_hub reads it in vLLM's container; "" means huggingface.co.
func (c Cluster) HubEndpoint() string { return c.Head().Env["HF_ENDPOINT"] }

// Model sync modes.
const (
	SyncNone     = ""
	SyncFromHead = "from-head"
)

// IsHFName says whether the model path is a Hugging Face name (org/name) rather than a
// path in the container.
func (m Model) IsHFName() bool { return m.Path != "" && !strings.HasPrefix(m.Path, "/") }

// Parallel holds vLLM's parallelism sizes; Tensor x Pipeline GPUs are needed in all.
type Parallel struct {
	Tensor   int `json:"tensor"`
	Pipeline int `json:"pipeline,omitempty"`
}

// Node is one GPU machine with its node agent.
type Node struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// DockerHost is the node's engine address as seen from its agent:
	// unix:///var/run/docker.sock (default), tcp://host:2376, ssh://user@host.
	DockerHost string `json:"docker_host,omitempty"`
	// GPUs, when set, is the node's GPU count; when zero the agent detects it. The spec
	// writes it as a count (gpus: 2) or as the GPUs' indices (gpus: [0, 1], GPUIndices):
	// with indices it is their number.
	GPUs int `json:"gpus,omitempty"`
	// GPUIndices are the node's GPUs this cluster takes, by the driver's index (what
	// nvidia-smi lists, NVIDIA_VISIBLE_DEVICES names), when the spec lists them: the engine
	// container is given exactly these (a Docker device request by ID), the fleet check
	// compares them with other clusters', and the probe checks each is one of the node's.
	// Read from and written to the same key as GPUs (Node's JSON methods).
	GPUIndices []int `json:"-"`
	// Interfaces are interface-name globs preferred on this node (names differ per node).
	Interfaces []string `json:"interfaces,omitempty"`
	// Env is extra environment for every container on this node.
	Env map[string]string `json:"env,omitempty"`
	// Address, when set, is the node's address the plan must use (an IPv4 address the node
	// holds): signed with the spec, every agent then refuses a plan that puts this node, or
	// the Ray head or rendezvous it joins, at another address.
	Address string `json:"address,omitempty"`
	// UnifiedMemory, when set, says whether this node's GPUs compute in host memory (a
	// DGX Spark's GB10): it replaces what the agent detects (docs/operations.md, "Host
	// memory"). On unified memory --gpu-memory-utilization is a share of the host's RAM.
	UnifiedMemory *bool `json:"unified_memory,omitempty"`
}

// nodeJSON is Node without its JSON methods.
type nodeJSON Node

// UnmarshalJSON reads gpus as a count or as a list of GPU indices.
func (n *Node) UnmarshalJSON(b []byte) error {
	var w struct {
		nodeJSON
		GPUs json.RawMessage `json:"gpus,omitempty"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*n = Node(w.nodeJSON)
	n.GPUs, n.GPUIndices = 0, nil
	g := bytes.TrimSpace(w.GPUs)
	switch {
	case len(g) == 0 || string(g) == "null":
	case g[0] == '[':
		var ids []int
		if err := json.Unmarshal(g, &ids); err != nil {
			return fmt.Errorf("gpus: want a count or a list of GPU indices, got %s", g)
		}
		if ids == nil {
			ids = []int{}
		}
		n.GPUs, n.GPUIndices = len(ids), ids
	default:
		if err := json.Unmarshal(g, &n.GPUs); err != nil {
			return fmt.Errorf("gpus: want a count or a list of GPU indices, got %s", g)
		}
	}
	return nil
}

// MarshalJSON writes gpus as the spec gave it: a count, or the list of indices. A node
// without indices encodes exactly as before they existed (the spec's hash is unchanged).
func (n Node) MarshalJSON() ([]byte, error) {
	if n.GPUIndices != nil {
		n.GPUs = len(n.GPUIndices)
	}
	b, err := json.Marshal(nodeJSON(n))
	if err != nil || n.GPUIndices == nil {
		return b, err
	}
	ids, err := json.Marshal(n.GPUIndices)
	if err != nil {
		return nil, err
	}
	// gpus is Node's fourth key, after three strings: its first occurrence is the key
	// (a quote inside a string is escaped). With indices GPUs is their count, so the key
	// is there unless the list is empty.
	key := []byte(`"gpus":`)
	i := bytes.Index(b, key)
	if i < 0 {
		// An empty list: insert it where the count would be (after docker_host, role or name).
		out, _ := json.Marshal(struct {
			nodeJSON
			GPUs []int `json:"gpus"`
		}{nodeJSON(n), n.GPUIndices})
		return out, nil
	}
	j := i + len(key)
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	return slices.Concat(b[:i+len(key)], ids, b[j:]), nil
}

// Network holds the operator's preferences for the subnet choice.
type Network struct {
	// Subnet, when set, is the only subnet the plan may choose (an IPv4 CIDR): signed with
	// the spec, every agent then refuses a planned address, Ray head or rendezvous outside it.
	Subnet            string   `json:"subnet,omitempty"`
	PreferCIDRs       []string `json:"prefer_cidrs,omitempty"`
	ExcludeCIDRs      []string `json:"exclude_cidrs,omitempty"`
	PreferInterfaces  []string `json:"prefer_interfaces,omitempty"`
	ExcludeInterfaces []string `json:"exclude_interfaces,omitempty"`
}

// Ports are the TCP ports the deployment listens on (host networking).
type Ports struct {
	VLLM      int `json:"vllm,omitempty"`
	Ray       int `json:"ray,omitempty"`
	Dashboard int `json:"dashboard,omitempty"`
	// Master is torch.distributed's rendezvous port on the head (executor mp: vLLM's
	// --master-port; default 29501, vLLM's). Not filled in by WithDefaults: a default
	// there would change every existing spec's hash.
	Master int `json:"master,omitempty"`
}

// Executors.
const (
	ExecutorAuto = "auto"
	ExecutorRay  = "ray"
	ExecutorMP   = "mp"
)

// DefaultMasterPort is vLLM's ParallelConfig.master_port.
const DefaultMasterPort = 29501

// MasterPort is ports.master, or vLLM's default.
func (p Ports) MasterPort() int {
	if p.Master > 0 {
		return p.Master
	}
	return DefaultMasterPort
}

// Secrets are references resolved on the node, never values.
type Secrets struct {
	HFToken *SecretRef `json:"hf_token,omitempty"`
	// APIKey is vLLM's API key (VLLM_API_KEY in the environment of vLLM's process on the
	// head): with one, vLLM answers /v1/* only with `Authorization: Bearer KEY`, and
	// tpdeploy's readiness checks send it, resolved by the head's agent.
	APIKey *SecretRef `json:"api_key,omitempty"`
	// RayToken is the Ray cluster's authentication token (Ray's token mode, Ray ≥ 2.52;
	// on by default at `ray start --head` from Ray 2.59 whenever a token exists): with one,
	// the Ray containers run with RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH naming a file
	// the agent writes into them, and the agents' GCS calls send it.
	RayToken *SecretRef `json:"ray_token,omitempty"`
}

// SecretRef names where a node agent finds a secret: an environment variable of the agent
// or a file on the node. Exactly one is set.
type SecretRef struct {
	Env  string `json:"env,omitempty"`
	File string `json:"file,omitempty"`
}

// Timeouts bound each deploy step. Zero means the default.
type Timeouts struct {
	// NodeAgent is how long a node's task may wait for its agent to pick it up: it is
	// what turns "agent down" into an error in seconds.
	NodeAgent Duration `json:"node_agent,omitempty"`
	Probe     Duration `json:"probe,omitempty"`
	Preflight Duration `json:"preflight,omitempty"`
	RayStart  Duration `json:"ray_start,omitempty"`
	Placement Duration `json:"placement,omitempty"`
	Launch    Duration `json:"launch,omitempty"`
	Serving   Duration `json:"serving,omitempty"`
	Teardown  Duration `json:"teardown,omitempty"`
	// ModelSync bounds the copy of a model to the nodes that lack it (model.sync).
	ModelSync Duration `json:"model_sync,omitempty"`
	// LoadStall ends a deploy whose vLLM has made no progress (no output, no shard, no
	// phase) for this long while it loads (LoadStalled), rather than at timeouts.serving.
	LoadStall Duration `json:"load_stall,omitempty"`
}

// Roles.
const (
	RoleHead   = "head"
	RoleWorker = "worker"
)

// Defaults.
const (
	DefaultExecutor      = ExecutorAuto
	DefaultVLLMPort      = 8000
	DefaultRayPort       = 6379
	DefaultDashboardPort = 8265
	DefaultDockerHost    = "unix:///var/run/docker.sock"
	DefaultHFCache       = "/root/.cache/huggingface"
)

// DefaultTimeouts are used for every timeout the spec leaves at zero.
var DefaultTimeouts = Timeouts{
	NodeAgent: Duration(10 * time.Second),
	Probe:     Duration(30 * time.Second),
	Preflight: Duration(30 * time.Second),
	RayStart:  Duration(2 * time.Minute),
	Placement: Duration(2 * time.Minute),
	Launch:    Duration(2 * time.Minute),
	Serving:   Duration(30 * time.Minute),
	Teardown:  Duration(2 * time.Minute),
}

// DefaultModelSyncTimeout bounds a model copy when timeouts.model_sync is not set. (It is
// not filled in by WithDefaults: a default there would change every existing spec's hash.)
const DefaultModelSyncTimeout = 2 * time.Hour

// ModelSyncTimeout is timeouts.model_sync, or its default.
func (t Timeouts) ModelSyncTimeout() time.Duration {
	if t.ModelSync > 0 {
		return t.ModelSync.D()
	}
	return DefaultModelSyncTimeout
}

// DefaultLoadStall bounds a load without progress when timeouts.load_stall is not set (not
// filled in by WithDefaults, like model_sync, so existing specs keep their hash). vLLM
// prints a line at least at every shard and at every phase of its start-up (profiling,
// CUDA graph capture, the API server), and its slowest silent phase seen in the lab's
// measurements and upstream threads, CUDA graph capture of a large model or torch.compile,
// takes a few minutes: five minutes is past that and well short of timeouts.serving.
const DefaultLoadStall = 5 * time.Minute

// LoadStallTimeout is timeouts.load_stall, or its default.
func (t Timeouts) LoadStallTimeout() time.Duration {
	if t.LoadStall > 0 {
		return t.LoadStall.D()
	}
	return DefaultLoadStall
}

// Parse decodes a YAML or JSON spec strictly (unknown fields and duplicate keys are errors),
// applies defaults and validates it. Every problem is reported at once with its field path,
// unknown keys among them (with the field they most likely meant).
func Parse(data []byte) (Cluster, error) {
	var c Cluster
	if len(bytes.TrimSpace(data)) == 0 {
		return c, fmt.Errorf("spec is empty")
	}
	var problems []FieldError
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		// A duplicate key is a problem among others; a syntax error ends the parse.
		lenient, lerr := yaml.YAMLToJSON(data)
		if lerr != nil {
			return Cluster{}, fmt.Errorf("parse spec: %s", cleanDecodeError(err))
		}
		problems = append(problems, FieldError{Field: "spec", Message: cleanDecodeError(err)})
		js = lenient
	}
	var tree any
	if err := json.Unmarshal(js, &tree); err != nil {
		return Cluster{}, fmt.Errorf("parse spec: %s", cleanDecodeError(err))
	}
	if _, ok := tree.(map[string]any); !ok {
		return Cluster{}, fmt.Errorf("parse spec: a spec is a mapping of fields (name, image, model, ...), got %s", jsonKind(tree))
	}
	unknownFields(tree, reflect.TypeFor[Cluster](), "", &problems)
	if err := json.Unmarshal(js, &c); err != nil {
		problems = append(problems, decodeProblem(err))
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		var ve *ValidationError
		if !errors.As(err, &ve) {
			return Cluster{}, err
		}
		for _, p := range ve.Problems {
			if !coveredBy(p.Field, problems) {
				problems = append(problems, p)
			}
		}
	}
	if len(problems) > 0 {
		return Cluster{}, &ValidationError{Problems: problems}
	}
	return c, nil
}

// decodeProblem is a decoding error as a problem at its field, where the decoder says.
func decodeProblem(err error) FieldError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return FieldError{Field: te.Field, Message: fmt.Sprintf("want %s, got %s", jsonTypeName(te.Type), te.Value)}
	}
	return FieldError{Field: "spec", Message: cleanDecodeError(err)}
}

// coveredBy says a validation problem is about a field that already failed to decode
// (its zero value would only repeat that problem in other words).
func coveredBy(field string, problems []FieldError) bool {
	for _, p := range problems {
		if p.Field == field || strings.HasPrefix(field, p.Field+".") || strings.HasPrefix(field, p.Field+"[") {
			return true
		}
	}
	return false
}

func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return t.String()
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "a list"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// cleanDecodeError drops the library's layered prefixes so the operator sees the field.
func cleanDecodeError(err error) string {
	msg := err.Error()
	for _, p := range []string{"error converting YAML to JSON: ", "error unmarshaling JSON: ", "while decoding JSON: ", "json: "} {
		msg = strings.ReplaceAll(msg, p, "")
	}
	return strings.TrimSpace(msg)
}

// WithDefaults returns a copy with every unset optional field given its default.
func (c Cluster) WithDefaults() Cluster {
	if c.Executor == "" {
		c.Executor = DefaultExecutor
	}
	if c.Parallel.Pipeline == 0 {
		c.Parallel.Pipeline = 1
	}
	if c.Model.ServedName == "" {
		c.Model.ServedName = c.Model.Path
	}
	if c.Ports.VLLM == 0 {
		c.Ports.VLLM = DefaultVLLMPort
	}
	if c.Ports.Ray == 0 {
		c.Ports.Ray = DefaultRayPort
	}
	if c.Ports.Dashboard == 0 {
		c.Ports.Dashboard = DefaultDashboardPort
	}
	if c.HFCache == "" {
		c.HFCache = DefaultHFCache
	}
	if c.ImageMismatch == "" {
		c.ImageMismatch = "fail"
	}
	c.Timeouts = c.Timeouts.withDefaults()
	c.Canary = c.Canary.WithDefaults()
	nodes := make([]Node, len(c.Nodes))
	for i, n := range c.Nodes {
		if n.DockerHost == "" {
			n.DockerHost = DefaultDockerHost
		}
		if n.GPUIndices != nil {
			n.GPUs = len(n.GPUIndices)
		}
		nodes[i] = n
	}
	c.Nodes = nodes
	return c
}

func (t Timeouts) withDefaults() Timeouts {
	d := DefaultTimeouts
	pick := func(v, def Duration) Duration {
		if v == 0 {
			return def
		}
		return v
	}
	return Timeouts{
		NodeAgent: pick(t.NodeAgent, d.NodeAgent),
		Probe:     pick(t.Probe, d.Probe),
		Preflight: pick(t.Preflight, d.Preflight),
		RayStart:  pick(t.RayStart, d.RayStart),
		Placement: pick(t.Placement, d.Placement),
		Launch:    pick(t.Launch, d.Launch),
		Serving:   pick(t.Serving, d.Serving),
		Teardown:  pick(t.Teardown, d.Teardown),
		ModelSync: t.ModelSync,
		LoadStall: t.LoadStall,
	}
}

// NodeRank is a node's --node-rank in vLLM's own multi-node mode: 0 for the head, then the
// workers in the spec's order; -1 for a node the spec does not name.
func (c Cluster) NodeRank(name string) int {
	if c.Head().Name == name {
		return 0
	}
	r := 1
	for _, n := range c.Nodes {
		if n.Name == name {
			return r
		}
		if n.Role != RoleHead {
			r++
		}
	}
	return -1
}

// Head returns the head node. Valid specs have exactly one.
func (c Cluster) Head() Node {
	for _, n := range c.Nodes {
		if n.Role == RoleHead {
			return n
		}
	}
	return Node{}
}

// Node returns the named node.
func (c Cluster) Node(name string) (Node, bool) {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// WorldSize is the number of GPUs vLLM needs: tensor x pipeline.
func (c Cluster) WorldSize() int { return c.Parallel.Tensor * max(c.Parallel.Pipeline, 1) }

// Hash is a stable digest of the defaulted spec; equal specs have equal hashes, so a
// container labelled with it can be adopted instead of replaced.
func (c Cluster) Hash() string {
	sum := sha256.Sum256(c.Canonical())
	return hex.EncodeToString(sum[:8])
}

// Canonical is the defaulted spec's JSON, the one encoding of a spec: what Hash digests and
// what an operator signs (package intent). encoding/json writes struct fields in their
// order and map keys sorted, so equal specs give equal bytes. The canary is left out: it
// changes nothing vLLM runs, only how the supervisor asks.
func (c Cluster) Canonical() []byte {
	d := c.WithDefaults()
	d.Canary = Canary{}
	b, err := json.Marshal(d)
	if err != nil {
		// Cluster holds only strings, numbers, slices and maps: Marshal cannot fail.
		panic(fmt.Sprintf("spec: marshal: %v", err))
	}
	return b
}

// Duration is a time.Duration written as a Go duration string ("30s", "2m") in YAML and JSON.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string such as "90s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"30s\" or \"2m\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: want a form like \"30s\" or \"2m\"", s)
	}
	*d = Duration(v)
	return nil
}

// ParseCIDRs parses the network preferences; Validate has already rejected bad ones.
// PinnedSubnet is network.subnet, parsed (invalid when unset or malformed).
func (n Network) PinnedSubnet() netip.Prefix {
	p, err := netip.ParsePrefix(n.Subnet)
	if err != nil {
		return netip.Prefix{}
	}
	return p.Masked()
}

// PinnedAddress is nodes[].address, parsed (invalid when unset or malformed).
func (n Node) PinnedAddress() netip.Addr {
	a, err := netip.ParseAddr(n.Address)
	if err != nil {
		return netip.Addr{}
	}
	return a
}

// PlannedEnv says whether the plan sets the variable on every node (VLLM_HOST_IP,
// RAY_ADDRESS, the interface and HCA variables); a node's env may not.
func PlannedEnv(name string) bool { return plannedEnv[name] != "" }

// PlanDefaultEnv says whether the plan may set the variable to value on a node whose own
// env does not set it (where the node's env sets it, that value stands): NCCL_ALGO=Ring on a
// switchless ring, where NCCL's tree would connect uncabled pairs, and NCCL_IB_DISABLE=1 on
// a fabric whose cables NCCL cannot use (netplan's fabric, channelNICs: with NCCL_IB_HCA
// unset NCCL's IB plugin would open every HCA), and NCCL ≥ 2.30.7's subnet-aware routing
// on such a fabric (NCCL_IB_SUBNET_AWARE_ROUTING=1 and NCCL_IB_SUBNET_PREFIX_LEN 1-32: it
// only chooses among the HCAs NCCL_IB_HCA lists). Only the restrictions themselves: any
// other value is the operator's to sign.
func PlanDefaultEnv(name, value string) bool {
	switch name {
	case "NCCL_IB_SUBNET_PREFIX_LEN":
		n, err := strconv.Atoi(value)
		return err == nil && n >= 1 && n <= 32 && strconv.Itoa(n) == value
	}
	return (name == "NCCL_ALGO" && value == "Ring") || (name == "NCCL_IB_DISABLE" && value == "1") || (name == "NCCL_IB_SUBNET_AWARE_ROUTING" && value == "1")
}

func ParseCIDRs(cidrs []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
