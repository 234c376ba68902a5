// Command worker is tpdeploy's worker, in one of three roles (--role). As the node agent
// (agent) it runs on every GPU node and serves only that node's task queue
// (tpdeploy.node.NAME) with the node's activities. As the controller (controller) it runs
// the workflows and the operations activities on the shared tpdeploy queue, on the
// operator's side, with no node queue and no Docker engine. all is both in one process,
// today's single binary: the default, for a one-machine setup; a fleet runs the split, so
// that a compromised node holds no credentials that run workflow tasks (docs/security.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/go-units"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/internal/connect"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/liveness"
	"github.com/tpdeploy/tpdeploy/internal/logging"
	"github.com/tpdeploy/tpdeploy/internal/metrics"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/registration"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// nodePolicy is this node's operator policy (images, host paths, Docker engines, ports);
// the agent's activities enforce it.
var nodePolicy policy.Policy

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// run serves the node until ctx ends or a worker stops on a fatal error.
func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: worker --node NAME [flags]\n\nRuns the tpdeploy node agent for one GPU node.\n\n")
		fs.PrintDefaults()
	}
	var (
		conn       connect.Options
		node       = fs.String("node", connect.EnvOr("TPDEPLOY_NODE", ""), "this node's name in the cluster spec (env TPDEPLOY_NODE)")
		netNS      = fs.String("netns", "", "run network activities in this named network namespace (tests; empty on real nodes)")
		bootIDFile = fs.String("boot-id-file", connect.EnvOr("TPDEPLOY_BOOT_ID_FILE", ""), "read the boot ID from this file instead of the kernel's (env TPDEPLOY_BOOT_ID_FILE)")
		defaults   = activities.DefaultContainerOptions()
		ctrNetwork = fs.String("container-network", connect.EnvOr("TPDEPLOY_CONTAINER_NETWORK", defaults.Network), "network mode of the node's containers: host, or container:NAME when the node is itself a container (env TPDEPLOY_CONTAINER_NETWORK)")
		ctrIPC     = fs.String("ipc", connect.EnvSetOr("TPDEPLOY_IPC", defaults.IPC), "IPC mode of the node's containers: private (each its own /dev/shm of --shm-size), or shareable; never host (env TPDEPLOY_IPC)")
		ctrGPUs    = fs.String("gpus", connect.EnvOr("TPDEPLOY_GPUS", defaults.GPUs), "GPUs given to containers: all, none or a count (env TPDEPLOY_GPUS)")
		shmSize    = fs.String("shm-size", connect.EnvOr("TPDEPLOY_SHM_SIZE", "10g"), "size of each container's /dev/shm: vLLM's run_cluster.sh gives 10.24g (env TPDEPLOY_SHM_SIZE)")
		compileDir = fs.String("compile-cache", connect.EnvOr("TPDEPLOY_COMPILE_CACHE", activities.CompileCacheDir), "the node's directory of vLLM's compilation caches, one per engine configuration, mounted at the engines' VLLM_CACHE_ROOT so a redeploy or recovery does not compile again; none: keep none (env TPDEPLOY_COMPILE_CACHE)")
		hostRoot   = fs.String("host-root", connect.EnvOr("TPDEPLOY_HOST_ROOT", ""), "a directory standing for this node's / when several simulated nodes share one host (the lab): the spec's host paths (hf_cache, model.host_dir) are taken under it; empty on real nodes (env TPDEPLOY_HOST_ROOT)")
		sysRoot    = fs.String("sys-root", connect.EnvOr("TPDEPLOY_SYS_ROOT", ""), "read sysfs (links' speeds, RDMA devices) here instead of /sys (the lab's simulated nodes); empty on real nodes (env TPDEPLOY_SYS_ROOT)")
		ctrSysfs   = fs.String("container-sysfs", connect.EnvOr("TPDEPLOY_CONTAINER_SYSFS", ""), "a directory standing for the node's /sys that its containers see at "+activities.ContainerSysfs+" (the lab); empty on real nodes, whose containers see the kernel's (env TPDEPLOY_CONTAINER_SYSFS)")
		cgParent   = fs.String("cgroup-parent", connect.EnvOr("TPDEPLOY_CGROUP_PARENT", ""), "create the engine containers under this cgroup (docker's --cgroup-parent); self: under the agent's own memory cgroup, for a node that is itself a memory-limited container (the lab), so its limit bounds the engines too; empty on real nodes (env TPDEPLOY_CGROUP_PARENT)")
		notBefore  = fs.String("intents-not-before", connect.EnvOr("TPDEPLOY_INTENTS_NOT_BEFORE", ""), "refuse every signed spec signed before this RFC 3339 time, e.g. 2026-05-01T00:00:00Z: raising it revokes every older spec (the later of it and the policy file's intents_not_before applies; env TPDEPLOY_INTENTS_NOT_BEFORE)")
		pinned     = fs.Bool("require-pinned-images", false, "allow images only pinned by content, NAME[:TAG]@sha256:DIGEST (the image ID or its repository digest), never by tag alone (adds to the policy file's require_pinned_images; env TPDEPLOY_REQUIRE_PINNED_IMAGES)")
		rdmaDevs   = fs.String("rdma-devices", connect.EnvOr("TPDEPLOY_RDMA_DEVICES", ""), "planned: map the plan's HCAs' /dev/infiniband/uverbsN into containers; none: map none (replaces the policy file's rdma_devices; env TPDEPLOY_RDMA_DEVICES)")
		reserve    = fs.String("host-reserve", connect.EnvOr("TPDEPLOY_HOST_RESERVE", ""), "host memory no deploy may plan to take, e.g. 8GiB,10% (the larger applies; replaces the policy file's host_reserve; default max(8GiB, 10%); env TPDEPLOY_HOST_RESERVE)")
		floor      = fs.String("memory-floor", connect.EnvOr("TPDEPLOY_MEMORY_FLOOR", ""), "below this much host memory available the agent stops the node's engine containers, e.g. 1GiB,2% (the larger applies; replaces the policy file's memory_floor; default max(1GiB, 2%); env TPDEPLOY_MEMORY_FLOOR)")
		engineRank = fs.String("engine-rank-memory", connect.EnvOr("TPDEPLOY_ENGINE_RANK_MEMORY", ""), "the admission's estimate of the host memory one engine rank takes besides weights and KV cache, e.g. 2GiB (replaces the policy file's engine_rank_memory; default 2GiB; env TPDEPLOY_ENGINE_RANK_MEMORY)")
		ulimits    = fs.String("ulimits", connect.EnvSetOr("TPDEPLOY_ULIMITS", strings.Join(defaults.Ulimits, ",")), "comma-separated docker ulimits; empty for none (env TPDEPLOY_ULIMITS)")
		logLevel   = fs.String("log-level", "info", "debug, info, warn or error")
		console    = fs.Bool("log-console", false, "human-readable logs instead of JSON")
		metricsAt  = fs.String("metrics-addr", connect.EnvOr("TPDEPLOY_METRICS_ADDR", ""), "serve Prometheus /metrics and /healthz on this address, e.g. 10.0.0.11:9464 (the node's management address); a port alone (:9464) is loopback's; empty for none (env TPDEPLOY_METRICS_ADDR)")
		metricsAll = fs.Bool("metrics-all-interfaces", false, "let --metrics-addr listen on every interface (0.0.0.0, ::, or a port alone); without it that is refused, since /metrics and /healthz ask for no credentials (env TPDEPLOY_METRICS_ALL_INTERFACES)")
		role       = fs.String("role", connect.EnvOr("TPDEPLOY_ROLE", roleAll), "agent: serve only this node's queue, tpdeploy.node.NODE (a fleet's nodes); controller: run the workflows and the operations activities on the tpdeploy queue, with no node queue and no Docker engine (one per fleet, on the operator's side); all: both, in one process (env TPDEPLOY_ROLE)")
		polFile    = fs.String("policy-file", connect.EnvOr("TPDEPLOY_POLICY_FILE", policy.DefaultFile), "this node's policy: allowed images, host paths, Docker engines, ports (env TPDEPLOY_POLICY_FILE; missing at the default path: the defaults)")
		allow      policy.Overrides
	)
	// The environment seeds each list (a container's or a unit's Environment=); flags add.
	for _, f := range []struct {
		list      *[]string
		name, env string
		usage     string
	}{
		{&allow.Images, "allow-image", "TPDEPLOY_ALLOW_IMAGES", "also allow images matching this glob, e.g. 'registry.internal/vllm/*:*' (repeatable, comma-separated; default policy: vllm/vllm-openai:*)"},
		{&allow.Mounts, "allow-mount", "TPDEPLOY_ALLOW_MOUNTS", "also allow this host directory: read, served, written and bind-mounted (itself; below it only with DIR:ro, read-only) (repeatable; default policy: /root/.cache/huggingface, /models:ro)"},
		{&allow.DockerHosts, "allow-docker-host", "TPDEPLOY_ALLOW_DOCKER_HOSTS", "also allow this docker_host, e.g. tcp://10.0.0.5:2376 (repeatable; default policy: " + policy.DefaultDockerHost + ")"},
		{&allow.Ports, "allow-ports", "TPDEPLOY_ALLOW_PORTS", "also allow these container ports, e.g. 80 or 9000-9100 (repeatable; default policy: 1024-65535)"},
		{&allow.Env, "allow-env", "TPDEPLOY_ALLOW_ENV", "also allow node env variables matching this glob, e.g. 'SITE_*' (repeatable; code-executing ones such as LD_PRELOAD are never allowed, code-loading ones such as TRITON_PTXAS_PATH only by their exact name)"},
		{&allow.ExtraArgs, "allow-extra-arg", "TPDEPLOY_ALLOW_EXTRA_ARGS", "also allow this vLLM option in a spec's model.extra_args, e.g. --trust-remote-code (repeatable; default policy: options that only tune the engine, policy.DefaultExtraArgs)"},
		{&allow.SecretDirs, "allow-secret-dir", "TPDEPLOY_ALLOW_SECRET_DIRS", "also allow secret files under this directory (repeatable; default policy: /etc/tpdeploy/secrets)"},
		{&allow.SecretEnv, "allow-secret-env", "TPDEPLOY_ALLOW_SECRET_ENV", "also allow secret references to this agent variable (repeatable; default policy: HF_TOKEN, HUGGING_FACE_HUB_TOKEN, VLLM_API_KEY, RAY_AUTH_TOKEN)"},
		{&allow.HubEndpoints, "allow-hub-endpoint", "TPDEPLOY_ALLOW_HUB_ENDPOINTS", "also allow model.source: hub downloads from this hub, e.g. https://hf-mirror.example (an HF_ENDPOINT; repeatable; default policy: https://huggingface.co)"},
		{&allow.TrustedKeys, "trust-key", "TPDEPLOY_TRUSTED_KEYS", "also trust specs signed by this operator key, ID=BASE64 or BASE64 as `starter keygen` prints it (repeatable); with any trusted key, the agent acts only on signed specs"},
	} {
		_ = (*listFlag)(f.list).Set(os.Getenv(f.env))
		fs.Var((*listFlag)(f.list), f.name, f.usage+" (env "+f.env+")")
	}
	conn.Register(fs)
	for env, b := range map[string]*bool{"TPDEPLOY_METRICS_ALL_INTERFACES": metricsAll, "TPDEPLOY_REQUIRE_PINNED_IMAGES": pinned} {
		if v := os.Getenv(env); v != "" {
			set, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%s=%q: want true or false", env, v)
			}
			*b = set
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	switch *role {
	case roleController:
		return runController(ctx, conn, *logLevel, *console, *metricsAt, *metricsAll)
	case roleAgent, roleAll:
	default:
		return fmt.Errorf("--role %q: one of %s (a node), %s (the workflows, once per fleet) or %s (both)", *role, roleAgent, roleController, roleAll)
	}
	if *node == "" {
		return errors.New("--node is required: the node's name as written in the cluster spec")
	}
	ctr, err := containerOptions(*ctrNetwork, *ctrIPC, *ctrGPUs, *shmSize, *ulimits)
	if *hostRoot != "" && !filepath.IsAbs(*hostRoot) {
		err = errors.Join(err, fmt.Errorf("--host-root %q: must be an absolute path", *hostRoot))
	}
	ctr.HostRoot = *hostRoot
	switch {
	case *compileDir == "none":
		ctr.CompileCache = ""
	case !filepath.IsAbs(*compileDir):
		err = errors.Join(err, fmt.Errorf("--compile-cache %q: must be an absolute path, or none", *compileDir))
	default:
		ctr.CompileCache = filepath.Clean(*compileDir)
	}
	ctr.Sysfs = *ctrSysfs
	var cgroupDir string
	if ctr.CgroupParent = *cgParent; ctr.CgroupParent == "self" {
		b, rerr := os.ReadFile("/proc/self/cgroup")
		switch {
		case rerr != nil:
		case activities.CgroupV2(string(b)):
			// cgroup v2: the node container (in the host's cgroup namespace) hands its
			// memory controller to the engines once its own processes are in a leaf.
			var leaf string
			if ctr.CgroupParent, leaf, rerr = activities.PlanCgroupV2(string(b)); rerr == nil {
				rerr = activities.NestCgroupV2("/sys/fs/cgroup", ctr.CgroupParent, leaf)
				cgroupDir = filepath.Join("/sys/fs/cgroup", ctr.CgroupParent)
			}
		default:
			ctr.CgroupParent, rerr = activities.OwnCgroup(string(b))
		}
		if rerr != nil {
			err = errors.Join(err, fmt.Errorf("--cgroup-parent self: %w", rerr))
		}
	}
	allow.RDMA = *rdmaDevs
	allow.HostReserve = *reserve
	allow.MemoryFloor = *floor
	allow.EngineRankMemory = *engineRank
	allow.NotBefore = *notBefore
	allow.RequirePinned = *pinned
	if err != nil {
		return err
	}
	nodePolicy, err = policy.Load(*polFile, allow)
	if err != nil {
		return err
	}
	z, err := logging.New(*logLevel, *console)
	if err != nil {
		return err
	}
	defer func() { _ = z.Sync() }()
	z = z.With(zap.String("node", *node), zap.String("role", *role))
	z.Info("node policy", zap.String("file", nodePolicy.File), zap.Strings("allowed_images", nodePolicy.Images),
		zap.Strings("allowed_mounts", nodePolicy.Mounts), zap.Strings("allowed_docker_hosts", nodePolicy.DockerHosts),
		zap.Strings("allowed_ports", nodePolicy.Ports), zap.Strings("allowed_env", nodePolicy.Env), zap.Strings("allowed_extra_args", nodePolicy.ExtraArgs),
		zap.Strings("secret_dirs", nodePolicy.SecretDirs), zap.Strings("secret_env", nodePolicy.SecretEnv), zap.Strings("allowed_hub_endpoints", nodePolicy.HubEndpoints), zap.String("rdma_devices", nodePolicy.RDMA), zap.Bool("require_pinned_images", nodePolicy.RequirePinned),
		zap.Strings("trusted_keys", nodePolicy.TrustedKeyNames()), zap.Time("intents_not_before", nodePolicy.NotBefore))
	if !nodePolicy.Enforced() {
		fmt.Fprint(stderr, unsignedBanner(*node, nodePolicy.File))
		z.Warn("no trusted_keys in the node policy: this agent acts on unsigned requests from anyone who can start a workflow in the namespace, within the rest of its policy; set trusted_keys (docs/security.md)",
			zap.String("file", nodePolicy.File))
	}

	live := &metrics.Liveness{}
	live.Set(false, "starting")
	var memGauges *metrics.HostMemory
	if *metricsAt != "" {
		exp, stopMetrics, err := serveMetrics(*metricsAt, *metricsAll, *node, live, z)
		if err != nil {
			return err
		}
		defer stopMetrics()
		conn.MetricsHandler = exp.Handler
		if memGauges, err = exp.RegisterHostMemory(*node); err != nil {
			return err
		}
	}

	conn.Identity = identity("tpdeploy-agent:" + *node)
	if dialHook != nil {
		conn.DialOptions = append(conn.DialOptions, dialHook(*role)...)
	}
	copts, err := conn.ClientOptions(nil)
	if err != nil {
		return err
	}
	c, err := conn.Dial(z)
	if err != nil {
		return err
	}
	defer c.Close()

	// A worker that stops on a fatal error (its namespace gone, its credentials refused)
	// ends the agent, so its supervisor (systemd, Docker) restarts it.
	fatal := make(chan error, 2)
	workerOpts := worker.Options{OnFatalError: func(err error) {
		live.Set(false, "worker stopped: "+err.Error())
		fatal <- err
	}}
	// Heartbeats for steps that do not heartbeat themselves: a dead agent is noticed in
	// seconds, not at the step's start-to-close timeout.
	workerOpts.Interceptors = append(workerOpts.Interceptors, &liveness.Interceptor{})
	workerOpts.Interceptors = append(workerOpts.Interceptors, labHooks(z)...)
	agent := activities.New(activities.Config{Name: *node, Log: z, NetNS: *netNS, BootIDFile: *bootIDFile, SysRoot: *sysRoot, CgroupDir: cgroupDir, Containers: ctr, Policy: &nodePolicy})
	nodeWorker := worker.New(c, contract.NodeQueue(*node), registration.NodeOptions(workerOpts, agent))
	// The checks of a cluster with vLLM's API key run on its head's agent, which holds the
	// key (contract.HeadChecks): CheckTarget and WatchTarget check what the controller read
	// and make no Temporal call; the older three read the deploy's runs with this client,
	// for runs begun before the split.
	checks := &control.Checks{Controller: control.Controller{Client: c, DataConverter: copts.DataConverter},
		APIKey: activities.EndpointKey(agent.VLLM)}
	registration.Node(nodeWorker, agent, checks)
	queues := contract.NodeQueue(*node)
	if *role == roleAll {
		wf := worker.New(c, contract.WorkflowQueue, workerOpts)
		workflows.RegisterAll(wf)
		registration.Controller(wf, checks)
		if err := wf.Start(); err != nil {
			return fmt.Errorf("start workflow worker: %w", err)
		}
		defer wf.Stop()
		queues = contract.WorkflowQueue + " and " + queues
	}
	// Before the node's queue is served: nothing this removes can be an activity's now.
	sweepShortLived(ctx, agent.Containers, z)
	if err := nodeWorker.Start(); err != nil {
		return fmt.Errorf("start node worker on %s: %w", contract.NodeQueue(*node), err)
	}
	defer nodeWorker.Stop()
	defer live.Set(false, "shutting down")
	live.Set(true, "polling "+queues)
	z.Info("node agent serving", zap.String("queue", contract.NodeQueue(*node)), zap.String("role", *role))
	go reportStart(ctx, c, *node, func(ctx context.Context) (string, error) {
		return agent.Probe.BootID(ctx, contract.BootIDRequest{Node: *node})
	}, func(ctx context.Context) ([]string, error) {
		return activities.NodeClusters(ctx, agent.Containers, "")
	}, z)
	go agent.GuardMemory(ctx, memGauges)
	select {
	case <-ctx.Done():
		z.Info("shutting down")
		return nil
	case err := <-fatal:
		return fmt.Errorf("worker stopped: %w", err)
	}
}

