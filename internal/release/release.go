package release

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// Executors as the spec names them.
const (
	ExecutorAuto = "auto"
	ExecutorRay  = "ray"
	ExecutorMP   = "mp"
)

// Ray executors of vLLM.
const (
	// RayLegacy is RayDistributedExecutor (vllm/v1/executor/ray_executor.py): bundle 0
	// pinned to node:<driver's get_ip()>, the c10d store on the driver's VLLM_HOST_IP,
	// the duplicate-IP check, the driver's env copied onto the workers.
	RayLegacy = "legacy"
	// RayV2 is RayExecutorV2 (vllm/v1/executor/ray_executor_v2.py, vLLM PR #41421): no
	// pin, the store on rank 0's Ray node IP, workers fill the driver's env in with
	// setdefault, no duplicate-IP check.
	RayV2 = "v2"
)

// How the driver's environment reaches vLLM's Ray workers.
const (
	// EnvCopyNone: no copy (mp: every node's processes run in its own container).
	EnvCopyNone = "none"
	// EnvCopyVLLMOnly: only vLLM's registered VLLM_* variables (and the HF tokens) are
	// copied, overwriting the worker's (releases before vLLM PR #34383).
	EnvCopyVLLMOnly = "vllm-only"
	// EnvCopyPrefixesOverwrite: vLLM's registered names and every VLLM_, NCCL_, UCX_, HF_,
	// HUGGING_FACE_, LMCACHE_ variable and PYTHONHASHSEED (FLASH_ATTENTION_ only from vLLM PR
	// #49177, 2026-07-20), minus the worker-specific ones and the non-carry-over file,
	// OVERWRITING the worker's own (vllm/ray/ray_env.py, PR #34383).
	EnvCopyPrefixesOverwrite = "prefixes-overwrite"
	// EnvCopyAllSetdefault: every variable, minus the worker-specific ones and the
	// non-carry-over file, applied with os.environ.setdefault: a worker's own value is
	// kept (vllm/v1/executor/ray_env_utils.py, V2).
	EnvCopyAllSetdefault = "all-setdefault"
)

// Where the c10d (torch.distributed TCPStore) rendezvous address comes from.
const (
	RendezvousDriverHostIP = "the driver's VLLM_HOST_IP"
	RendezvousRayNodeIP    = "rank 0's Ray node IP (--node-ip-address)"
	RendezvousMasterAddr   = "--master-addr"
)

// Thresholds: the first release with each behaviour.
var (
	// NnodesSince: vLLM's own multi-node mode (--nnodes, --node-rank, --master-addr,
	// --headless), vLLM PR #23691.
	NnodesSince = Version{0, 11, 1}
	// PrefixCopySince: the legacy Ray executor copies NCCL_* and the other prefixes
	// (vLLM PR #34383, vllm/ray/ray_env.py get_env_vars_to_copy).
	PrefixCopySince = Version{0, 17, 0}
	// RayV2Since: RayExecutorV2 exists, opt-in with VLLM_USE_RAY_V2_EXECUTOR_BACKEND=1
	// (vLLM PR #36836, v0.20.0); RayV2DefaultSince: the switch defaults to 1 (vLLM PR
	// #41421, vllm/envs.py, v0.21.0).
	RayV2Since        = Version{0, 20, 0}
	RayV2DefaultSince = Version{0, 21, 0}
	// NCCLSubnetRoutingSince: NCCL's IB plugin can pick, per peer, the local HCA on the
	// peer's subnet (NCCL_IB_SUBNET_AWARE_ROUTING, default 0, and NCCL_IB_SUBNET_PREFIX_LEN,
	// default 24: src/transport/net_ib/connect.cc at v2.30.7-1, ncclIbFindDevBySubnet);
	// absent from v2.30.4-1, v2.30.3-1, v2.29.7-1 and v2.28.9-1.
	NCCLSubnetRoutingSince = Version{2, 30, 7}
)

// EnvRayV2 is vLLM's switch between the two Ray executors, read in the driver's process.
const EnvRayV2 = "VLLM_USE_RAY_V2_EXECUTOR_BACKEND"

