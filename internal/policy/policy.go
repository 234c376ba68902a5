// Package policy is the node's own limit on what a cluster spec may make its agent do:
// which images it may run, which host paths it may bind-mount, which Docker engines it may
// talk to and which ports its containers may serve on. The spec comes from whoever can
// start a workflow; the policy comes from the node's operator (a file next to the systemd
// unit, /etc/tpdeploy/policy.yaml, and agent flags), so a spec cannot reach past it.
//
//	# /etc/tpdeploy/policy.yaml — a setting given here replaces its default
//	allowed_images: ["vllm/vllm-openai:*", "registry.internal/vllm/*:*"]
//	allowed_mounts: [/root/.cache/huggingface, "/models:ro"]   # :ro: containers mount it, and below it, read-only
//	allowed_docker_hosts: ["unix:///var/run/docker.sock"]
//	allowed_ports: ["1024-65535"]
//	allowed_env: [NCCL_DEBUG, "MY_SITE_*", TRITON_PTXAS_PATH]   # a code-loading name only exactly
//	allowed_extra_args: [--max-model-len, --trust-remote-code]  # vLLM options, as vLLM spells them
//	secret_dirs: [/etc/tpdeploy/secrets]
//	secret_env: [HF_TOKEN]
//	rdma_devices: planned   # or none: map no /dev/infiniband/uverbsN into containers
//	require_pinned_images: true   # images only as NAME[:TAG]@sha256:DIGEST, by content
//	trusted_keys: [{id: alice, ed25519: "BASE64 of 32 bytes"}]
//	intents_not_before: "2026-05-01T00:00:00Z"   # refuse every spec signed earlier
//	host_reserve: "8GiB,10%"   # host memory no deploy may plan to take: the larger applies (the default)
//	memory_floor: "1GiB,2%"    # below this available, the agent stops the engines (the default)
//	engine_rank_memory: 2GiB   # host memory an engine rank takes besides weights and KV cache (the default estimate)
//
// With trusted_keys set, the agent acts (containers, vLLM, model files, removals) only on
// requests carrying a spec signed by one of those keys (package intent), and only as that
// spec says, before the signature's expiry and not when it was signed before
// intents_not_before; without, it checks requests against the rest of the policy alone.
//
// Agent flags (--allow-image, --allow-mount, --allow-docker-host, --allow-ports,
// --allow-env, --allow-extra-arg, --allow-secret-dir, --allow-secret-env) add to the file's lists (or to the
// defaults). The checks are pure: CheckMount compares the path it is given, so callers
// pass a path with symlinks already resolved (the agent opens what is below a mount with
// the kernel refusing symlinks).
//
// allowed_mounts are also the only directories the agent itself reads models from, serves
// them from (model.sync) and writes them to; allowed_env names the variables a spec's
// node env (and the plan's) may set, and never allows the ones that make a program run
// code (spec.CodeExecEnv); secrets.*.file must name a file under secret_dirs and
// secrets.*.env a variable in secret_env.
package policy

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"
	"sigs.k8s.io/yaml"

	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// DefaultFile is where the agent looks for its policy; missing, the defaults apply.
const DefaultFile = "/etc/tpdeploy/policy.yaml"

// DefaultDockerHost is the local Docker engine's socket, the only engine allowed by default.
const DefaultDockerHost = "unix:///var/run/docker.sock"