// listFlag is a repeatable flag whose values may also be comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}

// containerOptions reads the container flags; a bad value names its flag.
func containerOptions(network, ipc, gpus, shm, ulimits string) (activities.ContainerOptions, error) {
	o := activities.DefaultContainerOptions()
	o.Network, o.IPC, o.GPUs = network, ipc, gpus
	if network == "" {
		return o, errors.New("--container-network: empty (host, or container:NAME)")
	}
	switch {
	case ipc == "":
		o.IPC = activities.IPCPrivate
	case ipc == "host" || strings.HasPrefix(ipc, "container:"):
		return o, fmt.Errorf("--ipc %s: it would share /dev/shm and SysV IPC with other containers (every cluster's, with host); leave it %s, the default (each container has its own, of --shm-size)", ipc, activities.IPCPrivate)
	}
	n, err := units.RAMInBytes(shm)
	if err != nil {
		return o, fmt.Errorf("--shm-size %q: %w", shm, err)
	}
	o.ShmSize = n
	o.Ulimits = nil
	for _, u := range strings.Split(ulimits, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if _, err := units.ParseUlimit(u); err != nil {
			return o, fmt.Errorf("--ulimits %q: %w", u, err)
		}
		o.Ulimits = append(o.Ulimits, u)
	}
	return o, nil
}

