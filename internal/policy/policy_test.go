package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

func TestDefaults(t *testing.T) {
	p := Default()
	tests := []struct {
		name  string
		check func() error
		want  string // "" allowed, else a part of the error
	}{
		{"stock vllm image", func() error { return p.CheckImage("vllm/vllm-openai:v0.17.0") }, ""},
		{"stock vllm image in full", func() error { return p.CheckImage("docker.io/vllm/vllm-openai:v0.17.0") }, ""},
		{"stock vllm image without tag", func() error { return p.CheckImage("vllm/vllm-openai") }, ""},
		{"stock vllm image by digest", func() error {
			return p.CheckImage("vllm/vllm-openai:v0.17.0@sha256:" + strings.Repeat("a", 64))
		}, ""},
		{"other image", func() error { return p.CheckImage("evil/x:1") },
			`image "evil/x:1" is not allowed by this node's policy (allowed_images: vllm/vllm-openai:*); add it to allowed_images in /etc/tpdeploy/policy.yaml or --allow-image`},
		{"lookalike image", func() error { return p.CheckImage("vllm/vllm-openai-evil:v1") }, "allowed_images"},
		{"lookalike registry", func() error { return p.CheckImage("evil.example/vllm/vllm-openai:v1") }, "allowed_images"},
		{"hf cache", func() error { return p.CheckMount("/root/.cache/huggingface") }, ""},
		{"under hf cache", func() error { return p.CheckMount("/root/.cache/huggingface/hub/models--x") }, ""},
		{"models dir", func() error { return p.CheckMount("/models/qwen") }, ""},
		{"escape by ..", func() error { return p.CheckMount("/models/../etc") },
			`host path "/models/../etc" is not allowed by this node's policy (allowed_mounts: /root/.cache/huggingface, /models); add it to allowed_mounts in /etc/tpdeploy/policy.yaml or --allow-mount`},
		{"prefix of a name is not a directory", func() error { return p.CheckMount("/models-evil") }, "allowed_mounts"},
		{"root", func() error { return p.CheckMount("/") }, "allowed_mounts"},
		{"docker socket", func() error { return p.CheckMount("/var/run/docker.sock") }, "allowed_mounts"},
		{"relative", func() error { return p.CheckMount("models") }, "allowed_mounts"},
		{"local engine", func() error { return p.CheckDockerHost("unix:///var/run/docker.sock") }, ""},
		{"local engine by default", func() error { return p.CheckDockerHost("") }, ""},
		{"remote engine", func() error { return p.CheckDockerHost("tcp://10.0.0.9:2375") },
			`docker_host "tcp://10.0.0.9:2375" is not allowed by this node's policy (allowed_docker_hosts: unix:///var/run/docker.sock); add it to allowed_docker_hosts in /etc/tpdeploy/policy.yaml or --allow-docker-host`},
		{"ssh engine", func() error { return p.CheckDockerHost("ssh://root@other") }, "allowed_docker_hosts"},
		{"another socket", func() error { return p.CheckDockerHost("unix:///tmp/docker.sock") }, "allowed_docker_hosts"},
		{"spec ports", func() error { return p.CheckPorts(8000, 6379, 8265) }, ""},
		{"edges", func() error { return p.CheckPorts(1024, 65535) }, ""},
		{"privileged ports", func() error { return p.CheckPorts(8000, 80, 443) },
			`ports 80, 443 are not allowed by this node's policy (allowed_ports: 1024-65535); add them to allowed_ports in /etc/tpdeploy/policy.yaml or --allow-ports`},
		{"one port", func() error { return p.CheckPorts(22) }, `port 22 is not allowed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && err == nil:
				t.Errorf("allowed; want %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Errorf("error %q\nlacks %q", err, tt.want)
			}
			var denied *DeniedError
			if err != nil && !errors.As(err, &denied) {
				t.Errorf("error is %T, want *DeniedError", err)
			}
		})
	}
}

func TestFileAndOverrides(t *testing.T) {
	yaml := `
allowed_images: ["registry.internal/vllm/*:*"]
allowed_mounts: [/data/models/]
allowed_docker_hosts: ["tcp://127.0.0.1:2376"]
allowed_ports: ["8000", "6379", "8265-8266"]
`
	tests := []struct {
		name    string
		add     Overrides
		allowed []func(Policy) error
		denied  []func(Policy) error
	}{
		{"file replaces the defaults", Overrides{},
			[]func(Policy) error{
				func(p Policy) error { return p.CheckImage("registry.internal/vllm/vllm-openai:v1") },
				func(p Policy) error { return p.CheckMount("/data/models/qwen") },
				func(p Policy) error { return p.CheckDockerHost("tcp://127.0.0.1:2376/") },
				func(p Policy) error { return p.CheckPorts(8000, 6379, 8266) },
			},
			[]func(Policy) error{
				func(p Policy) error { return p.CheckImage("vllm/vllm-openai:v1") },
				func(p Policy) error { return p.CheckImage("registry.internal/vllm/a/b:v1") },
				func(p Policy) error { return p.CheckMount("/root/.cache/huggingface") },
				func(p Policy) error { return p.CheckDockerHost("") },
				func(p Policy) error { return p.CheckPorts(8001) },
			}},
		{"flags add to the file", Overrides{Images: []string{"tpdeploy/sim:*"}, Mounts: []string{"/tmp/tpd"}, DockerHosts: []string{"unix:///var/run/docker.sock"}, Ports: []string{"9000-9100"}},
			[]func(Policy) error{
				func(p Policy) error { return p.CheckImage("tpdeploy/sim:dev") },
				func(p Policy) error { return p.CheckImage("registry.internal/vllm/vllm-openai:v1") },
				func(p Policy) error { return p.CheckMount("/tmp/tpd/hf") },
				func(p Policy) error { return p.CheckDockerHost("") },
				func(p Policy) error { return p.CheckPorts(9050, 8000) },
			},
			[]func(Policy) error{
				func(p Policy) error { return p.CheckMount("/tmp") },
				func(p Policy) error { return p.CheckPorts(9101) },
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(yaml), "/etc/tpdeploy/node.yaml", tt.add)
			if err != nil {
				t.Fatal(err)
			}
			for i, check := range tt.allowed {
				if err := check(p); err != nil {
					t.Errorf("allowed[%d] refused: %v", i, err)
				}
			}
			for i, check := range tt.denied {
				err := check(p)
				if err == nil {
					t.Errorf("denied[%d] allowed", i)
				} else if !strings.Contains(err.Error(), "/etc/tpdeploy/node.yaml") {
					t.Errorf("denied[%d] does not name the file: %v", i, err)
				}
			}
		})
	}
}

func TestEmptyListAllowsNothing(t *testing.T) {
	p, err := Parse([]byte("allowed_images: []\n"), "f.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckImage("vllm/vllm-openai:v1"); err == nil || !strings.Contains(err.Error(), "(allowed_images: none)") {
		t.Errorf("empty allowed_images: %v", err)
	}
	if err := p.CheckMount("/models/x"); err != nil {
		t.Errorf("mounts keep their default: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		add        Overrides
		want       []string
	}{
		{"unknown key", "allowed_image: [x]\n", Overrides{}, []string{"f.yaml", "allowed_image"}},
		{"bad glob", "allowed_images: ['[x']\n", Overrides{}, []string{`allowed_images: "[x" is not a glob`}},
		{"relative mount", "allowed_mounts: [models]\n", Overrides{}, []string{`allowed_mounts: "models" is not an absolute path`}},
		{"bad docker host", "allowed_docker_hosts: ['http://x']\n", Overrides{}, []string{"allowed_docker_hosts", "scheme must be unix, tcp or ssh"}},
		{"bad ports", "allowed_ports: ['70000', '9-8', 'x']\n", Overrides{}, []string{`"70000"`, `"9-8"`, `"x"`}},
		{"bad flag", "", Overrides{Ports: []string{"0"}}, []string{`allowed_ports: "0"`}},
		{"not yaml", "allowed_images: [", Overrides{}, []string{"f.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), "f.yaml", tt.add)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "absent.yaml"), Overrides{}); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("a missing file given explicitly must fail naming it: %v", err)
	}
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, []byte("allowed_ports: ['8000']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(file, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if p.File != file || p.CheckPorts(8000) != nil || p.CheckPorts(8001) == nil {
		t.Errorf("loaded %+v", p)
	}
	if _, err := os.Stat(DefaultFile); errors.Is(err, os.ErrNotExist) {
		p, err := Load("", Overrides{Images: []string{"tpdeploy/sim:*"}})
		if err != nil || p.CheckImage("tpdeploy/sim:dev") != nil || p.CheckImage("vllm/vllm-openai:v1") != nil {
			t.Errorf("no file at the default path: want the defaults plus the flags, got %+v, %v", p, err)
		}
	}
}

// #23 finding 1: env names, secret files and secret variables are checked against the
// node's own lists; code-executing variables are refused even when allowed_env matches.
func TestEnvAndSecretChecks(t *testing.T) {
	p, err := Parse([]byte("allowed_env: [\"NCCL_*\", \"PYTHON*\", \"LD_*\", \"SITE_*\"]\n"), "/etc/tpdeploy/policy.yaml", Overrides{Env: []string{"TPDEPLOY_SIM_*"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []error{
		p.CheckEnv("NCCL_DEBUG", "SITE_X", "TPDEPLOY_SIM_SHARDS", "PYTHONHASHSEED"),
		Default().CheckEnv("VLLM_HOST_IP", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "RAY_ADDRESS", "HF_HUB_OFFLINE"),
		Default().CheckSecretFile("/etc/tpdeploy/secrets/hf_token"),
		Default().CheckSecretEnv("HF_TOKEN"),
	} {
		if ok != nil {
			t.Errorf("refused: %v", ok)
		}
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{p.CheckEnv("LD_PRELOAD"), "LD_PRELOAD (the dynamic linker acts on it"},
		{p.CheckEnv("PYTHONWARNINGS", "BROWSER"), "environment variables PYTHONWARNINGS (the Python interpreter"},
		{Default().CheckEnv("FOO"), `environment variable FOO is not allowed by this node's policy (allowed_env: VLLM_HOST_IP`},
		{Default().CheckEnv("RAY_RUNTIME_ENV_HOOK"), "RAY_RUNTIME_ENV_HOOK (Ray imports and calls"},
		{Default().CheckSecretFile("/etc/shadow"), `secret file "/etc/shadow" is not allowed by this node's policy (secret_dirs: /etc/tpdeploy/secrets)`},
		{Default().CheckSecretFile("/etc/tpdeploy/secrets/../../shadow"), "secret_dirs"},
		{Default().CheckSecretFile("/etc/tpdeploy/secrets"), "secret_dirs"},
		{Default().CheckSecretEnv("TEMPORAL_API_KEY"), `secret variable "TEMPORAL_API_KEY" is not allowed by this node's policy (secret_env: HF_TOKEN`},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("error %v, want %q", tc.err, tc.want)
		}
	}
	if _, err := Parse([]byte("secret_dirs: [/]\n"), "p.yaml", Overrides{}); err == nil {
		t.Error("secret_dirs: [/] accepted")
	}
}