// Defaults: the stock vLLM images, the Hugging Face cache and /models, the local engine,
// unprivileged ports.
var (
	DefaultImages = []string{"vllm/vllm-openai:*"}
	// DefaultMounts: the HF cache, which containers mount read-write, and /models, whose
	// directories (model.host_dir) they mount read-only (":ro", CheckBind).
	DefaultMounts      = []string{"/root/.cache/huggingface", "/models" + ReadOnlySuffix}
	DefaultDockerHosts = []string{DefaultDockerHost}
	DefaultPorts       = []string{"1024-65535"}
	// DefaultEnv are variables vLLM, Ray, torch, NCCL, UCX, CUDA and the Hugging Face
	// libraries read as settings, by exact name: a family glob (NCCL_*, TRITON_*) would
	// also allow the names in it that load code (spec.CodeLoadingEnv), and whatever such
	// names a later release adds. The plan's own (VLLM_HOST_IP, the *_SOCKET_IFNAME,
	// NCCL_IB_HCA, RAY_ADDRESS) are here because every container carries them.
	DefaultEnv = []string{
		"VLLM_HOST_IP", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "RAY_ADDRESS",
		"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_GID_INDEX", "NCCL_IB_TIMEOUT",
		"NCCL_IB_RETRY_CNT", "NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_TC", "NCCL_IB_SL", "NCCL_NET_GDR_LEVEL",
		"NCCL_NET_GDR_READ", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_CUMEM_ENABLE",
		"NCCL_NVLS_ENABLE", "NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE",
		"NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS", "NCCL_CROSS_NIC", "NCCL_IGNORE_CPU_AFFINITY",
		"NCCL_IB_SUBNET_AWARE_ROUTING", "NCCL_IB_SUBNET_PREFIX_LEN", "NCCL_IB_MERGE_NICS",
		"VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING", "VLLM_LOG_STATS_INTERVAL", "VLLM_ATTENTION_BACKEND",
		"VLLM_USE_V1", "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_ENGINE_ITERATION_TIMEOUT_S", "VLLM_RPC_TIMEOUT",
		"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "VLLM_USE_RUST_FRONTEND",
		"VLLM_USE_RAY_V2_EXECUTOR_BACKEND", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "VLLM_USE_FLASHINFER_SAMPLER",
		"VLLM_FLASH_ATTN_VERSION", "VLLM_PP_LAYER_PARTITION", "VLLM_MARLIN_USE_ATOMIC_ADD", "VLLM_NO_USAGE_STATS",
		"VLLM_DO_NOT_TRACK", "VLLM_SKIP_P2P_CHECK", "VLLM_DISABLE_COMPILE_CACHE",
		"TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_ENABLE_MONITORING",
		"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "TORCH_DISTRIBUTED_DEBUG", "TORCH_CPP_LOG_LEVEL", "PYTORCH_CUDA_ALLOC_CONF",
		"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
		"UCX_TLS", "UCX_NET_DEVICES", "UCX_LOG_LEVEL", "RAY_DEDUP_LOGS",
		"HF_HUB_OFFLINE", "HF_HUB_ENABLE_HF_TRANSFER", "HF_HUB_DISABLE_TELEMETRY", "HF_HUB_DISABLE_PROGRESS_BARS",
		"HF_HUB_DOWNLOAD_TIMEOUT", "HF_HUB_ETAG_TIMEOUT", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE",
		"TOKENIZERS_PARALLELISM", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
		"PYTHONHASHSEED", "TZ", "LANG", "LC_ALL",
	}
	// DefaultExtraArgs are vLLM options (as its parser spells them, spec.ExtraArgOptions)
	// that only tune the engine: none loads code, reads a file or serves one. Options that
	// do (--trust-remote-code, --tool-parser-plugin, --middleware, --worker-extension-cls,
	// --allowed-local-media-path...) are allowed only by the node's allowed_extra_args.
	DefaultExtraArgs = []string{
		"--max-model-len", "--gpu-memory-utilization", "--dtype", "--quantization", "--kv-cache-dtype",
		"--enable-prefix-caching", "--no-enable-prefix-caching", "--max-num-seqs", "--max-num-batched-tokens",
		"--enforce-eager", "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--swap-space", "--block-size",
		"--seed", "--max-logprobs", "--disable-log-stats", "--disable-log-requests", "--enable-log-requests",
		"--uvicorn-log-level", "--disable-custom-all-reduce", "--cpu-offload-gb", "--enable-expert-parallel",
		"--max-parallel-loading-workers", "--enable-auto-tool-choice", "--tool-call-parser", "--reasoning-parser",
	}
	// DefaultSecretDirs is where secret files may be read from.
	DefaultSecretDirs = []string{"/etc/tpdeploy/secrets"}
	// DefaultSecretEnv are the agent variables a secret reference may name.
	DefaultSecretEnv = []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY", "RAY_AUTH_TOKEN"}
	// DefaultHubEndpoints are the hubs a model.source: hub download may come from (and
	// the token go to): huggingface.co only; a mirror (HF_ENDPOINT) is the operator's
	// choice.
	DefaultHubEndpoints = []string{"https://huggingface.co"}
)

// Settings and the flags that add to them, as named in error messages.
const (
	SettingImages       = "allowed_images"
	SettingMounts       = "allowed_mounts"
	SettingDockerHosts  = "allowed_docker_hosts"
	SettingPorts        = "allowed_ports"
	SettingEnv          = "allowed_env"
	SettingExtraArgs    = "allowed_extra_args"
	SettingSecretDirs   = "secret_dirs"
	SettingSecretEnv    = "secret_env"
	SettingHubEndpoints = "allowed_hub_endpoints"
	SettingRDMA         = "rdma_devices"
	SettingPinned       = "require_pinned_images"
	SettingTrustedKeys  = "trusted_keys"
	SettingNotBefore    = "intents_not_before"

	FlagImage       = "--allow-image"
	FlagMount       = "--allow-mount"
	FlagDockerHost  = "--allow-docker-host"
	FlagPorts       = "--allow-ports"
	FlagEnv         = "--allow-env"
	FlagExtraArg    = "--allow-extra-arg"
	FlagSecretDir   = "--allow-secret-dir"
	FlagSecretEnv   = "--allow-secret-env"
	FlagHubEndpoint = "--allow-hub-endpoint"
	FlagTrustKey    = "--trust-key"
	FlagRDMA        = "--rdma-devices"
	FlagPinned      = "--require-pinned-images"
	FlagNotBefore   = "--intents-not-before"
)

// RDMA device policies (rdma_devices): RDMAPlanned maps the verbs devices
// (/dev/infiniband/uverbsN) of the HCAs the plan chose into the node's containers, the
// default; RDMANone maps none (NCCL then runs over sockets, and a data-plane proof that
// requires RDMA fails naming this setting).
const (
	RDMAPlanned = "planned"
	RDMANone    = "none"
)

