package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Labels on every container tpdeploy starts: teardown finds its containers by them, never
// by name patterns.
const (
	LabelCluster    = "tpdeploy.cluster"
	LabelDeployment = "tpdeploy.deployment"
	LabelRole       = "tpdeploy.role"
	LabelNode       = "tpdeploy.node"
	LabelSpecHash   = "tpdeploy.spec-hash"
)

// ContainerOptions are the node-specific parts of a container: how it reaches the node's
// network, GPUs and memory. They are the agent's configuration, not the spec's, because
// they describe the machine (a real node: host networking and IPC, all GPUs; a lab node:
// its node container's network namespace, no GPUs).
type ContainerOptions struct {
	// Network is the container network mode: "host" on real nodes, "container:NAME" in
	// the lab (which is what host networking is for a node that is itself a container).
	Network string `json:"network"`
	// IPC is the IPC mode: "private" (the default): each container has its own IPC
	// namespace and /dev/shm of ShmSize. Never "host": that would share the host's /dev/shm
	// (vLLM's shared-memory broadcast rings, NCCL's segments) and SysV IPC with every
	// other cluster's containers on the node. A node's processes of one cluster (vLLM's
	// workers, Ray's) run in one container, so they need no IPC namespace shared with another.
	IPC string `json:"ipc"`
	// GPUs is "all", "none", or a count.
	GPUs string `json:"gpus"`
	// ShmSize is /dev/shm's size in bytes (0: Docker's default, 64 MiB, too small for
	// PyTorch's shared memory: vLLM's docs ask for --ipc=host or --shm-size).
	ShmSize int64 `json:"shm_size"`
	// Ulimits are docker run --ulimit values, e.g. memlock=-1:-1. Some engines refuse
	// memlock, hence configurable.
	Ulimits []string `json:"ulimits"`
	// StopTimeout is how long a container may take to stop before it is killed.
	StopTimeout time.Duration `json:"stop_timeout"`
	// HostRoot, when set, stands for the node's / : the spec's host paths (hf_cache,
	// model.host_dir) are taken under it, by the engine's binds and by the agent's own
	// reads. The lab's nodes share one host, and each has its own directory; real nodes
	// leave it empty.
	HostRoot string `json:"host_root,omitempty"`
	// CompileCache is the node's directory of vLLM's compilation caches (compilecache.go),
	// CompileCacheDir by default; empty: none kept, the engines compile at every start.
	CompileCache string `json:"compile_cache,omitempty"`
	// Sysfs, when set, is a directory standing for the node's /sys that its containers
	// see at ContainerSysfs (the lab: its nodes share one host whose /sys has none of
	// their HCAs). A real node's containers see the kernel's /sys; empty there.
	Sysfs string `json:"sysfs,omitempty"`
	// CgroupParent, when set, is the cgroup the engine containers are created under
	// (Docker's --cgroup-parent): their memory is then charged to it and bounded by its
	// limit. The lab's nodes are memory-limited containers, and their engines run under
	// the node's own cgroup, so that the node's limit is the node's RAM and the agent's
	// facts (read from that cgroup) count what the engines take, as a real node's
	// /proc/meminfo does. A real node leaves it empty: engines are the host's.
	CgroupParent string `json:"cgroup_parent,omitempty"`
}

// ContainerSysfs is where a container sees Options.Sysfs (a container's own /sys is
// read-only and cannot take a bind mount below it).
const ContainerSysfs = "/run/tpdeploy/sys"

// HostPath is a host path of the spec as the engine (and the agent) sees it.
func (o ContainerOptions) HostPath(p string) string {
	if o.HostRoot == "" {
		return p
	}
	return filepath.Join(o.HostRoot, p)
}

// IPCPrivate is Docker's IPC mode of a namespace no other container can join.
const IPCPrivate = "private"

// DefaultContainerOptions are a real GPU node's: what vLLM's run_cluster.sh uses (host
// network, all GPUs, --shm-size 10.24g), but an IPC namespace per container rather than
// the host's (#36).
func DefaultContainerOptions() ContainerOptions {
	return ContainerOptions{
		Network: "host", IPC: IPCPrivate, GPUs: "all", ShmSize: 10 << 30,
		Ulimits: []string{"memlock=-1:-1", "stack=67108864:67108864"}, StopTimeout: 30 * time.Second,
		CompileCache: CompileCacheDir,
	}
}