// Error is a decision that refuses the deploy; Type is what callers branch on.
type Error struct {
	Type string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Model is how the cluster's vLLM release will behave, decided before anything starts.
type Model struct {
	VLLM string `json:"vllm"`
	// NCCL is the version of the NCCL library the head's image loads (Image.NCCL): the
	// data plane plans only what that version has (netplan, docs/network.md).
	NCCL string `json:"nccl,omitempty"`
	// Executor is what runs: ray or mp; Why says why it was picked.
	Executor string `json:"executor"`
	Why      string `json:"why"`
	// RayExecutor is legacy or v2 when Executor is ray.
	RayExecutor string `json:"ray_executor,omitempty"`
	EnvCopy     string `json:"env_copy"`
	// PinsDriverNode: bundle 0 needs node:<driver's VLLM_HOST_IP> (seed failure 1).
	PinsDriverNode bool `json:"pins_driver_node"`
	// Rendezvous says which setting decides the c10d address.
	Rendezvous string `json:"rendezvous"`
	// ChecksUniqueIPs: vLLM refuses two workers reporting one VLLM_HOST_IP.
	ChecksUniqueIPs bool `json:"checks_unique_ips"`
	// OpenPorts says which cross-node ports this executor opens that the reachability
	// test did not try, for the plan's warnings.
	OpenPorts string `json:"open_ports,omitempty"`
}

// Layout is what the decision needs of the spec.
type Layout struct {
	Executor string
	Head     string
	// HeadEnv is the head node's spec env (where the driver runs): EnvRayV2 is read there.
	HeadEnv map[string]string
	World   int
	Nodes   int
}

// Decide picks the executor and the release's behaviour from the image on the head (the
// images are compared by Compare first). An explicit executor the image cannot run is
// refused with the ways out; auto picks ray when the image has Ray, else mp when the
// release has --nnodes and the world divides over the nodes, else refuses.
func Decide(l Layout, head Image) (Model, error) {
	v, ok := ParseVersion(head.VLLM)
	if !ok {
		return Model{}, &Error{failure.ImageUnreadable, fmt.Sprintf("%s: image %s: cannot read vLLM's version %q", head.Node, head.Ref, head.VLLM)}
	}
	nnodes := v.AtLeast(NnodesSince)
	mpFits := l.Nodes <= 1 || (l.World%l.Nodes == 0)
	m := Model{VLLM: head.VLLM, NCCL: head.NCCL}
	switch l.Executor {
	case ExecutorRay:
		if !head.HasRay() {
			return Model{}, lacksRay(head, v, nnodes)
		}
		m.Executor, m.Why = ExecutorRay, "executor: ray in the spec"
	case ExecutorMP:
		if !nnodes {
			return Model{}, &Error{failure.ImageLacksNnodes, fmt.Sprintf(
				"%s: image %s holds vLLM %s, which has no --nnodes (vLLM's own multi-node mode is in %s and later); ways out: executor: ray (the image has Ray %s), or an image with vLLM %s or later",
				head.Node, head.Ref, head.VLLM, NnodesSince, orNone(head.Ray), NnodesSince)}
		}
		m.Executor, m.Why = ExecutorMP, "executor: mp in the spec"
	case ExecutorAuto, "":
		switch {
		case head.HasRay():
			m.Executor, m.Why = ExecutorRay, fmt.Sprintf("auto: the image has Ray %s", head.Ray)
		case nnodes && mpFits:
			m.Executor, m.Why = ExecutorMP, fmt.Sprintf("auto: the image has no Ray and vLLM %s has --nnodes (%d GPUs over %d nodes)", head.VLLM, l.World, l.Nodes)
		case nnodes:
			return Model{}, &Error{failure.ExecutorUnavailable, fmt.Sprintf(
				"%s: image %s has no Ray, and vLLM's own multi-node mode needs the %d GPUs (tensor x pipeline) to divide evenly over the %d nodes; ways out: a layout that divides, or an image with Ray added",
				head.Node, head.Ref, l.World, l.Nodes)}
		default:
			return Model{}, &Error{failure.ExecutorUnavailable, fmt.Sprintf(
				"%s: image %s has neither Ray nor --nnodes (vLLM %s); ways out: an image with Ray added, or vLLM %s or later with executor: mp",
				head.Node, head.Ref, head.VLLM, NnodesSince)}
		}
	default:
		return Model{}, &Error{failure.ExecutorUnavailable, fmt.Sprintf("unknown executor %q", l.Executor)}
	}
	if m.Executor == ExecutorMP {
		m.EnvCopy, m.Rendezvous = EnvCopyNone, RendezvousMasterAddr
		m.OpenPorts = "the torch.distributed store on the head's --master-port and NCCL's own ports"
		return m, nil
	}
	m.RayExecutor = RayLegacy
	// vllm/envs.py reads the switch as bool(int(os.getenv(name, default))): " 0" and "00"
	// are 0 (legacy), "2" is on, and a value int() refuses ("false", "yes") ends vLLM in
	// a ValueError, so it is refused here, naming the variable.
	on := v.AtLeast(RayV2DefaultSince)
	if sw, set := l.HeadEnv[EnvRayV2]; set && v.AtLeast(RayV2Since) {
		n, err := strconv.Atoi(strings.TrimSpace(sw))
		if err != nil {
			return Model{}, &Error{failure.BadRequest, fmt.Sprintf("%s: %s=%q: vLLM reads it with int() and would fail (ValueError: invalid literal for int() with base 10: %q); use 0 (the legacy executor) or 1 (RayExecutorV2)", head.Node, EnvRayV2, sw, sw)}
		}
		on = n != 0
	}
	if on && v.AtLeast(RayV2Since) {
		m.RayExecutor = RayV2
	}
	switch {
	case m.RayExecutor == RayV2:
		m.EnvCopy, m.Rendezvous = EnvCopyAllSetdefault, RendezvousRayNodeIP
		m.OpenPorts = "the driver's and workers' message queues (ZMQ, random ports on the Ray node IPs, no timeout) and the c10d store on a random port"
	default:
		m.EnvCopy, m.Rendezvous = EnvCopyVLLMOnly, RendezvousDriverHostIP
		if v.AtLeast(PrefixCopySince) {
			m.EnvCopy = EnvCopyPrefixesOverwrite
		}
		m.PinsDriverNode, m.ChecksUniqueIPs = true, true
		m.OpenPorts = "the c10d store on a random port of the driver's VLLM_HOST_IP"
	}
	return m, nil
}

func lacksRay(head Image, v Version, nnodes bool) error {
	outs := []string{}
	if nnodes {
		outs = append(outs, "executor: mp (or auto), vLLM's own multi-node mode, which this image has")
	}
	outs = append(outs, fmt.Sprintf("an image with Ray added (FROM %s, RUN pip install ray)", head.Ref),
		"vLLM 0.17.1 or earlier, whose stock images still ship Ray")
	why := "no ray distribution is installed"
	if head.Ray != "" && !head.RayBin {
		why = "ray " + head.Ray + " is installed but no `ray` executable is on PATH"
	}
	return &Error{failure.ImageLacksRay, fmt.Sprintf("%s: image %s (vLLM %s) has no Ray: %s; stock vLLM images have none since v0.18.0. Ways out: %s",
		head.Node, head.Ref, head.VLLM, why, strings.Join(outs, "; "))}
}

// NICSelectionEnv are vLLM's per-GPU NIC selection variables (vLLM PR #42083,
// vllm/v1/executor/vllm_net_devices.py): with both set, each worker prepends its
// PCIe-local HCA to every variable VLLM_NIC_SELECTION_VARS lists (`value =
// f"{rdma_dev}{suffix},{existing}"`), so the plan's exact NCCL_IB_HCA loses its exact match
// and NCCL may use rails the data-plane proof never measured. A node's env may not set them
// (spec validation); CheckImageEnv refuses an image whose own ENV does.
var NICSelectionEnv = []string{"VLLM_GPU_NIC_PCIE_MAPPING", "VLLM_NIC_SELECTION_VARS"}

// CheckImageEnv refuses the deploy when a node's image sets a NICSelectionEnv variable in
// its own ENV, naming the node, the image, the variables and the fix. tpdeploy does not
// blank them itself: a spec that needs them cannot say so, and an image that sets them was
// built for a per-GPU rail layout the plan would silently override.
func CheckImageEnv(images []Image) error {
	var bad []string
	for _, img := range images {
		if len(img.NICSelection) > 0 {
			bad = append(bad, fmt.Sprintf("%s: image %s sets %s in its ENV", img.Node, img.Ref, strings.Join(img.NICSelection, " and ")))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return &Error{failure.ImageNICSelection, strings.Join(bad, "; ") +
		": vLLM's per-GPU NIC selection (vLLM PR #42083) would prepend each worker's PCIe-local HCA to NCCL_IB_HCA, so NCCL could use rails other than the plan's exact list that the data-plane proof measured." +
		" Fix: an image without them, or one that blanks them (ENV VLLM_GPU_NIC_PCIE_MAPPING= VLLM_NIC_SELECTION_VARS=; vLLM treats a blank value as unset); the plan's NCCL_IB_HCA already lists every planned HCA"}
}

// Compare refuses nodes whose images differ, naming both nodes and what differs. With
// mismatch "warn" it returns the difference as a warning instead.
func Compare(images []Image, head string, mismatch string) (warnings []string, err error) {
	var h Image
	for _, img := range images {
		if img.Node == head {
			h = img
		}
	}
	var diffs []string
	for _, img := range images {
		if img.Node == head || img.ID == h.ID {
			continue
		}
		d := differences(h, img)
		if len(d) == 0 {
			d = []string{fmt.Sprintf("image ID %s vs %s", shortID(h.ID), shortID(img.ID))}
		}
		diffs = append(diffs, fmt.Sprintf("%s and %s differ: %s", h.Node, img.Node, strings.Join(d, ", ")))
	}
	if len(diffs) == 0 {
		return nil, nil
	}
	msg := fmt.Sprintf("image %s is not the same build on every node: %s", h.Ref, strings.Join(diffs, "; "))
	if mismatch == "warn" {
		return []string{msg}, nil
	}
	return nil, &Error{failure.ImageMismatch, msg + " (set image_mismatch: warn to proceed anyway)"}
}

func differences(a, b Image) []string {
	var out []string
	for _, f := range []struct{ name, x, y string }{
		{"vllm", a.VLLM, b.VLLM}, {"ray", a.Ray, b.Ray}, {"torch", a.Torch, b.Torch},
		{"nccl", a.NCCL, b.NCCL}, {"python", a.Python, b.Python},
	} {
		if f.x != f.y {
			out = append(out, fmt.Sprintf("%s %s on %s, %s on %s", f.name, orNone(f.x), a.Node, orNone(f.y), b.Node))
		}
	}
	if a.Verbs != b.Verbs {
		out = append(out, fmt.Sprintf("libibverbs %v on %s, %v on %s", a.Verbs, a.Node, b.Verbs, b.Node))
	}
	return out
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// CanPrint says whether this release and executor have code that prints the failure
// logscan classifies as typ. A finding the model rules out is a misreading (a line quoted
// in a model's output, say) and is not acted on.
func (m Model) CanPrint(typ string) bool {
	switch typ {
	case failure.DuplicateAddress:
		// "Every node should have a unique IP address" is _init_workers_ray's, legacy only.
		return m.Executor == ExecutorRay && m.ChecksUniqueIPs
	case failure.PlacementGroupPending, failure.GCSUnreachable, failure.RayDriverAttach, failure.RayNodeDead:
		// RayNodeDead here is a Ray line (a node marked dead), which only Ray's processes print.
		return m.Executor == ExecutorRay
	}
	return true
}

// PendingFix is the fix for a placement group that waits: under the legacy executor the
// pin to the driver's address is the usual cause; V2 pins nothing, so only GPUs can be
// missing.
func (m Model) PendingFix() string {
	if m.PinsDriverNode {
		return "make the head's VLLM_HOST_IP the address its Ray node registered (ray start --node-ip-address), and check `ray status` shows every planned GPU free"
	}
	return "the group asks only for GPUs (vLLM's V2 Ray executor pins no node): check `ray status` shows every planned GPU free"
}

// Describe is the plan's lines about the release.
func (m Model) Describe() []string {
	lines := []string{fmt.Sprintf("vLLM %s, executor %s (%s)", m.VLLM, m.Executor, m.Why)}
	if m.Executor == ExecutorRay {
		lines = append(lines, fmt.Sprintf("Ray executor %s; driver env to workers: %s; c10d address from %s", m.RayExecutor, m.EnvCopy, m.Rendezvous))
	} else {
		lines = append(lines, "no Ray: every node runs its ranks in its own container (--nnodes/--node-rank); c10d address from "+m.Rendezvous)
	}
	if m.OpenPorts != "" {
		lines = append(lines, "also opened between nodes and not covered by the reachability test: "+m.OpenPorts)
	}
	return lines
}