// Policy is what this node allows. Build it with Default, Parse or Load.
type Policy struct {
	Images []string // glob patterns (path.Match) of image references
	Mounts []string // absolute host path prefixes
	// ReadOnlyMounts are the Mounts given with ":ro": containers bind them, and the
	// directories below them, only read-only (CheckBind).
	ReadOnlyMounts []string
	DockerHosts    []string // Docker engine addresses, exactly
	Ports          []string // port ranges, "1024-65535" or "8000"
	Env            []string // glob patterns of environment variable names
	ExtraArgs      []string // vLLM options model.extra_args may give, exactly, in vLLM's spelling
	SecretDirs     []string // absolute directories secret files may be read from
	SecretEnv      []string // agent variables secret references may name, exactly
	HubEndpoints   []string // hub base URLs a download may come from, exactly (no trailing slash)
	// RDMA is RDMAPlanned or RDMANone.
	RDMA string
	// RequirePinned allows an image only by content: NAME[:TAG]@sha256:DIGEST, where the
	// digest is the image's repository digest or its image ID (the agent checks which
	// image the engine holds under it).
	RequirePinned bool
	// TrustedKeys are the operators' public keys; set, every acting request must carry a
	// spec one of them signed.
	TrustedKeys []TrustedKey
	// NotBefore, when set, revokes every signed intent signed before it (its signed_at):
	// raising it revokes every older spec at once, while specs signed since still act.
	NotBefore time.Time
	// HostReserve is the host memory a deploy's budget keeps free for the OS, Docker and
	// the agent (hostmem.Decide); the default is hostmem.DefaultReserve.
	HostReserve hostmem.Reserve
	// MemoryFloor is the guard's floor: below it available, the agent stops the node's
	// engine containers (hostmem.Guard); the default is hostmem.DefaultFloor.
	MemoryFloor hostmem.Reserve
	// EngineRankMemory is the budget's estimate of what one engine rank takes of host
	// memory besides weights and KV cache (hostmem.Decide); the default is
	// hostmem.EngineRankBytes. A fleet that measured its engines' footprint states it here.
	EngineRankMemory int64
	// File is the policy file an operator edits to change it (DefaultFile when none was read).
	File  string
	ports []portRange
}

// Overrides are the agent's flags: each list is added to the file's (or the default).
type Overrides struct {
	Images       []string
	Mounts       []string
	DockerHosts  []string
	Ports        []string
	Env          []string
	ExtraArgs    []string
	SecretDirs   []string
	SecretEnv    []string
	HubEndpoints []string
	// RDMA, when set, replaces the file's rdma_devices.
	RDMA string
	// RequirePinned, when true, requires pinned images whatever the file says.
	RequirePinned bool
	// HostReserve, when set, replaces the file's host_reserve ("8GiB,10%", "512MiB").
	HostReserve string
	// MemoryFloor, when set, replaces the file's memory_floor.
	MemoryFloor string
	// EngineRankMemory, when set, replaces the file's engine_rank_memory ("2GiB").
	EngineRankMemory string
	// TrustedKeys are "ID=BASE64" or "BASE64" (the ID is then the key's fingerprint).
	TrustedKeys []string
	// NotBefore, RFC 3339, revokes intents signed earlier; the later of it and the
	// file's intents_not_before applies (a flag can only revoke more).
	NotBefore string
}

// TrustedKey is an operator's public key; ID is the operator's name for it (in logs and
// refusals), the key itself is matched by its fingerprint (intent.KeyID).
type TrustedKey struct {
	ID  string            `json:"id,omitempty"`
	Key ed25519.PublicKey `json:"-"`
}

// trustedKeyEntry is a trusted_keys entry of the file.
type trustedKeyEntry struct {
	ID      string `json:"id"`
	Ed25519 string `json:"ed25519"`
}

type file struct {
	Images       *[]string         `json:"allowed_images"`
	Mounts       *[]string         `json:"allowed_mounts"`
	DockerHosts  *[]string         `json:"allowed_docker_hosts"`
	Ports        *[]string         `json:"allowed_ports"`
	Env          *[]string         `json:"allowed_env"`
	ExtraArgs    *[]string         `json:"allowed_extra_args"`
	SecretDirs   *[]string         `json:"secret_dirs"`
	SecretEnv    *[]string         `json:"secret_env"`
	HubEndpoints *[]string         `json:"allowed_hub_endpoints"`
	RDMA         *string           `json:"rdma_devices"`
	Pinned       bool              `json:"require_pinned_images"`
	TrustedKeys  []trustedKeyEntry `json:"trusted_keys"`
	NotBefore    *string           `json:"intents_not_before"`
	HostReserve  *string           `json:"host_reserve"`
	MemoryFloor  *string           `json:"memory_floor"`
	EngineRank   *string           `json:"engine_rank_memory"`
}

// Default is the policy of a node whose operator set nothing.
func Default() Policy {
	p, err := Parse(nil, DefaultFile, Overrides{})
	if err != nil {
		panic(err) // the defaults are constants
	}
	return p
}

