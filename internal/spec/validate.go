package spec

import (
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"
)

// FieldError is one problem with the spec, at a field path such as "nodes[1].name".
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// ValidationError lists every problem found in a spec.
type ValidationError struct {
	Problems []FieldError `json:"problems"`
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Error()
	}
	if len(lines) == 1 {
		return "invalid spec: " + lines[0]
	}
	return fmt.Sprintf("invalid spec (%d problems):\n  %s", len(lines), strings.Join(lines, "\n  "))
}

var (
	clusterNameRE = regexp.MustCompile(`^[a-z0-9-]+$`)
	// Node names become task-queue and container-name parts; hostnames fit.
	nodeNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)
	envKeyRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// A pragmatic image reference check: [registry[:port]/]path[:tag][@digest].
	imageRE = regexp.MustCompile(`^[a-z0-9]+([._-]{1,2}[a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]{1,2}[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$`)
)

// plannedEnv are the variables the plan derives per node. Letting a node's env override
// them would bring back the hand-tuning this tool exists to remove.
var plannedEnv = map[string]string{
	"VLLM_HOST_IP":       "the plan's address for the node",
	"NCCL_SOCKET_IFNAME": "the plan's interface (use network.prefer_interfaces or nodes[].interfaces)",
	"GLOO_SOCKET_IFNAME": "the plan's interface (use network.prefer_interfaces or nodes[].interfaces)",
	"TP_SOCKET_IFNAME":   "the plan's interface (use network.prefer_interfaces or nodes[].interfaces)",
	"NCCL_IB_HCA":        "the plan's RDMA devices",
	"RAY_ADDRESS":        "the plan's head address",
}

// nicSelectionEnv are vLLM's per-GPU NIC selection (vLLM PR #42083,
// vllm/v1/executor/vllm_net_devices.py set_worker_gpu_nic_mapping): with both set, each
// worker PREPENDS its PCIe-local HCA to every listed variable (value = f"{rdma_dev}{suffix},
// {existing}"), so the plan's exact NCCL_IB_HCA "=a:1,b:1" becomes "mlx5_X:1,=a:1,b:1":
// NCCL's "=" only counts first, the exact match is lost, and the rails NCCL uses are no
// longer the ones the data-plane proof measured (the proof never sees the per-worker value).
var nicSelectionEnv = map[string]bool{"VLLM_GPU_NIC_PCIE_MAPPING": true, "VLLM_NIC_SELECTION_VARS": true}

const nicSelectionWhy = "vLLM's per-GPU NIC selection (vLLM PR #42083) prepends each worker's PCIe-local HCA to NCCL_IB_HCA, so NCCL would use rails other than the plan's exact list that the data-plane proof measured; the plan's NCCL_IB_HCA already lists every planned HCA"

// secretEnv are variables that carry secret values; they belong in secrets as references.
var secretEnv = map[string]bool{"HF_TOKEN": true, "HUGGING_FACE_HUB_TOKEN": true}

// rayAuthEnv are Ray's token-authentication variables (python/ray/_private/authentication,
// src/ray/rpc/authentication/authentication_token_loader.cc): tpdeploy sets them from
// secrets.ray_token.
var rayAuthEnv = map[string]bool{"RAY_AUTH_TOKEN": true, "RAY_AUTH_TOKEN_PATH": true, "RAY_AUTH_MODE": true}

// secretLooking says a variable name looks like it carries a secret: *_TOKEN, *_KEY,
// *_SECRET, *PASSWORD*. The spec is recorded in Temporal's history, so such values are
// refused there and belong in secrets as references resolved on the node.
func secretLooking(name string) bool {
	n := strings.ToUpper(name)
	return strings.HasSuffix(n, "_TOKEN") || strings.HasSuffix(n, "_KEY") || strings.HasSuffix(n, "_SECRET") || strings.Contains(n, "PASSWORD")
}

// secretArgs are vLLM flags whose value is a secret (vLLM reads --hf_token as --hf-token).
var secretArgs = map[string]bool{"--hf-token": true, "--api-key": true}

const secretsPointer = "secret values do not belong in the spec, which Temporal's history records; " +
	"reference them under secrets (env: a variable of the node agent, or file: a path on the node)"

// maxParallel bounds each parallel size far above any real cluster, so products cannot overflow.
const maxParallel = 4096