func TestRDMADevices(t *testing.T) {
	if ok, _ := Default().RDMAAllowed(); !ok {
		t.Fatal("the default maps the planned HCAs")
	}
	p, err := Parse([]byte("rdma_devices: none\n"), "/etc/tpdeploy/policy.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := p.RDMAAllowed(); ok || !strings.Contains(why, "rdma_devices: none in /etc/tpdeploy/policy.yaml") {
		t.Fatalf("none: %v %q", ok, why)
	}
	if p, _ := Parse([]byte("rdma_devices: none\n"), "x", Overrides{RDMA: RDMAPlanned}); p.RDMA != RDMAPlanned {
		t.Fatal("the flag replaces the file's")
	}
	if _, err := Parse([]byte("rdma_devices: all\n"), "x", Overrides{}); err == nil {
		t.Fatal("accepted rdma_devices: all")
	}
}

// trusted_keys: entries of the file and of --trust-key (ID=KEY or a bare key) are parsed,
// matched by fingerprint, and a bad key refuses the policy; none means not enforced.
func TestTrustedKeys(t *testing.T) {
	if Default().Enforced() {
		t.Fatal("the default policy requires signed specs")
	}
	a, _, _ := intent.GenerateKey()
	b, _, _ := intent.GenerateKey()
	yaml := "trusted_keys: [{id: alice, ed25519: \"" + intent.PublicKeyString(a) + "\"}]\n"
	p, err := Parse([]byte(yaml), "p.yaml", Overrides{TrustedKeys: []string{intent.PublicKeyString(b)}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Enforced() || len(p.TrustedKeys) != 2 {
		t.Fatalf("trusted keys %v", p.TrustedKeyNames())
	}
	if k, ok := p.TrustedKey(intent.KeyID(a)); !ok || k.ID != "alice" {
		t.Errorf("alice's key: %+v %v", k, ok)
	}
	if k, ok := p.TrustedKey(intent.KeyID(b)); !ok || k.ID != intent.KeyID(b) {
		t.Errorf("the flag's key: %+v %v", k, ok)
	}
	if p, err := Parse(nil, "p.yaml", Overrides{TrustedKeys: []string{"bob=" + intent.PublicKeyString(b)}}); err != nil || p.TrustedKeys[0].ID != "bob" {
		t.Errorf("ID=KEY: %+v %v", p.TrustedKeys, err)
	}
	for _, bad := range []string{"trusted_keys: [{id: x, ed25519: c2hvcnQ=}]\n", "trusted_keys: [{id: x}]\n"} {
		if _, err := Parse([]byte(bad), "p.yaml", Overrides{}); err == nil || !strings.Contains(err.Error(), "trusted_keys") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// intents_not_before: an RFC 3339 time, quoted or not; the flag's applies when later (a
// flag can only revoke more); a bad time, or one without trusted keys, is refused naming
// the setting.
func TestIntentsNotBefore(t *testing.T) {
	pub, _, _ := intent.GenerateKey()
	keys := "trusted_keys: [{id: alice, ed25519: \"" + intent.PublicKeyString(pub) + "\"}]\n"
	may := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for _, yaml := range []string{"intents_not_before: 2026-05-01T00:00:00Z\n", "intents_not_before: \"2026-05-01T02:00:00+02:00\"\n"} {
		p, err := Parse([]byte(keys+yaml), "p.yaml", Overrides{})
		if err != nil {
			t.Fatalf("%q: %v", yaml, err)
		}
		if !p.NotBefore.Equal(may) {
			t.Errorf("%q: not before %s, want %s", yaml, p.NotBefore, may)
		}
	}
	p, err := Parse([]byte(keys+"intents_not_before: 2026-05-01T00:00:00Z\n"), "p.yaml", Overrides{NotBefore: "2026-06-01T00:00:00Z"})
	if err != nil || !p.NotBefore.Equal(may.AddDate(0, 1, 0)) {
		t.Errorf("a later flag: %s, %v", p.NotBefore, err)
	}
	p, err = Parse([]byte(keys+"intents_not_before: 2026-05-01T00:00:00Z\n"), "p.yaml", Overrides{NotBefore: "2026-04-01T00:00:00Z"})
	if err != nil || !p.NotBefore.Equal(may) {
		t.Errorf("an earlier flag lowered the file's revocation: %s, %v", p.NotBefore, err)
	}
	if p, err := Parse([]byte(keys), "p.yaml", Overrides{}); err != nil || !p.NotBefore.IsZero() {
		t.Errorf("none: %s, %v", p.NotBefore, err)
	}
	for _, tc := range []struct {
		yaml, flag, want string
	}{
		{keys + "intents_not_before: yesterday\n", "", "intents_not_before: \"yesterday\" is not an RFC 3339 time"},
		{keys, "2026-05-01", "--intents-not-before: \"2026-05-01\" is not an RFC 3339 time"},
		{"intents_not_before: 2026-05-01T00:00:00Z\n", "", "intents_not_before is set but trusted_keys is empty"},
	} {
		if _, err := Parse([]byte(tc.yaml), "p.yaml", Overrides{NotBefore: tc.flag}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q / %q: %v, want %q", tc.yaml, tc.flag, err, tc.want)
		}
	}
}

// require_pinned_images: an image by tag is refused naming the setting and the spec's
// field, one by digest is allowed (as NAME:TAG too when it has a tag, which the agent
// checks names the same image); off, a tag is allowed as before.
func TestRequirePinnedImages(t *testing.T) {
	const id = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tag, pinned, bare := "vllm/vllm-openai:v0.22.1", "vllm/vllm-openai:v0.22.1@"+id, "vllm/vllm-openai@"+id
	off, err := Parse([]byte("allowed_images: [\"vllm/vllm-openai:v0.22.1\"]\n"), "p.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if off.RequirePinned || off.CheckImage(tag) != nil || off.CheckImage(pinned) != nil {
		t.Errorf("pinning off: %v %v %v", off.RequirePinned, off.CheckImage(tag), off.CheckImage(pinned))
	}
	if off.CheckImage(bare) == nil {
		t.Errorf("a digest without the tag matched the exact tag's pattern")
	}
	for _, p := range []func() (Policy, error){
		func() (Policy, error) {
			return Parse([]byte("require_pinned_images: true\nallowed_images: [\"vllm/vllm-openai:*\", \"vllm/vllm-openai@sha256:*\"]\n"), "p.yaml", Overrides{})
		},
		func() (Policy, error) {
			return Parse([]byte("allowed_images: [\"vllm/vllm-openai:*\", \"vllm/vllm-openai@sha256:*\"]\n"), "p.yaml", Overrides{RequirePinned: true})
		},
	} {
		on, err := p()
		if err != nil {
			t.Fatal(err)
		}
		var pe *PinError
		err = on.CheckImage(tag)
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "require_pinned_images: true in p.yaml, or --require-pinned-images") ||
			!strings.Contains(err.Error(), "the spec's image field as vllm/vllm-openai:v0.22.1@sha256:DIGEST") {
			t.Errorf("a tag with pinning required: %v", err)
		}
		for _, ok := range []string{pinned, bare, "docker.io/" + pinned} {
			if err := on.CheckImage(ok); err != nil {
				t.Errorf("%s: %v", ok, err)
			}
		}
		if err := on.CheckImage("evil/vllm:v1@" + id); err == nil || errors.As(err, &pe) {
			t.Errorf("a pinned image outside allowed_images: %v", err)
		}
	}
	if d, ok := Digest(pinned); !ok || d != id {
		t.Errorf("Digest(%s) = %s, %v", pinned, d, ok)
	}
	if _, ok := Digest(tag); ok {
		t.Errorf("Digest(%s) found one", tag)
	}
}

// #36 finding 2: the default allow-list names variables exactly, and a variable that loads
// code, runs a program or sends the HF token elsewhere is refused — by the defaults and by
// any glob — naming the variable and the setting, and allowed only by its exact name.
func TestCodeLoadingEnvOnlyByExactName(t *testing.T) {
	loading := []string{"CUDA_INJECTION64_PATH", "VLLM_NCCL_SO_PATH", "TRITON_CACHE_MANAGER", "TRITON_LIBCUDA_PATH",
		"TRITON_PTXAS_PATH", "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE", "UCX_GDB_COMMAND",
		"UCX_HANDLE_ERRORS", "OMP_TOOL_LIBRARIES", "VLLM_SERVER_DEV_MODE", "VLLM_ALLOW_INSECURE_SERIALIZATION",
		"HF_ENDPOINT", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}
	globs, err := Parse([]byte(`allowed_env: ["CUDA_*", "VLLM_*", "TRITON_*", "TORCHINDUCTOR_*", "UCX_*", "OMP_*", "HF_*", "NVIDIA_*"]`), "/etc/tpdeploy/policy.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range loading {
		for name, p := range map[string]Policy{"default": Default(), "globs": globs} {
			err := p.CheckEnv(n)
			if err == nil {
				t.Errorf("%s policy allows %s", name, n)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, n+" (") || !strings.Contains(msg, "allowed_env names "+n+" exactly") || !strings.Contains(msg, FlagEnv) {
				t.Errorf("%s policy: %s refused as %q, want the variable, why, and allowed_env / %s", name, n, msg, FlagEnv)
			}
		}
		exact, err := Parse(nil, "/etc/tpdeploy/policy.yaml", Overrides{Env: []string{n}})
		if err != nil {
			t.Fatal(err)
		}
		if err := exact.CheckEnv(n); err != nil {
			t.Errorf("allowed_env naming %s exactly still refuses it: %v", n, err)
		}
	}
	for _, glob := range DefaultEnv {
		if strings.ContainsAny(glob, "*?[") {
			t.Errorf("DefaultEnv holds the glob %q: the defaults name variables exactly", glob)
		}
	}
	if err := Default().CheckEnv("NCCL_DEBUG", "VLLM_LOGGING_LEVEL", "HF_HUB_OFFLINE", "CUDA_VISIBLE_DEVICES"); err != nil {
		t.Errorf("a setting is refused by default: %v", err)
	}
}

// #36 finding 2: extra_args has a policy: only options that tune the engine by default,
// read as vLLM's parser reads them (underscores, =value, -O3), so a code-loading option
// cannot be spelt past it.
func TestExtraArgsPolicy(t *testing.T) {
	d := Default()
	if err := d.CheckExtraArgs([]string{"--max-model-len", "32768", "--gpu_memory_utilization=0.85", "--enforce-eager", "--seed", "-1"}); err != nil {
		t.Errorf("engine settings refused: %v", err)
	}
	for _, args := range [][]string{
		{"--trust-remote-code"}, {"--trust_remote_code"}, {"--trust-remote"}, {"--tool-parser-plugin", "/models/x.py"},
		{"--tool_parser_plugin=/models/x.py"}, {"--allowed-local-media-path", "/"}, {"--middleware", "x.y"},
		{"--worker-extension-cls=x.Y"}, {"--config", "/models/args.yaml"}, {"--max-model-len", "8", "--", "--trust-remote-code"},
		{"--kv-transfer-config.kv_connector_module_path", "evil"}, {"-O3"},
	} {
		err := d.CheckExtraArgs(args)
		if err == nil {
			t.Errorf("%q allowed by default", args)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "model.extra_args[") || !strings.Contains(msg, SettingExtraArgs) || !strings.Contains(msg, FlagExtraArg) {
			t.Errorf("%q refused as %q: want the field, %s and %s", args, msg, SettingExtraArgs, FlagExtraArg)
		}
	}
	if err := d.CheckExtraArgs([]string{"--trust_remote_code"}); err == nil || !strings.Contains(err.Error(), "--trust-remote-code (runs the Python code") {
		t.Errorf("refusal %v does not say why --trust-remote-code is refused", err)
	}
	p, err := Parse([]byte("allowed_extra_args: [--max_model_len, --trust-remote-code]\n"), "/etc/tpdeploy/policy.yaml", Overrides{ExtraArgs: []string{"--tool-call-parser"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckExtraArgs([]string{"--max-model-len=8", "--trust_remote_code", "--tool-call-parser", "hermes"}); err != nil {
		t.Errorf("options the policy names refused: %v", err)
	}
	if err := p.CheckExtraArgs([]string{"--enforce-eager"}); err == nil {
		t.Error("a file's allowed_extra_args does not replace the defaults")
	}
	if _, err := Parse([]byte("allowed_extra_args: [\"--*\"]\n"), "p.yaml", Overrides{}); err == nil {
		t.Error("a glob accepted in allowed_extra_args")
	}
}

// The demo keeps working under the tightened defaults: the examples' specs (and the lab's
// agents, which add TPDEPLOY_SIM_*) pass the env and extra_args checks, the plan's own
// variables included.
func TestExamplesPassTheDefaults(t *testing.T) {
	lab, err := Parse(nil, DefaultFile, Overrides{Env: []string{"TPDEPLOY_SIM_*"}})
	if err != nil {
		t.Fatal(err)
	}
	planned := []string{"VLLM_HOST_IP", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "RAY_ADDRESS"}
	for file, p := range map[string]Policy{"../../examples/lab.yaml": lab, "../../examples/seed.yaml": Default()} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		c, err := spec.Parse(b)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", file, err)
		}
		if err := p.CheckExtraArgs(c.Model.ExtraArgs); err != nil {
			t.Errorf("%s: %v", file, err)
		}
		for _, n := range c.Nodes {
			names := append([]string{}, planned...)
			for k := range n.Env {
				names = append(names, k)
			}
			if err := p.CheckEnv(names...); err != nil {
				t.Errorf("%s node %s: %v", file, n.Name, err)
			}
		}
	}
}

// host_reserve: the default is max(8 GiB, 10 %), the file's replaces it, the flag the file's,
// and a bad value refuses the policy.
func TestHostReserve(t *testing.T) {
	if got := Default().HostReserve; got != hostmem.DefaultReserve {
		t.Fatalf("default: %+v", got)
	}
	p, err := Parse([]byte("host_reserve: \"4GiB,5%\"\n"), "x", Overrides{})
	if err != nil || p.HostReserve != (hostmem.Reserve{Bytes: 4 * hostmem.GiB, Percent: 5}) {
		t.Fatalf("file: %+v, %v", p.HostReserve, err)
	}
	if p, _ := Parse([]byte("host_reserve: 4GiB\n"), "x", Overrides{HostReserve: "256MiB"}); p.HostReserve != (hostmem.Reserve{Bytes: 256 * hostmem.MiB}) {
		t.Fatalf("flag: %+v", p.HostReserve)
	}
	if _, err := Parse([]byte("host_reserve: plenty\n"), "x", Overrides{}); err == nil || !strings.Contains(err.Error(), "host_reserve") {
		t.Fatalf("a bad host_reserve: %v", err)
	}
}

// memory_floor: the default is max(1 GiB, 2 %); the file's and the flag's replace it.
func TestMemoryFloor(t *testing.T) {
	if got := Default().MemoryFloor; got != hostmem.DefaultFloor {
		t.Fatalf("default: %+v", got)
	}
	if p, err := Parse([]byte("memory_floor: 512MiB\n"), "x", Overrides{}); err != nil || p.MemoryFloor != (hostmem.Reserve{Bytes: 512 * hostmem.MiB}) {
		t.Fatalf("file: %+v, %v", p.MemoryFloor, err)
	}
	if p, _ := Parse(nil, "x", Overrides{MemoryFloor: "5%"}); p.MemoryFloor != (hostmem.Reserve{Percent: 5}) {
		t.Fatalf("flag: %+v", p.MemoryFloor)
	}
	if _, err := Parse([]byte("memory_floor: low\n"), "x", Overrides{}); err == nil || !strings.Contains(err.Error(), "memory_floor") {
		t.Fatalf("a bad memory_floor: %v", err)
	}
}

// A hub download comes only from an endpoint allowed_hub_endpoints names (huggingface.co by
// default), trailing slashes aside; an entry that is not a base URL is refused.
func TestHubEndpoints(t *testing.T) {
	p := Default()
	if err := p.CheckHubEndpoint("https://huggingface.co/"); err != nil {
		t.Errorf("the default hub: %v", err)
	}
	if err := p.CheckHubEndpoint("https://hf-mirror.example"); err == nil || !strings.Contains(err.Error(), SettingHubEndpoints) {
		t.Errorf("a mirror the policy does not name: %v", err)
	}
	p, err := Parse([]byte("allowed_hub_endpoints: [\"https://hf-mirror.example/\"]\n"), "p.yaml", Overrides{HubEndpoints: []string{"http://10.0.0.9"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"https://hf-mirror.example", "http://10.0.0.9/"} {
		if err := p.CheckHubEndpoint(e); err != nil {
			t.Errorf("%s: %v", e, err)
		}
	}
	if err := p.CheckHubEndpoint("https://huggingface.co"); err == nil {
		t.Error("a file's list replaces the default")
	}
	if _, err := Parse([]byte("allowed_hub_endpoints: [\"hf-mirror.example\"]\n"), "p.yaml", Overrides{}); err == nil {
		t.Error("an endpoint without a scheme is accepted")
	}
}

// engine_rank_memory: the default is hostmem.EngineRankBytes; the file's and the flag's
// replace it; a size of zero or no size is refused.
func TestEngineRankMemory(t *testing.T) {
	if got := Default().EngineRankMemory; got != hostmem.EngineRankBytes {
		t.Fatalf("default: %d", got)
	}
	if p, err := Parse([]byte("engine_rank_memory: 512MiB\n"), "x", Overrides{}); err != nil || p.EngineRankMemory != 512*hostmem.MiB {
		t.Fatalf("file: %d, %v", p.EngineRankMemory, err)
	}
	if p, _ := Parse([]byte("engine_rank_memory: 512MiB\n"), "x", Overrides{EngineRankMemory: "192MiB"}); p.EngineRankMemory != 192*hostmem.MiB {
		t.Fatalf("flag: %d", p.EngineRankMemory)
	}
	for _, bad := range []string{"lots", "0"} {
		if _, err := Parse([]byte("engine_rank_memory: "+bad+"\n"), "x", Overrides{}); err == nil || !strings.Contains(err.Error(), "engine_rank_memory") {
			t.Fatalf("engine_rank_memory %s: %v", bad, err)
		}
	}
}