// Load reads the policy file and adds the overrides. A missing file at DefaultFile means
// the defaults; a missing file anywhere else is an error, so a mistyped path does not
// silently change the policy.
func Load(name string, add Overrides) (Policy, error) {
	if name == "" {
		name = DefaultFile
	}
	data, err := os.ReadFile(name)
	switch {
	case errors.Is(err, os.ErrNotExist) && name == DefaultFile:
		data = nil
	case err != nil:
		return Policy{}, fmt.Errorf("node policy: %w", err)
	}
	return Parse(data, name, add)
}

// Parse reads a policy file's YAML (empty for none), applies the defaults to the settings
// it leaves out, adds the overrides and validates the result. name is the file's name, used
// in messages.
func Parse(data []byte, name string, add Overrides) (Policy, error) {
	var f file
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return Policy{}, fmt.Errorf("node policy %s: %w", name, err)
	}
	pick := func(set *[]string, def []string, extra []string) []string {
		out := def
		if set != nil {
			out = *set
		}
		return append(append([]string{}, out...), extra...)
	}
	p := Policy{
		Images:        pick(f.Images, DefaultImages, add.Images),
		Mounts:        pick(f.Mounts, DefaultMounts, add.Mounts),
		DockerHosts:   pick(f.DockerHosts, DefaultDockerHosts, add.DockerHosts),
		Ports:         pick(f.Ports, DefaultPorts, add.Ports),
		Env:           pick(f.Env, DefaultEnv, add.Env),
		ExtraArgs:     pick(f.ExtraArgs, DefaultExtraArgs, add.ExtraArgs),
		SecretDirs:    pick(f.SecretDirs, DefaultSecretDirs, add.SecretDirs),
		SecretEnv:     pick(f.SecretEnv, DefaultSecretEnv, add.SecretEnv),
		HubEndpoints:  pick(f.HubEndpoints, DefaultHubEndpoints, add.HubEndpoints),
		RDMA:          RDMAPlanned,
		RequirePinned: f.Pinned || add.RequirePinned,
		File:          name,
	}
	if f.RDMA != nil {
		p.RDMA = *f.RDMA
	}
	if add.RDMA != "" {
		p.RDMA = add.RDMA
	}
	var problems []error
	p.HostReserve = hostmem.DefaultReserve
	for _, r := range []*string{f.HostReserve, &add.HostReserve} {
		if r == nil || *r == "" {
			continue
		}
		res, err := hostmem.ParseReserve(*r)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		p.HostReserve = res
	}
	p.MemoryFloor = hostmem.DefaultFloor
	for _, r := range []*string{f.MemoryFloor, &add.MemoryFloor} {
		if r == nil || *r == "" {
			continue
		}
		res, err := hostmem.ParseReserve(*r)
		if err != nil {
			problems = append(problems, fmt.Errorf("memory_floor: %w", err))
			continue
		}
		p.MemoryFloor = res
	}
	p.EngineRankMemory = hostmem.EngineRankBytes
	for _, r := range []*string{f.EngineRank, &add.EngineRankMemory} {
		if r == nil || *r == "" {
			continue
		}
		n, err := hostmem.ParseSize(*r)
		if err != nil || n <= 0 {
			problems = append(problems, fmt.Errorf("engine_rank_memory: %q is not a size above zero (2GiB, 512MiB)", *r))
			continue
		}
		p.EngineRankMemory = n
	}
	if p.RDMA != RDMAPlanned && p.RDMA != RDMANone {
		problems = append(problems, fmt.Errorf("%s: %q must be %q or %q", SettingRDMA, p.RDMA, RDMAPlanned, RDMANone))
	}
	for _, g := range p.Images {
		if _, err := path.Match(g, ""); err != nil || strings.TrimSpace(g) == "" {
			problems = append(problems, fmt.Errorf("%s: %q is not a glob pattern", SettingImages, g))
		}
	}
	for i, m := range p.Mounts {
		m, ro := strings.CutSuffix(m, ReadOnlySuffix)
		if !filepath.IsAbs(m) {
			problems = append(problems, fmt.Errorf("%s: %q is not an absolute path", SettingMounts, m))
			continue
		}
		p.Mounts[i] = filepath.Clean(m)
		if ro {
			p.ReadOnlyMounts = append(p.ReadOnlyMounts, p.Mounts[i])
		}
	}
	for i, d := range p.SecretDirs {
		if !filepath.IsAbs(d) || filepath.Clean(d) == "/" {
			problems = append(problems, fmt.Errorf("%s: %q is not an absolute directory other than /", SettingSecretDirs, d))
			continue
		}
		p.SecretDirs[i] = filepath.Clean(d)
	}
	for _, g := range p.Env {
		if _, err := path.Match(g, ""); err != nil || strings.TrimSpace(g) == "" {
			problems = append(problems, fmt.Errorf("%s: %q is not a glob pattern", SettingEnv, g))
		}
	}
	for i, a := range p.ExtraArgs {
		opts := spec.ExtraArgOptions([]string{strings.TrimSpace(a)})
		if len(opts) != 1 || strings.ContainsAny(a, "*?[") {
			problems = append(problems, fmt.Errorf("%s: %q is not a vLLM option such as --max-model-len", SettingExtraArgs, a))
			continue
		}
		p.ExtraArgs[i] = opts[0].Base // in vLLM's spelling, as the checked options are
	}
	for _, e := range p.SecretEnv {
		if e == "" || strings.ContainsAny(e, "*?[= ") {
			problems = append(problems, fmt.Errorf("%s: %q is not a variable name", SettingSecretEnv, e))
		}
	}
	for i, e := range p.HubEndpoints {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			problems = append(problems, fmt.Errorf("%s: %q is not a hub's base URL such as https://huggingface.co", SettingHubEndpoints, e))
			continue
		}
		p.HubEndpoints[i] = strings.TrimRight(e, "/")
	}
	entries := append([]trustedKeyEntry{}, f.TrustedKeys...)
	for _, o := range add.TrustedKeys {
		for _, one := range strings.Split(o, ",") {
			if one = strings.TrimSpace(one); one == "" {
				continue
			}
			id, key, ok := strings.Cut(one, "=")
			if !ok || key == "" {
				id, key = "", one // a bare key: base64 of 32 bytes ends in its one '='
			}
			entries = append(entries, trustedKeyEntry{ID: id, Ed25519: key})
		}
	}
	for i, nb := range []*string{f.NotBefore, &add.NotBefore} {
		if nb == nil || strings.TrimSpace(*nb) == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(*nb))
		if err != nil {
			where := SettingNotBefore
			if i == 1 {
				where = FlagNotBefore
			}
			problems = append(problems, fmt.Errorf("%s: %q is not an RFC 3339 time (e.g. 2026-05-01T00:00:00Z)", where, *nb))
			continue
		}
		if t.After(p.NotBefore) {
			p.NotBefore = t.UTC()
		}
	}
	if !p.NotBefore.IsZero() && len(entries) == 0 {
		problems = append(problems, fmt.Errorf("%s is set but %s is empty: it revokes signed specs, and without trusted keys no signature is checked", SettingNotBefore, SettingTrustedKeys))
	}
	for _, e := range entries {
		pub, err := intent.ParsePublicKey(e.Ed25519)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", SettingTrustedKeys, err))
			continue
		}
		if e.ID == "" {
			e.ID = intent.KeyID(pub)
		}
		p.TrustedKeys = append(p.TrustedKeys, TrustedKey{ID: e.ID, Key: pub})
	}
	for i, h := range p.DockerHosts {
		norm, err := normalizeDockerHost(h)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", SettingDockerHosts, err))
			continue
		}
		p.DockerHosts[i] = norm
	}
	for _, s := range p.Ports {
		r, err := parsePortRange(s)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", SettingPorts, err))
			continue
		}
		p.ports = append(p.ports, r)
	}
	if err := errors.Join(problems...); err != nil {
		return Policy{}, fmt.Errorf("node policy %s: %w", name, err)
	}
	return p, nil
}