// containerSpec is one container tpdeploy runs, built from the plan. Commands are
// argument vectors: nothing from the spec is ever interpreted by a shell.
type containerSpec struct {
	Name       string            `json:"name"`
	Image      string            `json:"image"`
	Entrypoint []string          `json:"entrypoint"`
	Cmd        []string          `json:"cmd"`
	Env        []string          `json:"env"`
	Labels     map[string]string `json:"labels"`
	Binds      []string          `json:"binds,omitempty"`
	// Devices are host:container device paths (the planned HCAs' /dev/infiniband/uverbsN);
	// CapAdd the capabilities added with them (IPC_LOCK, so ibv_reg_mr may pin memory).
	Devices []string         `json:"devices,omitempty"`
	CapAdd  []string         `json:"cap_add,omitempty"`
	Options ContainerOptions `json:"options"`
	// Files are secret files (container path: content) the agent copies into the
	// container between its create and its start: their content is in no configuration
	// `docker inspect` shows, and not in the spec hash (a label). Their paths are in the
	// env that names them, which is hashed.
	Files map[string]string `json:"-"`
	// AgentBinds are host:container binds of a directory the agent itself chose (the
	// router's state, router.go), never a path from a request: the policy's mount rules
	// are about the spec's paths and do not apply to them.
	AgentBinds []string `json:"agent_binds,omitempty"`
	// GPUIDs are the node's GPUs by index (the spec's nodes[].gpus list): with them an
	// agent that gives containers GPUs (Options.GPUs not none) requests exactly these
	// devices, not a count (which Docker's NVIDIA driver turns into 0..count-1).
	GPUIDs []string `json:"gpu_ids,omitempty"`
	// Restart is Docker's restart policy; empty is none (an engine is restarted by its
	// supervisor's redeploy, never by Docker behind the workflow's back).
	Restart container.RestartPolicyMode `json:"restart,omitempty"`
}