// reportStart starts this node's NodeStarted run on the controller (workflows.NodeStarted,
// one workflow ID per node, a restart's run replacing the last): with the node's boot ID,
// which the controller tells every running supervisor and deploy (one that knew another
// ID learns the node rebooted: a supervisor redeploys, a deploy starts over), and the
// clusters this node holds containers of, which the controller reconciles against their
// runs (what a deploy had to leave while this node was down is removed, through
// ReconcileCluster on this node's queue). That start is the only call the agent makes
// besides serving its queue (docs/security.md lists them); it does not wait for the run.
func reportStart(ctx context.Context, c starter, node string, bootID func(context.Context) (string, error), nodeClusters func(context.Context) ([]string, error), z *zap.Logger) {
	req := contract.NodeStartRequest{Node: node}
	boot, err := bootID(ctx)
	if err != nil {
		z.Warn("boot id unknown; supervisors and deploys not told of this start", zap.Error(err))
	}
	req.BootID = boot
	// An engine that does not answer costs the reconcile, never the boot report.
	if req.Clusters, err = nodeClusters(ctx); err != nil {
		z.Warn("this node's containers unknown; none reconciled at this start", zap.Error(err))
	}
	for attempt := 0; ; attempt++ {
		run, err := c.ExecuteWorkflow(ctx, startOptions(node), contract.NodeStartedWorkflow, req)
		if err == nil {
			z.Info("reported this node's start to the controller", zap.String("workflow", run.GetID()), zap.String("run", run.GetRunID()),
				zap.String("boot_id", boot), zap.Strings("clusters", req.Clusters))
			return
		}
		z.Warn("report this node's start", zap.Error(err))
		if attempt == 4 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(attempt+1) * time.Second):
		}
	}
}