// DeniedError is a check's refusal; its message names the setting that would allow it.
type DeniedError struct {
	What    string // "image", "host path", "docker_host", "port" or "ports"
	Value   string
	Setting string
	Allowed []string
	File    string
	Flag    string
	// Hint, when set, is the advice given instead of adding the value to the setting.
	Hint string
}

func (e *DeniedError) Error() string {
	allowed := strings.Join(e.Allowed, ", ")
	if allowed == "" {
		allowed = "none"
	}
	verb, it := "is", "it"
	if strings.HasSuffix(e.What, "s") {
		verb, it = "are", "them"
	}
	if e.Hint != "" {
		return fmt.Sprintf("%s %s %s not allowed by this node's policy (%s: %s, in %s or %s): %s",
			e.What, e.Value, verb, e.Setting, allowed, e.File, e.Flag, e.Hint)
	}
	return fmt.Sprintf("%s %s %s not allowed by this node's policy (%s: %s); add %s to %s in %s or %s",
		e.What, e.Value, verb, e.Setting, allowed, it, e.Setting, e.File, e.Flag)
}

// RDMAAllowed says the plan's RDMA devices may be mapped into containers; when not, why
// (naming the setting to change), for the data-plane proof's finding.
func (p Policy) RDMAAllowed() (bool, string) {
	if p.RDMA == RDMANone {
		return false, fmt.Sprintf("this node's policy maps no RDMA devices (%s: %s in %s, or %s %s); set it to %s to map the planned HCAs' /dev/infiniband/uverbsN",
			SettingRDMA, RDMANone, p.File, FlagRDMA, RDMANone, RDMAPlanned)
	}
	return true, ""
}

// CheckImage allows an image reference matching one of the image patterns, compared in
// the short form Docker shows ("vllm/vllm-openai:v0.17.0") and in full
// ("docker.io/vllm/vllm-openai:v0.17.0"); a reference without a tag is ":latest". A
// reference with a tag and a digest also matches as NAME:TAG (the agent checks that the
// tag names the digest's image). With require_pinned_images, a reference without a digest
// is refused (*PinError).
func (p Policy) CheckImage(ref string) error {
	if _, pinned := Digest(ref); p.RequirePinned && !pinned {
		return &PinError{Ref: ref, File: p.File}
	}
	for _, form := range imageForms(ref) {
		for _, g := range p.Images {
			if ok, _ := path.Match(g, form); ok {
				return nil
			}
		}
	}
	return &DeniedError{What: "image", Value: strconv.Quote(ref), Setting: SettingImages, Allowed: p.Images, File: p.File, Flag: FlagImage}
}