// hash identifies everything that makes the container what it is, except the deployment
// ID and the signed spec's hash: a redeploy of an unchanged spec adopts the running
// container, and so does one of a changed spec that changes nothing of this container.
func (s containerSpec) hash() string {
	c := s
	c.Labels = map[string]string{}
	for k, v := range s.Labels {
		if k != LabelDeployment && k != LabelIntent && k != LabelGPUs && k != LabelGPUIndices && k != LabelPorts && k != LabelNetwork {
			c.Labels[k] = v
		}
	}
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// containerEnv is the spec's node env, then the plan's environment for the node, on every
// container of the node: vLLM copies only some prefixes from its driver to its Ray workers
// (GLOO_*, TP_* and VLLM_HOST_IP never), so each node's containers carry their own.
func containerEnv(np netplan.NodePlan, node spec.Node, extra map[string]string) []string {
	env := map[string]string{}
	for k, v := range node.Env {
		env[k] = v
	}
	for k, v := range np.Env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// roleSpec is what every container of a role shares: name, image, labels, the HF cache
// and model.host_dir, read-only at model.path.
func roleSpec(c spec.Cluster, d contract.Deployment, node, role string, o ContainerOptions) containerSpec {
	binds := []string{o.HostPath(c.HFCache) + ":" + hfCacheMount}
	if c.Model.HostDir != "" {
		binds = append(binds, o.HostPath(c.Model.HostDir)+":"+c.Model.Path+":ro")
	}
	s := containerSpec{
		Name: contract.ContainerName(c.Name, node, role), Image: c.Image,
		Labels:  fleetLabels(c, node, o.Network, map[string]string{LabelCluster: d.Cluster, LabelDeployment: d.ID, LabelRole: role, LabelNode: node}),
		Binds:   binds,
		Options: o,
	}
	if n, ok := c.Node(node); ok {
		for _, g := range n.GPUIndices {
			s.GPUIDs = append(s.GPUIDs, strconv.Itoa(g))
		}
	}
	// Every capability is dropped (createOptions); a port below 1024, where the node's
	// policy allows one, is bound only with NET_BIND_SERVICE.
	if p := c.Ports; min(nonZero(p.VLLM), nonZero(p.Ray), nonZero(p.Dashboard), nonZero(p.Master)) < 1024 {
		s.CapAdd = []string{"NET_BIND_SERVICE"}
	}
	return s
}

// nonZero is p, or a port above every privileged one when p is unset.
func nonZero(p int) int {
	if p == 0 {
		return 1 << 16
	}
	return p
}

// hfCacheMount is where stock vLLM images look for the Hugging Face cache.
const hfCacheMount = "/root/.cache/huggingface"

// rayGPUArgs passes the plan's GPU count for the node to Ray (what the probe found, or the
// spec when it declares one), so Ray and the plan agree; none when neither knows.
func rayGPUArgs(np netplan.NodePlan, n spec.Node) []string {
	switch {
	case np.GPUs > 0:
		return []string{"--num-gpus=" + strconv.Itoa(np.GPUs)}
	case n.GPUs > 0:
		return []string{"--num-gpus=" + strconv.Itoa(n.GPUs)}
	}
	return nil
}

// rayHeadSpec: `ray start --head --node-ip-address=IP --port=P --block`.
func rayHeadSpec(req contract.StartRayRequest, o ContainerOptions) containerSpec {
	n, _ := req.Spec.Node(req.Node)
	cmd := []string{"start", "--head", "--node-ip-address=" + req.Plan.Address.String(),
		"--port=" + strconv.Itoa(req.Spec.Ports.Ray), "--dashboard-port=" + strconv.Itoa(req.Spec.Ports.Dashboard)}
	cmd = append(append(cmd, rayGPUArgs(req.Plan, n)...), "--block")
	s := roleSpec(req.Spec, req.Deployment, req.Node, contract.RoleRayHead, o)
	s.Entrypoint, s.Cmd, s.Env = []string{"ray"}, cmd, containerEnv(req.Plan, n, rayAuthEnv(req.Spec))
	return withCompileCache(s, req.Spec, o)
}

// rayWorkerSpec: `ray start --address=HEAD:P --node-ip-address=IP --block`.
func rayWorkerSpec(req contract.StartRayRequest, o ContainerOptions) containerSpec {
	n, _ := req.Spec.Node(req.Node)
	cmd := []string{"start", "--address=" + req.RayAddress, "--node-ip-address=" + req.Plan.Address.String()}
	cmd = append(append(cmd, rayGPUArgs(req.Plan, n)...), "--block")
	s := roleSpec(req.Spec, req.Deployment, req.Node, contract.RoleRayWorker, o)
	s.Entrypoint, s.Cmd, s.Env = []string{"ray"}, cmd, containerEnv(req.Plan, n, rayAuthEnv(req.Spec))
	return withCompileCache(s, req.Spec, o)
}

// vllmArgs is vLLM's argument vector: `vllm serve MODEL --tensor-parallel-size T
// --pipeline-parallel-size P --distributed-executor-backend ray --host HOST --port N
// --served-model-name S` + the spec's extra args. It runs in the Ray head's container.
// HOST is the head's planned address: vLLM binds (args.host or "", args.port), every
// interface without one (vllm/entrypoints/openai/api_server.py, create_server_socket), and
// its API key guards only some routes, so it answers on the cluster's network alone — where
// the checks, the canary and the router reach it (http://PLANNED:PORT).
func vllmArgs(c spec.Cluster, host netip.Addr) []string {
	cmd := []string{"vllm", "serve", c.Model.Path,
		"--tensor-parallel-size", strconv.Itoa(c.Parallel.Tensor),
		"--pipeline-parallel-size", strconv.Itoa(max(c.Parallel.Pipeline, 1)),
		"--distributed-executor-backend", "ray",
		"--host", host.String(), "--port", strconv.Itoa(c.Ports.VLLM),
		"--served-model-name", c.Model.ServedName}
	return append(cmd, c.Model.ExtraArgs...)
}

// EngineOOMScoreAdj is the engine containers' oom_score_adj (Docker's OomScoreAdj).
const EngineOOMScoreAdj = 500

// createOptions renders the spec for the engine.
func (s containerSpec) createOptions() (client.ContainerCreateOptions, error) {
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode(s.Options.Network),
		IpcMode:     container.IpcMode(s.Options.IPC),
		Binds:       s.Binds,
		// No capability of Docker's default set is one vLLM, Ray or NCCL use: they run as
		// the root that owns the image's files and the cache (no DAC_OVERRIDE, CHOWN,
		// FOWNER needed), change no user (SETUID, SETGID), make no device (MKNOD: a node
		// planted in the shared cache), and on the host's network a raw socket (NET_RAW)
		// would sniff and spoof the node's traffic. What the plan needs is added back
		// (CapAdd: IPC_LOCK with RDMA, NET_BIND_SERVICE for a port below 1024). No setuid
		// binary in the image gains privileges either.
		CapDrop:     []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges:true"},
		// Should the kernel have to kill for memory, an engine goes before the agent
		// (which protects itself, guard.go) and the Docker engine (-500 by default).
		OomScoreAdj: EngineOOMScoreAdj,
		Resources:   container.Resources{CgroupParent: s.Options.CgroupParent},
	}
	for _, d := range s.Devices {
		host, ctr, _ := strings.Cut(d, ":")
		hc.Devices = append(hc.Devices, container.DeviceMapping{PathOnHost: host, PathInContainer: ctr, CgroupPermissions: "rwm"})
	}
	hc.CapAdd = s.CapAdd
	if s.Options.Sysfs != "" {
		hc.Binds = append(append([]string(nil), hc.Binds...), s.Options.Sysfs+":"+ContainerSysfs+":ro")
	}
	if len(s.AgentBinds) > 0 {
		hc.Binds = append(append([]string(nil), hc.Binds...), s.AgentBinds...)
	}
	if s.Restart != "" {
		hc.RestartPolicy = container.RestartPolicy{Name: s.Restart}
	}
	if hc.IpcMode == "" {
		hc.IpcMode = IPCPrivate
	}
	if s.Options.ShmSize > 0 && s.Options.IPC != "host" {
		hc.ShmSize = s.Options.ShmSize
	}
	for _, u := range s.Options.Ulimits {
		ul, err := units.ParseUlimit(u)
		if err != nil {
			return client.ContainerCreateOptions{}, fmt.Errorf("ulimit %q: %w", u, err)
		}
		hc.Ulimits = append(hc.Ulimits, ul)
	}
	switch g := s.Options.GPUs; {
	case g == "" || g == "none":
	case len(s.GPUIDs) > 0:
		hc.DeviceRequests = []container.DeviceRequest{{DeviceIDs: s.GPUIDs, Capabilities: [][]string{{"gpu"}}}}
	case g == "all":
		hc.DeviceRequests = []container.DeviceRequest{{Count: -1, Capabilities: [][]string{{"gpu"}}}}
	default:
		n, err := strconv.Atoi(g)
		if err != nil || n < 1 {
			return client.ContainerCreateOptions{}, fmt.Errorf("gpus %q: want all, none or a count", g)
		}
		hc.DeviceRequests = []container.DeviceRequest{{Count: n, Capabilities: [][]string{{"gpu"}}}}
	}
	lbl := map[string]string{LabelSpecHash: s.hash()}
	for k, v := range s.Labels {
		lbl[k] = v
	}
	stop := int(s.Options.StopTimeout.Seconds())
	return client.ContainerCreateOptions{
		Name: s.Name,
		Config: &container.Config{
			Image: s.Image, Entrypoint: s.Entrypoint, Cmd: s.Cmd, Env: s.Env, Labels: lbl,
			StopTimeout: &stop,
		},
		HostConfig: hc,
	}, nil
}

func imageMissing(image string) error {
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("image %s not present (tpdeploy never pulls: load or pull it on the node first)", image), contract.ErrImageMissing, nil)
}