// managedArgs are vLLM flags tpdeploy sets from the spec's own fields.
var managedArgs = map[string]string{
	"--tensor-parallel-size":         "parallel.tensor",
	"-tp":                            "parallel.tensor",
	"--pipeline-parallel-size":       "parallel.pipeline",
	"-pp":                            "parallel.pipeline",
	"--distributed-executor-backend": "executor",
	"--host":                         "the plan (the node's planned address)",
	"--port":                         "ports.vllm",
	"--served-model-name":            "model.served_name",
	"--nnodes":                       "nodes (executor mp)",
	"-n":                             "nodes (executor mp)",
	"--node-rank":                    "the node's place in nodes (executor mp)",
	"-r":                             "the node's place in nodes (executor mp)",
	"--master-addr":                  "the plan (the head's planned address)",
	"--master-port":                  "ports.master",
	"--headless":                     "the node's role (executor mp)",
	"--revision":                     "model.revision",
}

// Validate reports every problem in a defaulted spec at once, each with its field path.
func (c Cluster) Validate() error {
	var v validator
	v.name(c.Name)
	if c.Image == "" {
		v.add("image", "required (the vLLM image present on every node, e.g. vllm/vllm-openai:v0.22.1)")
	} else if !imageRE.MatchString(c.Image) {
		v.add("image", fmt.Sprintf("%q is not an image reference", c.Image))
	}
	v.model(c.Model)
	v.parallel(c)
	switch c.Executor {
	case ExecutorAuto, ExecutorRay:
	case ExecutorMP:
		if c.Replicas <= 1 {
			v.mp(c)
		}
	case "native", "multiproc":
		v.add("executor", fmt.Sprintf("%q: vLLM names its native multi-node mode \"mp\"", c.Executor))
	default:
		v.add("executor", fmt.Sprintf("unknown executor %q; supported: auto, ray, mp", c.Executor))
	}
	v.nodes(c.Nodes)
	v.network(c.Network)
	v.addresses(c)
	v.ports(c.Ports)
	if c.HFCache != "" && !strings.HasPrefix(c.HFCache, "/") {
		v.add("hf_cache", fmt.Sprintf("%q must be an absolute path on the node", c.HFCache))
	}
	for _, sr := range []struct {
		field string
		ref   *SecretRef
	}{{"secrets.hf_token", c.Secrets.HFToken}, {"secrets.api_key", c.Secrets.APIKey}, {"secrets.ray_token", c.Secrets.RayToken}} {
		ref := sr.ref
		if ref == nil {
			continue
		}
		switch {
		case ref.Env == "" && ref.File == "":
			v.add(sr.field, "set exactly one of env (a variable of the node agent) or file (a path on the node)")
		case ref.Env != "" && ref.File != "":
			v.add(sr.field, "set only one of env and file")
		case ref.Env != "" && !envKeyRE.MatchString(ref.Env):
			v.add(sr.field+".env", fmt.Sprintf("%q is not an environment variable name (give the name, not the secret)", ref.Env))
		case ref.File != "" && !strings.HasPrefix(ref.File, "/"):
			v.add(sr.field+".file", fmt.Sprintf("%q must be an absolute path on the node", ref.File))
		}
	}
	switch c.ImageMismatch {
	case "fail", "warn":
	default:
		v.add("image_mismatch", fmt.Sprintf("%q must be \"fail\" or \"warn\"", c.ImageMismatch))
	}
	switch c.DataPlane {
	case "", DataPlaneRequire, DataPlaneWarn, DataPlaneSkip:
	default:
		v.add("data_plane", fmt.Sprintf("%q must be \"require\", \"warn\" or \"skip\"", c.DataPlane))
	}
	v.timeouts(c.Timeouts)
	v.canary(c.Canary)
	v.router(c)
	v.replicas(c)
	return v.err()
}

type validator struct{ problems []FieldError }

func (v *validator) add(field, msg string) {
	v.problems = append(v.problems, FieldError{Field: field, Message: msg})
}

func (v *validator) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: v.problems}
}

func (v *validator) name(name string) {
	switch {
	case name == "":
		v.add("name", "required")
	case !clusterNameRE.MatchString(name):
		v.add("name", fmt.Sprintf("%q must match [a-z0-9-]+", name))
	case len(name) > 40:
		v.add("name", fmt.Sprintf("%q is longer than 40 characters", name))
	}
}