func imageForms(ref string) []string {
	forms := []string{ref}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return forms
	}
	if tagged, ok := named.(reference.NamedTagged); ok {
		if _, digested := named.(reference.Digested); digested {
			if t, err := reference.WithTag(reference.TrimNamed(named), tagged.Tag()); err == nil {
				forms = append(forms, reference.FamiliarString(t), t.String())
			}
		}
	}
	named = reference.TagNameOnly(named)
	return append(forms, reference.FamiliarString(named), named.String())
}

// Digest is the content digest a reference pins ("sha256:…" of NAME[:TAG]@sha256:…), if any.
func Digest(ref string) (string, bool) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", false
	}
	d, ok := named.(reference.Digested)
	if !ok {
		return "", false
	}
	return d.Digest().String(), true
}

// PinError is CheckImage's refusal of an image by tag where the policy requires content.
type PinError struct {
	Ref  string
	File string
}

func (e *PinError) Error() string {
	name := e.Ref
	if named, err := reference.ParseNormalizedNamed(e.Ref); err == nil {
		name = reference.FamiliarString(reference.TagNameOnly(named))
	}
	return fmt.Sprintf("image %q is not pinned by content, and this node's policy requires it (%s: true in %s, or %s); "+
		"pin it in the spec's image field as %s@sha256:DIGEST, the image ID (docker image inspect -f '{{.Id}}' %s) or its repository digest",
		e.Ref, SettingPinned, e.File, FlagPinned, name, name)
}

// CheckMount allows a host path equal to or under one of the mount prefixes. The path
// must be absolute; it is cleaned ("/models/../etc" is "/etc") but symlinks are not
// resolved here.
func (p Policy) CheckMount(hostPath string) error {
	denied := &DeniedError{What: "host path", Value: strconv.Quote(hostPath), Setting: SettingMounts, Allowed: p.Mounts, File: p.File, Flag: FlagMount}
	if !filepath.IsAbs(hostPath) {
		return denied
	}
	clean := filepath.Clean(hostPath)
	for _, prefix := range p.Mounts {
		if clean == prefix || prefix == "/" || strings.HasPrefix(clean, prefix+"/") {
			return nil
		}
	}
	return denied
}

// ReadOnlySuffix marks an allowed_mounts entry whose directories containers bind only
// read-only ("/models:ro").
const ReadOnlySuffix = ":ro"

// CheckBind allows a bind mount's source only where no container tpdeploy starts can swap
// it. The engine resolves a source path again when it starts the container, after the
// agent checked it; a container that can write a directory above the source (any
// container binding that directory read-write) can replace the source by a link to / in
// between. So:
//   - a read-write source (hf_cache) must be an allowed mount itself, not one given with
//     ":ro" (a directory below a mount would sit in a directory another cluster's
//     container may write);
//   - a read-only source (model.host_dir) must be an allowed mount, or lie below one given
//     with ":ro", which no container binds read-write;
//   - and no source may lie below an allowed mount containers may bind read-write.
//
// Together: the only directories containers write are allowed mounts without ":ro", and
// no bind source lies below one, so none can be swapped.
func (p Policy) CheckBind(hostPath string, readOnly bool) error {
	if err := p.CheckMount(hostPath); err != nil {
		return err
	}
	clean := filepath.Clean(hostPath)
	ro := func(m string) bool { return slices.Contains(p.ReadOnlyMounts, m) }
	var equal, belowRO bool
	for _, m := range p.Mounts {
		switch {
		case m == clean:
			equal = true
		case m == "/" || strings.HasPrefix(clean, m+"/"):
			if !ro(m) {
				return &DeniedError{What: "bind source", Value: strconv.Quote(hostPath) + fmt.Sprintf(" (below %s, which containers may mount read-write and so could replace it by a link before the engine mounts it)", m),
					Setting: SettingMounts, Allowed: p.mountList(), File: p.File, Flag: FlagMount, Hint: "use an allowed mount itself, or a directory below one given as DIR" + ReadOnlySuffix}
			}
			belowRO = true
		}
	}
	switch {
	case !readOnly && !equal:
		return &DeniedError{What: "read-write bind source", Value: strconv.Quote(hostPath) + " (not an allowed mount itself)",
			Setting: SettingMounts, Allowed: p.mountList(), File: p.File, Flag: FlagMount, Hint: "hf_cache must be one of allowed_mounts exactly (containers write it, so a directory below a mount could be swapped by another cluster's container)"}
	case !readOnly && ro(clean):
		return &DeniedError{What: "read-write bind source", Value: strconv.Quote(hostPath) + " (allowed only read-only: " + clean + ReadOnlySuffix + ")",
			Setting: SettingMounts, Allowed: p.mountList(), File: p.File, Flag: FlagMount, Hint: "hf_cache must be an allowed mount without " + ReadOnlySuffix}
	case readOnly && !equal && !belowRO:
		return &DeniedError{What: "read-only bind source", Value: strconv.Quote(hostPath), Setting: SettingMounts, Allowed: p.mountList(), File: p.File, Flag: FlagMount,
			Hint: "model.host_dir must be an allowed mount, or below one given as DIR" + ReadOnlySuffix}
	}
	return nil
}