// agentEnv are the variables the agent itself sets (from its own secrets, or its own
// directories: VLLM_CACHE_ROOT, compilecache.go, replacing any a spec gives), never from a
// request; the env check does not apply to them.
var agentEnv = map[string]bool{"HF_TOKEN": true, "VLLM_API_KEY": true, "RAY_AUTH_MODE": true, "RAY_AUTH_TOKEN_PATH": true, "VLLM_CACHE_ROOT": true}

// rayTokenFile is where a Ray container finds secrets.ray_token (RAY_AUTH_TOKEN_PATH).
const rayTokenFile = "/run/tpdeploy/ray_token"

// rayAuthEnv turns Ray's token authentication on in a Ray container when the spec has a
// token: RAY_AUTH_MODE=token (a worker's `ray start --address` and a driver's ray.init
// enable it only so, and a head before Ray 2.59 too: authentication_token_setup.py) and
// RAY_AUTH_TOKEN_PATH, the least visible of Ray's token sources
// (authentication_token_loader.cc: RAY_AUTH_TOKEN, then RAY_AUTH_TOKEN_PATH, then
// ~/.ray/auth_token), so that a token the image holds is not the one used.
func rayAuthEnv(c spec.Cluster) map[string]string {
	if c.Secrets.RayToken == nil {
		return nil
	}
	return map[string]string{"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": rayTokenFile}
}