func (v *validator) model(m Model) {
	if strings.TrimSpace(m.Path) == "" {
		v.add("model.path", "required (a path in the container or a Hugging Face model name)")
	}
	switch {
	case m.HostDir == "":
	case !strings.HasPrefix(m.HostDir, "/") || path.Clean(m.HostDir) != m.HostDir:
		v.add("model.host_dir", fmt.Sprintf("%q must be a clean absolute path on the nodes", m.HostDir))
	case m.IsHFName():
		v.add("model.host_dir", fmt.Sprintf("is mounted at model.path, which must then be an absolute path in the container, not the Hugging Face name %q", m.Path))
	}
	if m.Revision != "" {
		switch {
		case m.HostDir != "" || !m.IsHFName():
			v.add("model.revision", "only for a Hugging Face name: a directory has no revisions")
		case !validRef(m.Revision):
			v.add("model.revision", fmt.Sprintf("%q is not a branch, tag or commit", m.Revision))
		}
	}
	switch m.Sync {
	case SyncNone:
	case SyncFromHead:
		if m.HostDir == "" && !m.IsHFName() {
			v.add("model.sync", "from-head copies model.host_dir or a Hugging Face name's snapshot; model.path "+m.Path+" is a path inside the image, which tpdeploy cannot see")
		}
	default:
		v.add("model.sync", fmt.Sprintf("%q must be empty or %q", m.Sync, SyncFromHead))
	}
	switch m.Source {
	case SourceNodes:
	case SourceHub:
		if m.HostDir != "" || !m.IsHFName() {
			v.add("model.source", "hub downloads a Hugging Face name (Org/Name) into hf_cache; model.path "+m.Path+" is not one")
		}
	default:
		v.add("model.source", fmt.Sprintf("%q must be empty or %q", m.Source, SourceHub))
	}
	for _, a := range ExtraArgOptions(m.ExtraArgs) {
		at := fmt.Sprintf("model.extra_args[%d]", a.Index)
		if field, long := managedArg(a.Base); field != "" {
			msg := fmt.Sprintf("%s is set by tpdeploy from %s", a.Flag, field)
			if long != a.Base {
				msg = fmt.Sprintf("%s is an abbreviation of %s, which vLLM's parser accepts; %s is set by tpdeploy from %s", a.Flag, long, long, field)
			}
			v.add(at, msg)
		}
		if why, ok := uncheckableArgs[a.Base]; ok {
			v.add(at, a.Flag+": "+why)
		}
		if secretArgs[a.Base] {
			hint := secretsPointer
			switch a.Base {
			case "--hf-token":
				hint = "secret values do not belong in the spec, which Temporal's history records; use secrets.hf_token with env or file"
			case "--api-key":
				hint = "secret values do not belong in the spec, which Temporal's history records; use secrets.api_key with env or file"
			}
			raw, _, _ := strings.Cut(m.ExtraArgs[a.Index], "=") // never the value: it is the secret
			v.add(at, fmt.Sprintf("%s: %s", raw, hint))
		}
	}
}

// uncheckableArgs are options that would make vLLM read arguments tpdeploy cannot see.
var uncheckableArgs = map[string]string{
	"--config": "vLLM reads further arguments from the file it names, which tpdeploy cannot check; give them in extra_args",
	"--":       "ends the options: vLLM would read what follows as positionals",
	"--model":  "vLLM takes it as the model in place of model.path; set model.path",
}

// managedArg is the spec field a vLLM option tpdeploy sets comes from, and that option's
// full name, for the option itself or an abbreviation of it.
func managedArg(flag string) (field, long string) {
	if f, ok := managedArgs[flag]; ok {
		return f, flag
	}
	for _, name := range sortedKeys(managedArgs) {
		if abbreviates(flag, name) {
			return managedArgs[name], name
		}
	}
	return "", ""
}

// validRef accepts branch names with slashes (refs like "release/v2"), never ".." or a
// leading slash.
func validRef(r string) bool {
	return !strings.HasPrefix(r, "/") && !strings.Contains(r, "..") && !strings.ContainsAny(r, " \\")
}