// mountList is allowed_mounts as the operator writes it (":ro" included).
func (p Policy) mountList() []string {
	out := make([]string, len(p.Mounts))
	for i, m := range p.Mounts {
		out[i] = m
		if slices.Contains(p.ReadOnlyMounts, m) {
			out[i] += ReadOnlySuffix
		}
	}
	return out
}

// CheckEnv allows variable names matching allowed_env, never one that makes a program
// run code (spec.CodeExecEnv, whatever allowed_env says), and one that loads code or
// sends a credential (spec.CodeLoadingEnv) only when allowed_env names it exactly. The
// error names every refused variable and why.
func (p Policy) CheckEnv(names ...string) error {
	var bad []string
	for _, n := range names {
		if why, ok := spec.CodeExecEnv(n); ok {
			bad = append(bad, n+" ("+why+"; never allowed)")
			continue
		}
		if why, ok := spec.CodeLoadingEnv(n); ok {
			if !slices.Contains(p.Env, n) {
				bad = append(bad, fmt.Sprintf("%s (%s; allowed only where %s names %s exactly, never by a glob)", n, why, SettingEnv, n))
			}
			continue
		}
		if !p.envAllowed(n) {
			bad = append(bad, n)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	what := "environment variable"
	if len(bad) > 1 {
		what = "environment variables"
	}
	return &DeniedError{What: what, Value: strings.Join(bad, ", "), Setting: SettingEnv, Allowed: p.Env, File: p.File, Flag: FlagEnv}
}

// codeArgs are vLLM options that load code, or read or serve files, that the spec's
// author chooses, and why (docs/security.md cites vLLM's source for each): refused unless
// the node's allowed_extra_args names them.
var codeArgs = map[string]string{
	"--trust-remote-code":            "runs the Python code the model's repository holds",
	"--tool-parser-plugin":           "imports the Python file it names",
	"--reasoning-parser-plugin":      "imports the Python file it names",
	"--middleware":                   "imports the class or function it names into the API server",
	"--worker-extension-cls":         "imports the class it names into every worker",
	"--worker-cls":                   "imports the class it names as the worker",
	"--logits-processors":            "imports the classes it names",
	"--allowed-local-media-path":     "lets requests read any file below the directory it names",
	"--kv-transfer-config":           "its kv_connector_module_path is imported",
	"--chat-template":                "reads the file it names",
	"--load-format":                  "some formats unpickle the weights",
	"--distributed-executor-backend": "imports the class it names (and tpdeploy sets it)",
}

// CheckExtraArgs allows the options of model.extra_args (spelt as vLLM's parser reads
// them: spec.ExtraArgOptions) named in allowed_extra_args, exactly: an abbreviation
// argparse would expand is refused too. The error names every refused option, its place,
// and why for those that load code.
func (p Policy) CheckExtraArgs(args []string) error {
	var bad []string
	for _, a := range spec.ExtraArgOptions(args) {
		if slices.Contains(p.ExtraArgs, a.Base) {
			continue
		}
		one := fmt.Sprintf("model.extra_args[%d] %s", a.Index, a.Flag)
		if why, ok := codeArgs[a.Base]; ok {
			one += " (" + why + ")"
		}
		bad = append(bad, one)
	}
	if len(bad) == 0 {
		return nil
	}
	what := "vLLM option"
	if len(bad) > 1 {
		what = "vLLM options"
	}
	return &DeniedError{What: what, Value: strings.Join(bad, ", "), Setting: SettingExtraArgs, Allowed: p.ExtraArgs, File: p.File, Flag: FlagExtraArg}
}

func (p Policy) envAllowed(name string) bool {
	for _, g := range p.Env {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// CheckSecretFile allows a secret file's path (absolute, cleaned; the agent then opens it
// beneath the directory without following symlinks) under one of secret_dirs.
func (p Policy) CheckSecretFile(file string) error {
	if filepath.IsAbs(file) {
		clean := filepath.Clean(file)
		for _, d := range p.SecretDirs {
			if strings.HasPrefix(clean, d+"/") {
				return nil
			}
		}
	}
	return &DeniedError{What: "secret file", Value: strconv.Quote(file), Setting: SettingSecretDirs, Allowed: p.SecretDirs, File: p.File, Flag: FlagSecretDir}
}

// SecretDir is the secret directory a file allowed by CheckSecretFile is under.
func (p Policy) SecretDir(file string) (string, bool) {
	clean := filepath.Clean(file)
	for _, d := range p.SecretDirs {
		if strings.HasPrefix(clean, d+"/") {
			return d, true
		}
	}
	return "", false
}

// CheckHubEndpoint allows a hub download from endpoint (a base URL, HF_ENDPOINT's value)
// only when allowed_hub_endpoints names it exactly, trailing slashes aside: the token goes
// there and the weights come from there.
func (p Policy) CheckHubEndpoint(endpoint string) error {
	if slices.Contains(p.HubEndpoints, strings.TrimRight(endpoint, "/")) {
		return nil
	}
	return &DeniedError{What: "hub endpoint", Value: strconv.Quote(endpoint), Setting: SettingHubEndpoints, Allowed: p.HubEndpoints, File: p.File, Flag: FlagHubEndpoint}
}

// CheckSecretEnv allows a secret reference to one of the agent's variables named in
// secret_env, exactly (TEMPORAL_API_KEY and the like are never there by default).
func (p Policy) CheckSecretEnv(name string) error {
	for _, e := range p.SecretEnv {
		if e == name {
			return nil
		}
	}
	return &DeniedError{What: "secret variable", Value: strconv.Quote(name), Setting: SettingSecretEnv, Allowed: p.SecretEnv, File: p.File, Flag: FlagSecretEnv}
}

// MountRoot is the allowed mount a host path is under (the longest), for the agent to open
// the path beneath it.
func (p Policy) MountRoot(hostPath string) (string, bool) {
	if !filepath.IsAbs(hostPath) {
		return "", false
	}
	clean, best := filepath.Clean(hostPath), ""
	for _, prefix := range p.Mounts {
		if (clean == prefix || prefix == "/" || strings.HasPrefix(clean, prefix+"/")) && len(prefix) > len(best) {
			best = prefix
		}
	}
	return best, best != ""
}

// CheckDockerHost allows one of the listed engine addresses; empty means the local socket.
func (p Policy) CheckDockerHost(host string) error {
	norm, err := normalizeDockerHost(host)
	if err == nil {
		for _, h := range p.DockerHosts {
			if h == norm {
				return nil
			}
		}
	}
	return &DeniedError{What: "docker_host", Value: strconv.Quote(host), Setting: SettingDockerHosts, Allowed: p.DockerHosts, File: p.File, Flag: FlagDockerHost}
}

// CheckPorts allows ports inside the port ranges; the error lists every port outside.
func (p Policy) CheckPorts(ports ...int) error {
	var bad []string
	for _, port := range ports {
		if !p.portAllowed(port) {
			bad = append(bad, strconv.Itoa(port))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	what := "port"
	if len(bad) > 1 {
		what = "ports"
	}
	return &DeniedError{What: what, Value: strings.Join(bad, ", "), Setting: SettingPorts, Allowed: p.Ports, File: p.File, Flag: FlagPorts}
}

func (p Policy) portAllowed(port int) bool {
	for _, r := range p.ports {
		if port >= r.lo && port <= r.hi {
			return true
		}
	}
	return false
}

type portRange struct{ lo, hi int }

func parsePortRange(s string) (portRange, error) {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(s), "-")
	if !isRange {
		hi = lo
	}
	a, errA := strconv.Atoi(strings.TrimSpace(lo))
	b, errB := strconv.Atoi(strings.TrimSpace(hi))
	if errA != nil || errB != nil || a < 1 || b > 65535 || a > b {
		return portRange{}, fmt.Errorf("%q is not a port or range of ports within 1-65535 (e.g. 8000 or 1024-65535)", s)
	}
	return portRange{a, b}, nil
}

// normalizeDockerHost returns the address in one spelling: the local socket for "", and
// no trailing slash.
func normalizeDockerHost(h string) (string, error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return DefaultDockerHost, nil
	}
	u, err := url.Parse(h)
	if err != nil {
		return "", fmt.Errorf("%q is not an address: %v", h, err)
	}
	switch u.Scheme {
	case "unix":
		if u.Path == "" {
			return "", fmt.Errorf("%q has no socket path", h)
		}
		return "unix://" + path.Clean(u.Path), nil
	case "tcp", "ssh":
		if u.Host == "" {
			return "", fmt.Errorf("%q has no host", h)
		}
		return strings.TrimSuffix(h, "/"), nil
	}
	return "", fmt.Errorf("%q: scheme must be unix, tcp or ssh", h)
}

// Enforced says whether the policy trusts only signed specs (trusted_keys is set).
func (p Policy) Enforced() bool { return len(p.TrustedKeys) > 0 }

// TrustedKey returns the trusted key whose fingerprint is keyID.
func (p Policy) TrustedKey(keyID string) (TrustedKey, bool) {
	for _, k := range p.TrustedKeys {
		if intent.KeyID(k.Key) == keyID {
			return k, true
		}
	}
	return TrustedKey{}, false
}

// TrustedKeyNames are the trusted keys as "ID (FINGERPRINT)", for logs and refusals.
func (p Policy) TrustedKeyNames() []string {
	out := make([]string, len(p.TrustedKeys))
	for i, k := range p.TrustedKeys {
		out[i] = k.ID
		if id := intent.KeyID(k.Key); id != k.ID {
			out[i] += " (" + id + ")"
		}
	}
	return out
}