// starter is what the agent's own code asks of its Temporal client besides the workers'
// polls: the start of its NodeStarted run, nothing else (TestAgentClientCallsOnlyStarts).
type starter interface {
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
}

// startOptions start a node's NodeStarted run: under the node's one ID, replacing a run
// of an earlier start still going (the newest boot ID is the one to tell), on the
// controller's queue.
func startOptions(node string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID: contract.NodeStartedWorkflowID(node), TaskQueue: contract.WorkflowQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		// A controller down for longer than this leaves the start unreported; the
		// supervisors' watches notice a node that stopped serving on their own.
		WorkflowExecutionTimeout: time.Hour,
	}
}

// sweepShortLived removes the image reads and one-shot proofs an earlier run of this agent
// left on its node (killed while it ran them). An engine that does not answer delays the
// agent's start by at most shortLivedSweepTimeout; the leftovers then wait for the next start.
func sweepShortLived(ctx context.Context, containers *activities.Containers, z *zap.Logger) {
	ctx, cancel := context.WithTimeout(ctx, shortLivedSweepTimeout)
	defer cancel()
	removed, err := activities.SweepShortLived(ctx, containers, "")
	if err != nil {
		z.Warn("sweep this node's short-lived containers", zap.Strings("removed", removed), zap.Error(err))
		return
	}
	if len(removed) > 0 {
		z.Info("swept this node's short-lived containers", zap.Strings("removed", removed))
	}
}

const shortLivedSweepTimeout = 20 * time.Second

// stderr is where the agent's start-up warnings go, whatever the log level (tests swap it).
var stderr io.Writer = os.Stderr

// unsignedBanner is the warning an agent without trusted_keys prints at start: the
// production default is signed intent (docs/security.md), and an unsigned agent acts on
// requests from anyone who can start a workflow in the namespace.
func unsignedBanner(node, file string) string {
	return fmt.Sprintf(`
*** WARNING: tpdeploy agent %s runs UNSIGNED ***
*** No trusted_keys in its policy (%s): it acts on requests from anyone who can start a
*** workflow in the namespace, bounded only by the rest of the policy. Production agents
*** run signed: make a key with "starter keygen -o operator.key", add the public key it
*** prints to trusted_keys (or --trust-key ID=BASE64, TPDEPLOY_TRUSTED_KEYS) and restart
*** the agent; sign with starter --sign-key-file operator.key (docs/security.md).

`, node, file)
}