func (v *validator) parallel(c Cluster) {
	if c.Parallel.Tensor < 1 {
		v.add("parallel.tensor", fmt.Sprintf("%d must be at least 1", c.Parallel.Tensor))
	}
	if c.Parallel.Pipeline < 1 {
		v.add("parallel.pipeline", fmt.Sprintf("%d must be at least 1", c.Parallel.Pipeline))
	}
	if c.Parallel.Tensor > maxParallel {
		v.add("parallel.tensor", fmt.Sprintf("%d is more than %d", c.Parallel.Tensor, maxParallel))
	}
	if c.Parallel.Pipeline > maxParallel {
		v.add("parallel.pipeline", fmt.Sprintf("%d is more than %d", c.Parallel.Pipeline, maxParallel))
	}
	if c.Parallel.Tensor < 1 || c.Parallel.Pipeline < 1 || c.Parallel.Tensor > maxParallel || c.Parallel.Pipeline > maxParallel {
		return
	}
	if c.Replicas > 1 {
		return // per replica (validator.replicas)
	}
	// GPU counts left to detection are checked after the probe; here only a declared total.
	declared := 0
	for _, n := range c.Nodes {
		if n.GPUs <= 0 {
			return
		}
		declared += n.GPUs
	}
	if need := c.WorldSize(); len(c.Nodes) > 0 && need > declared {
		v.add("parallel", fmt.Sprintf("tensor %d x pipeline %d = %d GPUs, nodes provide %d",
			c.Parallel.Tensor, c.Parallel.Pipeline, need, declared))
	}
}

// gpuIndices checks a node's list of GPU indices: at least one, each a driver index
// (0 or more) listed once. Whether the node has them is the probe's to say.
func (v *validator) gpuIndices(at string, ids []int) {
	if len(ids) == 0 {
		v.add(at, "[] lists no GPU: give the node's GPU indices, a count, or leave gpus out (detect)")
		return
	}
	seen := map[int]bool{}
	for j, g := range ids {
		switch {
		case g < 0 || g >= maxParallel:
			v.add(fmt.Sprintf("%s[%d]", at, j), fmt.Sprintf("%d is not a GPU index (0 to %d)", g, maxParallel-1))
		case seen[g]:
			v.add(fmt.Sprintf("%s[%d]", at, j), fmt.Sprintf("GPU %d is listed twice", g))
		}
		seen[g] = true
	}
}

func (v *validator) nodes(nodes []Node) {
	if len(nodes) == 0 {
		v.add("nodes", "at least one node is required")
		return
	}
	seen := map[string]int{}
	heads := 0
	for i, n := range nodes {
		at := fmt.Sprintf("nodes[%d]", i)
		switch {
		case n.Name == "":
			v.add(at+".name", "required")
		case !nodeNameRE.MatchString(n.Name):
			v.add(at+".name", fmt.Sprintf("%q must be lower-case letters, digits, '-' and '.'", n.Name))
		default:
			if _, dup := seen[n.Name]; dup {
				v.add(at+".name", fmt.Sprintf("duplicate %q", n.Name))
			} else {
				seen[n.Name] = i
			}
		}
		switch n.Role {
		case RoleHead:
			heads++
		case RoleWorker:
		case "":
			v.add(at+".role", "required: head or worker")
		default:
			v.add(at+".role", fmt.Sprintf("%q must be head or worker", n.Role))
		}
		if n.GPUIndices != nil {
			v.gpuIndices(at+".gpus", n.GPUIndices)
		} else if n.GPUs < 0 || n.GPUs > maxParallel {
			v.add(at+".gpus", fmt.Sprintf("%d must be between 0 (detect) and %d", n.GPUs, maxParallel))
		}
		if err := checkDockerHost(n.DockerHost); err != nil {
			v.add(at+".docker_host", err.Error())
		}
		for j, g := range n.Interfaces {
			if _, err := path.Match(g, ""); err != nil || g == "" {
				v.add(fmt.Sprintf("%s.interfaces[%d]", at, j), fmt.Sprintf("%q is not a valid glob", g))
			}
		}
		for _, k := range sortedKeys(n.Env) {
			field := fmt.Sprintf("%s.env.%s", at, k)
			switch {
			case !envKeyRE.MatchString(k):
				v.add(field, "not a valid environment variable name")
			case codeExec(k) != "":
				v.add(field, fmt.Sprintf("node %s: %s makes code run in its containers (%s): refused in every spec; an operator who needs it sets it in the image", n.Name, k, codeExec(k)))
			case plannedEnv[k] != "":
				v.add(field, "is set per node from "+plannedEnv[k])
			case nicSelectionEnv[k]:
				v.add(field, fmt.Sprintf("node %s: refused: %s", n.Name, nicSelectionWhy))
			case secretEnv[k]:
				v.add(field, "secret values do not belong in the spec; use secrets.hf_token with env or file")
			case k == "VLLM_API_KEY":
				v.add(field, "secret values do not belong in the spec; use secrets.api_key with env or file")
			case rayAuthEnv[k]:
				v.add(field, "Ray's token authentication is set from secrets.ray_token (a reference resolved on the node); a value here would be in Temporal's history and in docker inspect")
			case secretLooking(k):
				v.add(field, "looks like a secret: "+secretsPointer)
			}
		}
	}
	switch {
	case heads == 0:
		v.add("nodes", "no node has role head; exactly one must")
	case heads > 1:
		v.add("nodes", fmt.Sprintf("%d nodes have role head; exactly one must", heads))
	}
}