// envNames are the names of KEY=VALUE entries the request chose (the node's env and the
// plan's), for the policy's env check.
func envNames(env []string) []string {
	var names []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !agentEnv[k] {
			names = append(names, k)
		}
	}
	return names
}

// Containers checks a node's engine before a deploy (PreflightNode), removes a
// cluster's containers (RemoveContainers) and reads what they printed last
// (LastOutput); the agent's start-up reconcile (Reconcile) removes what no deployment
// holds.
type Containers struct {
	*nodeBase
	docker *docker
	// vllm resolves the spec's secrets: the preflight checks that they resolve, as vLLM's
	// launch will need them (plannedAllowed, stage.go); their values go nowhere.
	vllm *VLLM
}

// specAllowed checks everything a spec would make this node do, so that preflight refuses
// a spec outside the policy before anything starts (each action checks its part again).
func (cs *Containers) specAllowed(c spec.Cluster) error {
	n, _ := c.Node(cs.name)
	return cs.allowed(func(p policy.Policy) error {
		var hostDir error
		if c.Model.HostDir != "" {
			hostDir = p.CheckBind(c.Model.HostDir, true)
		}
		return errors.Join(p.CheckImage(c.Image), p.CheckDockerHost(n.DockerHost), p.CheckBind(c.HFCache, false), hostDir,
			p.CheckPorts(c.Ports.VLLM, c.Ports.Ray, c.Ports.Dashboard))
	})
}

// PreflightNode checks that the node's engine answers and holds the image, and that the
// head's fixed ports are free (ports.go); it never pulls (a multi-gigabyte pull belongs to
// the operator, and an implicit one hides a typo).
func (cs *Containers) PreflightNode(ctx context.Context, req contract.PreflightRequest) (contract.PreflightResult, error) {
	if err := cs.checkNode(req.Node); err != nil {
		return contract.PreflightResult{}, err
	}
	signed, err := cs.signedSpec(ctx)
	if err != nil {
		return contract.PreflightResult{}, err
	}
	if c := signed; c != nil {
		if req.Spec == nil {
			return contract.PreflightResult{}, cs.deny("signed intent: a preflight without the spec")
		}
		if req.Image != c.Image {
			return contract.PreflightResult{}, cs.deny("signed intent: image %s is not the signed spec's %s", req.Image, c.Image)
		}
		if err := cs.signedDockerHost(c, req.DockerHost); err != nil {
			return contract.PreflightResult{}, err
		}
	}
	if req.Spec != nil {
		if err := cs.checkSpec(*req.Spec); err != nil {
			return contract.PreflightResult{}, err
		}
		if err := cs.specAllowed(*req.Spec); err != nil {
			return contract.PreflightResult{}, err
		}
		if req.Plan != nil {
			if err := cs.plannedAllowed(*req.Spec, *req.Plan, req.Deployment, signed); err != nil {
				return contract.PreflightResult{}, err
			}
		}
	}
	eng, addr, err := cs.docker.engine(req.DockerHost)
	if err != nil {
		return contract.PreflightResult{}, err
	}
	id, _, err := cs.docker.resolveImage(ctx, eng, addr, req.Image) // pinned.go
	if err != nil {
		return contract.PreflightResult{}, err
	}
	res := contract.PreflightResult{Node: cs.name, ImageID: id}
	if req.Spec != nil {
		if err := cs.checkFleet(ctx, eng, addr, *req.Spec); err != nil { // fleet.go
			return contract.PreflightResult{}, err
		}
		if err := cs.checkPortsFree(ctx, eng, addr, *req.Spec); err != nil {
			return contract.PreflightResult{}, err
		}
		if res.Memory, err = cs.admitMemory(ctx, *req.Spec, req.Plan); err != nil {
			return res, err
		}
	}
	return res, nil
}

