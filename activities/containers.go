package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/go-units"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/tpdeploy/tpdeploy/confined"
	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/netplan"
	"github.com/tpdeploy/tpdeploy/policy"
	"github.com/tpdeploy/tpdeploy/spec"
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
	// IPC is the IPC mode: "host" on real nodes (NCCL's shared memory), "" for Docker's.
	IPC string `json:"ipc"`
	// GPUs is "all", "none", or a count.
	GPUs string `json:"gpus"`
	// ShmSize is /dev/shm's size in bytes (0: Docker's default). Ignored with IPC host.
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
	// Sysfs, when set, is a directory standing for the node's /sys that its containers
	// see at ContainerSysfs (the lab: its nodes share one host whose /sys has none of
	// their HCAs). A real node's containers see the kernel's /sys; empty there.
	Sysfs string `json:"sysfs,omitempty"`
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

// DefaultContainerOptions are a real GPU node's: what vLLM's run_cluster.sh and the DGX
// Spark launchers use.
func DefaultContainerOptions() ContainerOptions {
	return ContainerOptions{
		Network: "host", IPC: "host", GPUs: "all", ShmSize: 10 << 30,
		Ulimits: []string{"memlock=-1:-1", "stack=67108864:67108864"}, StopTimeout: 30 * time.Second,
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
}

// hash identifies everything that makes the container what it is, except the deployment
// ID and the signed spec's hash: a redeploy of an unchanged spec adopts the running
// container, and so does one of a changed spec that changes nothing of this container.
func (s containerSpec) hash() string {
	c := s
	c.Labels = map[string]string{}
	for k, v := range s.Labels {
		if k != LabelDeployment && k != LabelIntent {
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
	return containerSpec{
		Name: contract.ContainerName(c.Name, node, role), Image: c.Image,
		Labels:  map[string]string{LabelCluster: d.Cluster, LabelDeployment: d.ID, LabelRole: role, LabelNode: node},
		Binds:   binds,
		Options: o,
	}
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
	s.Entrypoint, s.Cmd, s.Env = []string{"ray"}, cmd, containerEnv(req.Plan, n, nil)
	return s
}

// rayWorkerSpec: `ray start --address=HEAD:P --node-ip-address=IP --block`.
func rayWorkerSpec(req contract.StartRayRequest, o ContainerOptions) containerSpec {
	n, _ := req.Spec.Node(req.Node)
	cmd := []string{"start", "--address=" + req.RayAddress, "--node-ip-address=" + req.Plan.Address.String()}
	cmd = append(append(cmd, rayGPUArgs(req.Plan, n)...), "--block")
	s := roleSpec(req.Spec, req.Deployment, req.Node, contract.RoleRayWorker, o)
	s.Entrypoint, s.Cmd, s.Env = []string{"ray"}, cmd, containerEnv(req.Plan, n, nil)
	return s
}

// vllmArgs is vLLM's argument vector: `vllm serve MODEL --tensor-parallel-size T
// --pipeline-parallel-size P --distributed-executor-backend ray --host 0.0.0.0 --port N
// --served-model-name S` + the spec's extra args. It runs in the Ray head's container.
func vllmArgs(c spec.Cluster) []string {
	cmd := []string{"vllm", "serve", c.Model.Path,
		"--tensor-parallel-size", strconv.Itoa(c.Parallel.Tensor),
		"--pipeline-parallel-size", strconv.Itoa(max(c.Parallel.Pipeline, 1)),
		"--distributed-executor-backend", "ray",
		"--host", "0.0.0.0", "--port", strconv.Itoa(c.Ports.VLLM),
		"--served-model-name", c.Model.ServedName}
	return append(cmd, c.Model.ExtraArgs...)
}

// createOptions renders the spec for the engine.
func (s containerSpec) createOptions() (client.ContainerCreateOptions, error) {
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode(s.Options.Network),
		IpcMode:     container.IpcMode(s.Options.IPC),
		Binds:       s.Binds,
		// On the host's network a raw socket sniffs and spoofs the node's traffic; no
		// process of vLLM's, Ray's or NCCL's needs one. No setuid binary in the image
		// gains privileges either.
		CapDrop:     []string{"NET_RAW"},
		SecurityOpt: []string{"no-new-privileges:true"},
	}
	for _, d := range s.Devices {
		host, ctr, _ := strings.Cut(d, ":")
		hc.Devices = append(hc.Devices, container.DeviceMapping{PathOnHost: host, PathInContainer: ctr, CgroupPermissions: "rwm"})
	}
	hc.CapAdd = s.CapAdd
	if s.Options.Sysfs != "" {
		hc.Binds = append(append([]string(nil), hc.Binds...), s.Options.Sysfs+":"+ContainerSysfs+":ro")
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
	switch g := s.Options.GPUs; g {
	case "", "none":
	case "all":
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

// ensureContainer creates and starts s, or adopts the container of the same name: one
// with the same spec hash is reused (and started if it is stopped — a crash between
// create and start leaves exactly that), one with another hash is replaced.
func (a *Node) ensureContainer(ctx context.Context, host string, s containerSpec, replace bool) (contract.ContainerRef, error) {
	err := a.allowed(func(p policy.Policy) error {
		errs := []error{p.CheckImage(s.Image), p.CheckEnv(envNames(s.Env)...)}
		for _, b := range s.Binds {
			src, _, _ := strings.Cut(b, ":")
			errs = append(errs, p.CheckMount(a.nodePath(src))) // the policy names the node's paths
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return contract.ContainerRef{}, err
	}
	for _, b := range s.Binds {
		src, _, _ := strings.Cut(b, ":")
		if err := a.bindSource(a.nodePath(src)); err != nil {
			return contract.ContainerRef{}, err
		}
	}
	eng, addr, err := a.engine(host)
	if err != nil {
		return contract.ContainerRef{}, err
	}
	ref := contract.ContainerRef{Node: a.Name, Role: s.Labels[LabelRole], Name: s.Name}
	want := s.hash()
	for attempt := 0; ; attempt++ {
		got, err := eng.ContainerInspect(ctx, s.Name, client.ContainerInspectOptions{})
		switch {
		case cerrdefs.IsNotFound(err):
			opts, err := s.createOptions()
			if err != nil {
				return ref, temporal.NewNonRetryableApplicationError(fmt.Sprintf("container %s: %v", s.Name, err), contract.ErrBadRequest, nil)
			}
			created, err := eng.ContainerCreate(ctx, opts)
			if cerrdefs.IsConflict(err) && attempt < 3 {
				continue // created meanwhile by an attempt we did not see finish
			}
			if cerrdefs.IsNotFound(err) {
				return ref, imageMissing(s.Image)
			}
			if err != nil {
				return ref, engineError(addr, "create "+s.Name, err)
			}
			ref.ID = created.ID
			a.logger().Info("container created", zap.String("name", s.Name), zap.String("hash", want))
		case err != nil:
			return ref, engineError(addr, "inspect "+s.Name, err)
		case got.Container.Config == nil || got.Container.Config.Labels[LabelCluster] != s.Labels[LabelCluster]:
			// Never replace what another cluster, or not tpdeploy, owns.
			owner := "no tpdeploy cluster"
			if got.Container.Config != nil && got.Container.Config.Labels[LabelCluster] != "" {
				owner = "cluster " + got.Container.Config.Labels[LabelCluster]
			}
			return ref, temporal.NewNonRetryableApplicationError(fmt.Sprintf("a container named %s exists and belongs to %s: remove or rename it", s.Name, owner), contract.ErrBadRequest, nil)
		case !replace && got.Container.Config.Labels[LabelSpecHash] == want &&
			(s.Labels[LabelIntent] == "" || got.Container.Config.Labels[LabelIntent] != ""):
			// (With signed intent, a container started before it was required is replaced.)
			ref.ID, ref.Adopted = got.Container.ID, true
			if got.Container.State != nil && got.Container.State.Running {
				return ref, nil
			}
		default:
			if err := a.removeContainer(ctx, eng, addr, got.Container.ID, s.Options.StopTimeout); err != nil {
				return ref, err
			}
			a.logger().Info("container replaced", zap.String("name", s.Name), zap.Bool("forced", replace))
			replace = false
			continue
		}
		if _, err := eng.ContainerStart(ctx, ref.ID, client.ContainerStartOptions{}); err != nil {
			return ref, engineError(addr, "start "+s.Name, err)
		}
		return ref, nil
	}
}

func imageMissing(image string) error {
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("image %s not present (tpdeploy never pulls: load or pull it on the node first)", image), contract.ErrImageMissing, nil)
}

// removeContainer stops a container gracefully, then removes it; gone already is fine.
func (a *Node) removeContainer(ctx context.Context, eng containerEngine, addr, id string, timeout time.Duration) error {
	secs := int(timeout.Seconds())
	if _, err := eng.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
		return engineError(addr, "stop "+id[:min(12, len(id))], err)
	}
	if _, err := eng.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return engineError(addr, "remove "+id[:min(12, len(id))], err)
	}
	return nil
}

// agentEnv are the variables the agent itself sets from its own secrets, never from a
// request; the env check does not apply to them.
var agentEnv = map[string]bool{"HF_TOKEN": true, "VLLM_API_KEY": true}

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

// bindSource makes sure a bind mount's source is a directory beneath an allowed mount
// with no symlink on the way there (the engine would follow one: an hf_cache that is a
// link to / would mount the host's root read-write), making it when it is not there (as
// the engine would, but without following links).
func (a *Node) bindSource(nodePath string) error {
	dir, rel, err := a.beneath(nodePath, "host path")
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := dir.MkdirAll(rel); err != nil {
		if confined.IsRefusal(err) {
			return a.denyPath("host path "+nodePath, err)
		}
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: host path %s: %v", a.Name, nodePath, err), contract.ErrBadRequest, nil)
	}
	return nil
}

// maxSecretSize bounds a secret file: a token is a few hundred bytes, and /dev/zero or a
// multi-gigabyte file must not grow the agent's memory.
const maxSecretSize = 64 << 10

// secretEnv resolves the spec's secret references on this node, within its policy: an
// agent variable secret_env names, or a regular file under secret_dirs (opened beneath it
// without following links, at most maxSecretSize). HF_TOKEN is for every vLLM process;
// VLLM_API_KEY (withAPIKey) only for the one that runs the API server, on the head. Values
// go into an exec's environment only, never into a container's configuration, a workflow
// input, result, log or error.
func (a *Node) secretEnv(s spec.Secrets, withAPIKey bool) (map[string]string, error) {
	out := map[string]string{}
	if s.HFToken != nil {
		v, err := a.resolveSecret("secrets.hf_token", *s.HFToken)
		if err != nil {
			return nil, err
		}
		out["HF_TOKEN"] = v
	}
	if s.APIKey != nil && withAPIKey {
		v, err := a.resolveSecret("secrets.api_key", *s.APIKey)
		if err != nil {
			return nil, err
		}
		out["VLLM_API_KEY"] = v
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// endpointKey is vLLM's API key for a readiness check of endpoint (secrets.api_key,
// resolved on this node within its policy), or "" when the spec has none. The key goes
// only to this node's own address at the spec's vLLM port: vLLM's API server runs on the
// head, the node that checks it, so a request naming any other endpoint would be asking
// the agent to hand the key to someone else.
func (a *Node) endpointKey(c spec.Cluster, endpoint string) (string, error) {
	if c.Secrets.APIKey == nil {
		return "", nil
	}
	if err := a.checkOwnEndpoint(endpoint, c.WithDefaults().Ports.VLLM); err != nil {
		return "", err
	}
	return a.resolveSecret("secrets.api_key", *c.Secrets.APIKey)
}

// EndpointKey is endpointKey for the operations activities this agent serves (control's
// readiness checks on the head), for a spec signed as its policy requires: a function, not
// a method, so that it is no activity.
func EndpointKey(a *Node) func(c spec.Cluster, in *contract.Intent, endpoint string) (string, error) {
	return func(c spec.Cluster, in *contract.Intent, endpoint string) (string, error) {
		if _, err := a.signedSpec(in, c); err != nil {
			return "", err
		}
		return a.endpointKey(c, endpoint)
	}
}

func (a *Node) resolveSecret(field string, ref spec.SecretRef) (string, error) {
	bad := func(format string, args ...any) error {
		return temporal.NewNonRetryableApplicationError(a.Name+": "+field+": "+fmt.Sprintf(format, args...), contract.ErrBadRequest, nil)
	}
	switch {
	case ref.Env != "":
		if err := a.allowed(func(p policy.Policy) error { return p.CheckSecretEnv(ref.Env) }); err != nil {
			return "", err
		}
		v := os.Getenv(ref.Env)
		if v == "" {
			return "", bad("agent environment variable %s is empty or unset", ref.Env)
		}
		return v, nil
	case ref.File != "":
		if err := a.allowed(func(p policy.Policy) error { return p.CheckSecretFile(ref.File) }); err != nil {
			return "", err
		}
		b, err := a.readSecretFile(ref.File)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	return "", bad("set env or file")
}

// readSecretFile reads a secret file beneath its secret directory: no link followed, a
// regular file only (not /dev/zero, not a FIFO that blocks), at most maxSecretSize. Its
// errors never hold the content.
func (a *Node) readSecretFile(file string) ([]byte, error) {
	dirName, rel := filepath.Dir(file), filepath.Base(file)
	if a.Policy != nil {
		d, _ := a.Policy.SecretDir(file)
		r, err := filepath.Rel(d, filepath.Clean(file))
		if err != nil {
			return nil, a.deny("secret file %s: %v", file, err)
		}
		dirName, rel = d, r
	}
	dir, err := confined.Open(dirName)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: secret file %s: %v", a.Name, file, err), contract.ErrBadRequest, nil)
	}
	defer dir.Close()
	f, err := dir.OpenFile(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		if confined.IsRefusal(err) {
			return nil, a.denyPath("secret file "+file, err)
		}
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: secret file %s: %v", a.Name, file, err), contract.ErrBadRequest, nil)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: secret file %s: %v", a.Name, file, err), contract.ErrBadRequest, nil)
	case !fi.Mode().IsRegular():
		return nil, a.deny("secret file %s is not a regular file (%s)", file, fi.Mode().Type())
	case fi.Size() > maxSecretSize:
		return nil, a.deny("secret file %s is %d bytes, more than the %d a secret may be", file, fi.Size(), maxSecretSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretSize+1))
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: secret file %s: read failed", a.Name, file), contract.ErrBadRequest, nil)
	}
	if len(b) > maxSecretSize {
		return nil, a.deny("secret file %s grew past the %d bytes a secret may be", file, maxSecretSize)
	}
	return b, nil
}

// ownContainer refuses a container that is not one of this node's tpdeploy containers of
// the given cluster ("" for any cluster, the name then being the cluster's own) and role:
// an exec, a read of vLLM's output or a stop acts only on what the agent itself started,
// whatever name a request gives.
func (a *Node) ownContainer(name string, cfg *container.Config, cluster string, roles ...string) error {
	var l map[string]string
	if cfg != nil {
		l = cfg.Labels
	}
	c := l[LabelCluster]
	switch {
	case c == "" || l[LabelNode] != a.Name || !slices.Contains(roles, l[LabelRole]):
		return a.deny("container %s is not one of this node's tpdeploy containers (role %s)", name, strings.Join(roles, " or "))
	case cluster != "" && c != cluster:
		return a.deny("container %s belongs to cluster %s, not %s", name, c, cluster)
	case strings.TrimPrefix(name, "/") != contract.ContainerName(c, a.Name, l[LabelRole]):
		return a.deny("container %s is not named as tpdeploy names cluster %s's %s", name, c, l[LabelRole])
	case a.enforced() && l[LabelIntent] == "":
		return a.deny("container %s was not started for a signed spec (it predates trusted_keys on this node): redeploy to replace it", name)
	}
	return nil
}