func codeExec(name string) string {
	why, _ := CodeExecEnv(name)
	return why
}

func checkDockerHost(h string) error {
	if h == "" {
		return nil
	}
	u, err := url.Parse(h)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", h, err)
	}
	switch u.Scheme {
	case "unix":
		if u.Path == "" {
			return fmt.Errorf("%q has no socket path", h)
		}
	case "tcp", "ssh":
		if u.Host == "" {
			return fmt.Errorf("%q has no host", h)
		}
	default:
		return fmt.Errorf("%q: scheme must be unix, tcp or ssh", h)
	}
	return nil
}

func (v *validator) network(n Network) {
	cidrs := func(field string, list []string) map[netip.Prefix]bool {
		set := map[netip.Prefix]bool{}
		for i, s := range list {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				v.add(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("%q is not a CIDR such as 192.168.200.0/24", s))
				continue
			}
			set[p.Masked()] = true
		}
		return set
	}
	prefer := cidrs("network.prefer_cidrs", n.PreferCIDRs)
	exclude := cidrs("network.exclude_cidrs", n.ExcludeCIDRs)
	for i, s := range n.PreferCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil && exclude[p.Masked()] && prefer[p.Masked()] {
			v.add(fmt.Sprintf("network.prefer_cidrs[%d]", i), fmt.Sprintf("%s is also excluded", s))
		}
	}
	globs := func(field string, list []string) {
		for i, g := range list {
			if _, err := path.Match(g, ""); err != nil || g == "" {
				v.add(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("%q is not a valid glob", g))
			}
		}
	}
	globs("network.prefer_interfaces", n.PreferInterfaces)
	globs("network.exclude_interfaces", n.ExcludeInterfaces)
	if n.Subnet != "" {
		p, err := netip.ParsePrefix(n.Subnet)
		switch {
		case err != nil || !p.Addr().Is4():
			v.add("network.subnet", fmt.Sprintf("%q is not an IPv4 CIDR such as 192.168.200.0/24", n.Subnet))
		case p != p.Masked():
			v.add("network.subnet", fmt.Sprintf("%q is not a subnet: write %s", n.Subnet, p.Masked()))
		default:
			for _, ex := range ParseCIDRs(n.ExcludeCIDRs) { // in order: the verdict is recorded
				if ex.Overlaps(p) {
					v.add("network.subnet", fmt.Sprintf("%s overlaps network.exclude_cidrs %s", p, ex))
				}
			}
		}
	}
}

// addresses checks nodes[].address: IPv4 unicast, one per node, inside network.subnet.
func (v *validator) addresses(c Cluster) {
	subnet := c.Network.PinnedSubnet()
	owner := map[netip.Addr]string{}
	for i, n := range c.Nodes {
		if n.Address == "" {
			continue
		}
		at := fmt.Sprintf("nodes[%d].address", i)
		a, err := netip.ParseAddr(n.Address)
		switch {
		case err != nil || !a.Is4():
			v.add(at, fmt.Sprintf("%q is not an IPv4 address such as 192.168.200.11", n.Address))
		case a.IsLoopback() || a.IsUnspecified() || a.IsLinkLocalUnicast() || a.IsMulticast():
			v.add(at, fmt.Sprintf("%s is not an address other nodes can reach (loopback, unspecified, link-local or multicast)", a))
		case subnet.IsValid() && !subnet.Contains(a):
			v.add(at, fmt.Sprintf("%s is not in network.subnet %s", a, subnet))
		case owner[a] != "":
			v.add(at, fmt.Sprintf("%s is also %s's", a, owner[a]))
		default:
			owner[a] = n.Name
		}
	}
}