// RemoveContainers stops and removes the cluster's containers on this node (only the
// given roles, when set), found by their labels. vLLM goes first, stopped gracefully in
// the Ray head's container, then the workers, then the head. Nothing to remove is not an
// error.
func (cs *Containers) RemoveContainers(ctx context.Context, req contract.RemoveRequest) (contract.RemoveResult, error) {
	res := contract.RemoveResult{Node: cs.name, Removed: []string{}}
	if err := cs.checkNode(req.Node); err != nil {
		return res, err
	}
	if c, err := cs.signedSpec(ctx); err != nil {
		return res, err
	} else if c != nil {
		if err := cs.signedDockerHost(c, req.DockerHost); err != nil {
			return res, err
		}
	}
	return cs.removeCluster(ctx, req)
}

// removeCluster removes the cluster's containers on this node (RemoveContainers once the
// request is checked). The agent's own reconcile calls it directly: that removal is the
// agent's decision from Temporal's record, not a request anyone signed.
func (cs *Containers) removeCluster(ctx context.Context, req contract.RemoveRequest) (contract.RemoveResult, error) {
	res := contract.RemoveResult{Node: cs.name, Removed: []string{}}
	eng, addr, err := cs.docker.engine(req.DockerHost)
	if err != nil {
		return res, err
	}
	list, err := eng.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: cs.docker.clusterFilter(req.Cluster)})
	if err != nil {
		return res, engineError(addr, "list containers", err)
	}
	wants := func(role string) bool { return len(req.Roles) == 0 || slices.Contains(req.Roles, role) }
	if wants(contract.RoleVLLM) {
		for _, c := range list.Items {
			if c.Labels[LabelRole] != contract.RoleRayHead || c.State != "running" {
				continue
			}
			name := strings.TrimPrefix(c.Names[0], "/")
			st, err := vllmProcStatus(ctx, eng, name)
			if err != nil || st.State != "running" {
				continue // no vLLM there (or no shell to ask): stopping the container ends it
			}
			if err := cs.docker.stopVLLM(ctx, eng, addr, name); err != nil {
				return res, err
			}
			res.Removed = append(res.Removed, "vllm in "+name)
			cs.logger().Info("vllm stopped", zap.String("container", name))
		}
	}
	// The workers before the head: the order a hand teardown would use. (A container of
	// role vllm is one an older tpdeploy ran vLLM in.)
	order := map[string]int{contract.RoleVLLM: 0, contract.RoleRayWorker: 1, contract.RoleRayHead: 2}
	sort.SliceStable(list.Items, func(i, j int) bool {
		return order[list.Items[i].Labels[LabelRole]] < order[list.Items[j].Labels[LabelRole]]
	})
	for _, c := range list.Items {
		if !wants(c.Labels[LabelRole]) {
			continue
		}
		if err := cs.docker.removeContainer(ctx, eng, addr, c.ID, cs.docker.opts.StopTimeout); err != nil {
			return res, err
		}
		name := c.ID
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		res.Removed = append(res.Removed, name)
		cs.logger().Info("container removed", zap.String("name", name))
	}
	return res, nil
}