// mp checks what vLLM's own multi-node mode needs: the world splits evenly over the nodes
// (vLLM runs world/nnodes ranks on each, ParallelConfig's local_world_size), and each node
// has that many GPUs when the spec says.
func (v *validator) mp(c Cluster) {
	n := len(c.Nodes)
	world := c.WorldSize()
	if n == 0 || world < 1 {
		return
	}
	if world%n != 0 {
		v.add("executor", fmt.Sprintf("mp runs tensor x pipeline = %d ranks as %d per node over %d nodes; %d does not divide by %d (use ray, or a layout that does)", world, world/n, n, world, n))
		return
	}
	for i, node := range c.Nodes {
		if node.GPUs > 0 && node.GPUs < world/n {
			v.add(fmt.Sprintf("nodes[%d].gpus", i), fmt.Sprintf("%d, but mp runs %d ranks on every node", node.GPUs, world/n))
		}
	}
}

func (v *validator) ports(p Ports) {
	seen := map[int]string{}
	for _, f := range []struct {
		name string
		port int
	}{{"ports.vllm", p.VLLM}, {"ports.ray", p.Ray}, {"ports.dashboard", p.Dashboard}, {"ports.master", p.MasterPort()}} {
		if f.port < 1 || f.port > 65535 {
			v.add(f.name, fmt.Sprintf("%d is not a TCP port (1-65535)", f.port))
			continue
		}
		if other, dup := seen[f.port]; dup {
			v.add(f.name, fmt.Sprintf("%d is also %s", f.port, other))
		}
		seen[f.port] = f.name
	}
}

func (v *validator) canary(c Canary) {
	if c.Every < 0 || (c.Every > 0 && c.Every.D() < time.Second) {
		v.add("canary.every", fmt.Sprintf("%s: the canary runs at most once a second", c.Every.D()))
	}
	if c.Timeout < 0 || (c.Timeout > 0 && c.Timeout.D() < 100*time.Millisecond) {
		v.add("canary.timeout", fmt.Sprintf("%s: want at least 100ms", c.Timeout.D()))
	}
	if c.Failures < 0 || c.Failures > 100 {
		v.add("canary.failures", fmt.Sprintf("%d: want 1 to 100 failures in a row", c.Failures))
	}
}

// router: the router runs on a named node (any of the fleet's: its agent is the one the
// deploy asks), on a port none of the cluster's own ports is.
func (v *validator) router(c Cluster) {
	r := c.Router
	if r == nil {
		return
	}
	if r.Node == "" {
		v.add("router.node", "required: the node whose agent runs the router (any node of the fleet)")
	}
	p := r.APIPort()
	if p < 1 || p > 65535 {
		v.add("router.port", fmt.Sprintf("%d is not a TCP port (1-65535)", r.Port))
		return
	}
	d := c.WithDefaults().Ports
	for _, f := range []struct {
		name string
		port int
	}{{"ports.vllm", d.VLLM}, {"ports.ray", d.Ray}, {"ports.dashboard", d.Dashboard}, {"ports.master", d.Master}} {
		if f.port == p {
			v.add("router.port", fmt.Sprintf("%d is also %s", p, f.name))
		}
	}
}

func (v *validator) timeouts(t Timeouts) {
	for _, f := range []struct {
		name string
		d    Duration
	}{
		{"node_agent", t.NodeAgent}, {"probe", t.Probe}, {"preflight", t.Preflight},
		{"ray_start", t.RayStart}, {"placement", t.Placement}, {"launch", t.Launch},
		{"serving", t.Serving}, {"teardown", t.Teardown},
	} {
		if f.d < 0 {
			v.add("timeouts."+f.name, fmt.Sprintf("%s must be positive", f.d.D()))
		}
	}
}
