package spec

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

const validYAML = `
name: lab
image: tpdeploy/sim:dev
model: {path: /models/tiny, served_name: tiny}
parallel: {tensor: 2}
nodes:
  - {name: node-a, role: head, gpus: 1}
  - {name: node-b, role: worker, gpus: 1}
`

func TestParseAppliesDefaults(t *testing.T) {
	c, err := Parse([]byte(validYAML))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.Executor != "auto" || c.Parallel.Pipeline != 1 || c.Ports.VLLM != 8000 || c.Ports.Ray != 6379 {
		t.Errorf("defaults not applied: executor=%q pipeline=%d ports=%+v", c.Executor, c.Parallel.Pipeline, c.Ports)
	}
	if c.Nodes[1].DockerHost != DefaultDockerHost {
		t.Errorf("docker_host default = %q", c.Nodes[1].DockerHost)
	}
	if c.Timeouts.NodeAgent.D() != 10*time.Second || c.Timeouts.Serving.D() != 30*time.Minute {
		t.Errorf("timeouts default = %+v", c.Timeouts)
	}
	if c.Head().Name != "node-a" || c.WorldSize() != 2 {
		t.Errorf("head=%q world=%d", c.Head().Name, c.WorldSize())
	}
}

func TestParseJSONEqualsYAML(t *testing.T) {
	y, err := Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	j, err := Parse([]byte(`{"name":"lab","image":"tpdeploy/sim:dev","model":{"path":"/models/tiny","served_name":"tiny"},
		"parallel":{"tensor":2},"nodes":[{"name":"node-a","role":"head","gpus":1},{"name":"node-b","role":"worker","gpus":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if y.Hash() != j.Hash() {
		t.Errorf("YAML and JSON forms of one spec hash differently: %s vs %s", y.Hash(), j.Hash())
	}
	j.Parallel.Tensor = 1
	if y.Hash() == j.Hash() {
		t.Error("a changed spec kept its hash")
	}
}

func TestExamplesParse(t *testing.T) {
	for _, f := range []string{"../../examples/seed.yaml", "../../examples/lab.yaml", "../../examples/lab-triangle.yaml", "../../examples/lab-ring4.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(data); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // every one must appear in the error
	}{
		{"empty", ``, []string{"spec is empty"}},
		{"unknown field", validYAML + "colour: blue\n", []string{`colour: unknown field`}},
		{"unknown nested field", strings.Replace(validYAML, "served_name: tiny", "served_name: tiny, tp: 2", 1), []string{`model.tp: unknown field (did you mean parallel.tensor?)`}},
		{"unknown field with a hint, among other problems", strings.Replace(validYAML, "served_name: tiny", "served_name: tiny, name: x", 1) + "colour: blue\nports: {vllm: 70000}\n",
			[]string{`model.name: unknown field (did you mean model.path or model.served_name?)`, "colour: unknown field", "ports.vllm: 70000 is not a TCP port"}},
		{"unknown field in a node", strings.Replace(validYAML, "role: worker, gpus: 1", "role: worker, gpu: 1", 1),
			[]string{`nodes[1].gpu: unknown field (did you mean nodes[1].gpus?)`}},
		{"duplicate key", validYAML + "name: other\n", []string{`"name"`}},
		{"not yaml", "name: [unclosed", []string{"parse spec"}},
		{"bad duration", validYAML + "timeouts: {probe: 5}\n", []string{"duration must be a string"}},
		{"bad duration text", validYAML + "timeouts: {probe: soon}\n", []string{`duration "soon"`}},
		{"wrong type", strings.Replace(validYAML, "tensor: 2", "tensor: two", 1), []string{"parallel.tensor: want a number, got string"}},
		{"not a mapping", "- a\n- b\n", []string{"a spec is a mapping of fields"}},
		{"bad cluster name", strings.Replace(validYAML, "name: lab", `name: "bad cluster!"`, 1),
			[]string{`name: "bad cluster!" must match [a-z0-9-]+`}},
		{"duplicate node", strings.Replace(validYAML, "name: node-b", "name: node-a", 1),
			[]string{`nodes[1].name: duplicate "node-a"`}},
		{"too few gpus", strings.Replace(validYAML, "tensor: 2", "tensor: 8", 1),
			[]string{"parallel: tensor 8 x pipeline 1 = 8 GPUs, nodes provide 2"}},
		{"no head", strings.Replace(validYAML, "role: head", "role: worker", 1), []string{"nodes: no node has role head"}},
		{"two heads", strings.Replace(validYAML, "role: worker", "role: head", 1), []string{"nodes: 2 nodes have role head"}},
		{"bad role", strings.Replace(validYAML, "role: worker", "role: boss", 1), []string{`nodes[1].role: "boss" must be head or worker`}},
		{"no nodes", "name: lab\nimage: x\nmodel: {path: m}\nparallel: {tensor: 1}\n", []string{"nodes: at least one node"}},
		{"missing model and image", "name: lab\nparallel: {tensor: 1}\nnodes: [{name: a, role: head}]\n",
			[]string{"image: required", "model.path: required"}},
		{"host dir relative", strings.Replace(validYAML, "served_name: tiny", "served_name: tiny, host_dir: models/tiny", 1),
			[]string{`model.host_dir: "models/tiny" must be a clean absolute path on the nodes`}},
		{"host dir with an HF name", strings.Replace(validYAML, "path: /models/tiny, served_name: tiny", "path: Qwen/Qwen3-8B, host_dir: /data/qwen", 1),
			[]string{`model.host_dir: is mounted at model.path, which must then be an absolute path in the container`}},
		{"revision of a directory", strings.Replace(validYAML, "served_name: tiny", "served_name: tiny, revision: main", 1),
			[]string{"model.revision: only for a Hugging Face name"}},
		{"bad revision", strings.Replace(validYAML, "path: /models/tiny, served_name: tiny", "path: Qwen/Qwen3-8B, revision: '../x'", 1),
			[]string{`model.revision: "../x" is not a branch, tag or commit`}},
		{"bad sync", strings.Replace(validYAML, "served_name: tiny", "served_name: tiny, host_dir: /data/tiny, sync: rsync", 1),
			[]string{`model.sync: "rsync" must be empty or "from-head"`}},
		{"sync of an image path", strings.Replace(validYAML, "served_name: tiny", "served_name: tiny, sync: from-head", 1),
			[]string{"model.sync: from-head copies model.host_dir or a Hugging Face name's snapshot"}},
		{"hub source of a directory", strings.Replace(validYAML, "served_name: tiny", "served_name: tiny, source: hub", 1),
			[]string{"model.source: hub downloads a Hugging Face name"}},
		{"bad source", strings.Replace(validYAML, "path: /models/tiny, served_name: tiny", "path: Qwen/Qwen3-8B, source: s3", 1),
			[]string{`model.source: "s3" must be empty or "hub"`}},
		{"native executor's name", validYAML + "executor: native\n", []string{`executor: "native": vLLM names its native multi-node mode "mp"`}},
		{"mp uneven", strings.Replace(validYAML, "tensor: 2", "tensor: 3", 1) + "executor: mp\n", []string{"executor: mp runs tensor x pipeline = 3 ranks"}},
		{"mp master port clash", validYAML + "executor: mp\nports: {master: 8000}\n", []string{"ports.master: 8000 is also ports.vllm"}},
		{"mp flags are tpdeploy's", strings.Replace(validYAML, "served_name: tiny", "served_name: tiny, extra_args: [--master-addr=10.0.0.1]", 1),
			[]string{"model.extra_args[0]: --master-addr is set by tpdeploy from the plan"}},
		{"managed extra arg", strings.Replace(validYAML, "served_name: tiny", "served_name: tiny, extra_args: [--tensor-parallel-size=4]", 1),
			[]string{"model.extra_args[0]: --tensor-parallel-size is set by tpdeploy from parallel.tensor"}},
		{"planned env", strings.Replace(validYAML, "gpus: 1}\n  - {name: node-b", "gpus: 1, env: {NCCL_SOCKET_IFNAME: eth0}}\n  - {name: node-b", 1),
			[]string{"nodes[0].env.NCCL_SOCKET_IFNAME: is set per node"}},
		{"secret value in env", strings.Replace(validYAML, "gpus: 1}\n  - {name: node-b", "gpus: 1, env: {HF_TOKEN: hf_abc}}\n  - {name: node-b", 1),
			[]string{"nodes[0].env.HF_TOKEN: secret values do not belong in the spec"}},
		{"secret ref both", validYAML + "secrets: {hf_token: {env: HF_TOKEN, file: /x}}\n", []string{"secrets.hf_token: set only one"}},
		{"secret ref token pasted", validYAML + "secrets: {hf_token: {env: hf_ABC-123}}\n", []string{"secrets.hf_token.env"}},
		{"api key ref both", validYAML + "secrets: {api_key: {env: VLLM_API_KEY, file: /x}}\n", []string{"secrets.api_key: set only one"}},
		{"api key pasted", validYAML + "secrets: {api_key: {env: sk-abc-123}}\n", []string{"secrets.api_key.env"}},
		{"api key file relative", validYAML + "secrets: {api_key: {file: key}}\n", []string{"secrets.api_key.file"}},
		{"ray token pasted", validYAML + "secrets: {ray_token: {env: 0123456789abcdef-0123}}\n", []string{"secrets.ray_token.env"}},
		{"ray token ref both", validYAML + "secrets: {ray_token: {env: RAY_TOKEN, file: /x}}\n", []string{"secrets.ray_token: set only one"}},
		{"ray token file relative", validYAML + "secrets: {ray_token: {file: token}}\n", []string{"secrets.ray_token.file"}},
		{"bad cidr", validYAML + "network: {prefer_cidrs: [192.168.200.0/33]}\n", []string{"network.prefer_cidrs[0]"}},
		{"prefer and exclude", validYAML + "network: {prefer_cidrs: [10.0.0.0/8], exclude_cidrs: [10.0.0.0/8]}\n", []string{"is also excluded"}},
		{"bad glob", validYAML + "network: {exclude_interfaces: ['[eth']}\n", []string{"network.exclude_interfaces[0]"}},
		{"port clash", validYAML + "ports: {vllm: 6379}\n", []string{"ports.ray: 6379 is also ports.vllm"}},
		{"port range", validYAML + "ports: {vllm: 70000}\n", []string{"ports.vllm: 70000 is not a TCP port"}},
		{"docker host scheme", strings.Replace(validYAML, "role: worker, gpus: 1", "role: worker, gpus: 1, docker_host: 'http://x'", 1),
			[]string{"nodes[1].docker_host"}},
		{"negative timeout", validYAML + "timeouts: {probe: -5s}\n", []string{"timeouts.probe"}},
		{"bad image", strings.Replace(validYAML, "image: tpdeploy/sim:dev", "image: 'Not An Image'", 1), []string{"image: \"Not An Image\""}},
		{"several at once", "name: Bad\nimage: x\nmodel: {path: m}\nparallel: {tensor: 0}\nnodes: [{name: a, role: head}, {name: a, role: head}]\n",
			[]string{"name:", "parallel.tensor", `nodes[1].name: duplicate "a"`, "2 nodes have role head"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tt.yaml)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestValidationErrorIsTyped(t *testing.T) {
	_, err := Parse([]byte(strings.Replace(validYAML, "name: lab", "name: LAB", 1)))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Field != "name" {
		t.Fatalf("want one ValidationError problem on name, got %#v", err)
	}
}

func TestGPUCheckWaitsForDetection(t *testing.T) {
	// A node without a declared GPU count is detected at probe time, so the spec alone
	// cannot prove the cluster too small.
	y := strings.Replace(strings.Replace(validYAML, "tensor: 2", "tensor: 16", 1), "role: worker, gpus: 1", "role: worker", 1)
	if _, err := Parse([]byte(y)); err != nil {
		t.Fatalf("undeclared GPU count rejected: %v", err)
	}
}

// TestSecretsRefused: the spec is recorded in Temporal's history, so secret-looking env
// values and vLLM's secret flags are refused with a pointer to secrets.
func TestSecretsRefused(t *testing.T) {
	withEnv := func(env string) string {
		return strings.Replace(validYAML, "gpus: 1}\n  - {name: node-b", "gpus: 1, env: {"+env+"}}\n  - {name: node-b", 1)
	}
	withArgs := func(args string) string {
		return strings.Replace(validYAML, "served_name: tiny", "served_name: tiny, extra_args: "+args, 1)
	}
	tests := []struct {
		name string
		yaml string
		want string // "" accepted
	}{
		{"HF_TOKEN", withEnv("HF_TOKEN: hf_abc"), "nodes[0].env.HF_TOKEN: secret values do not belong in the spec; use secrets.hf_token with env or file"},
		{"HUGGING_FACE_HUB_TOKEN", withEnv("HUGGING_FACE_HUB_TOKEN: hf_abc"), "nodes[0].env.HUGGING_FACE_HUB_TOKEN: secret values do not belong in the spec; use secrets.hf_token"},
		{"*_TOKEN", withEnv("WANDB_TOKEN: abc"), "nodes[0].env.WANDB_TOKEN: looks like a secret: secret values do not belong in the spec, which Temporal's history records; reference them under secrets"},
		{"*_KEY", withEnv("OPENAI_API_KEY: sk-1"), "nodes[0].env.OPENAI_API_KEY: looks like a secret"},
		{"VLLM_API_KEY", withEnv("VLLM_API_KEY: sk-1"), "nodes[0].env.VLLM_API_KEY: secret values do not belong in the spec; use secrets.api_key with env or file"},
		{"RAY_AUTH_TOKEN", withEnv("RAY_AUTH_TOKEN: abc"), "nodes[0].env.RAY_AUTH_TOKEN: Ray's token authentication is set from secrets.ray_token"},
		{"RAY_AUTH_MODE", withEnv("RAY_AUTH_MODE: token"), "nodes[0].env.RAY_AUTH_MODE: Ray's token authentication is set from secrets.ray_token"},
		{"*_SECRET", withEnv("AWS_SECRET: s"), "nodes[0].env.AWS_SECRET: looks like a secret"},
		{"*PASSWORD*", withEnv("DB_PASSWORD_FILE: /x"), "nodes[0].env.DB_PASSWORD_FILE: looks like a secret"},
		{"lower case", withEnv("my_token: x"), "nodes[0].env.my_token: looks like a secret"},
		{"ordinary env", withEnv("NCCL_DEBUG: WARN"), ""},
		{"KEY inside a name", withEnv("KEYBOARD_LAYOUT: us, TOKENIZERS_PARALLELISM: 'false'"), ""},
		{"--hf-token value", withArgs("[--hf-token, hf_abc]"), "model.extra_args[0]: --hf-token: secret values do not belong in the spec, which Temporal's history records; use secrets.hf_token"},
		{"--hf-token=value", withArgs("[--max-model-len, '4096', --hf-token=hf_abc]"), "model.extra_args[2]: --hf-token: secret values"},
		{"--hf_token", withArgs("[--hf_token=hf_abc]"), "model.extra_args[0]: --hf_token: secret values"},
		{"--api-key value", withArgs("[--api-key, sk-1]"), "model.extra_args[0]: --api-key: secret values do not belong in the spec, which Temporal's history records; use secrets.api_key"},
		{"--api-key=value", withArgs("['--api-key=sk-1']"), "model.extra_args[0]: --api-key: secret values"},
		{"ordinary args", withArgs("[--max-model-len, '32768', --trust-remote-code]"), ""},
		{"a value that mentions a flag", withArgs("[--served-model-name-suffix, --api-keys-doc]"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("accepted:\n%s", tt.yaml)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Errorf("error lacks %q:\n%v", tt.want, err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(validYAML))
	f.Add([]byte(`{"name":"x","nodes":[{"name":"a","role":"head","gpus":-1}],"timeouts":{"probe":"1s"}}`))
	f.Add([]byte("name: [\n"))
	f.Add([]byte("parallel: {tensor: 9223372036854775807, pipeline: 9223372036854775807}\nnodes: [{name: a, role: head, gpus: 1}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever is accepted must be complete enough to deploy.
		if c.Head().Name == "" || c.Parallel.Tensor < 1 || c.Image == "" || c.Hash() == "" {
			t.Fatalf("accepted an incomplete spec: %+v", c)
		}
	})
}

// network.subnet and nodes[].address pin the plan (and are signed with the spec): they
// parse, default to nothing, leave an unpinned spec's hash alone, and bad ones are refused
// at their field.
func TestPinnedAddresses(t *testing.T) {
	pinned := strings.Replace(strings.Replace(validYAML, "role: head, gpus: 1", "role: head, gpus: 1, address: 192.168.200.11", 1),
		"role: worker, gpus: 1", "role: worker, gpus: 1, address: 192.168.200.12", 1) + "network: {subnet: 192.168.200.0/24}\n"
	c, err := Parse([]byte(pinned))
	if err != nil {
		t.Fatal(err)
	}
	if c.Network.PinnedSubnet().String() != "192.168.200.0/24" || c.Nodes[0].PinnedAddress().String() != "192.168.200.11" {
		t.Errorf("pins: %s %s", c.Network.PinnedSubnet(), c.Nodes[0].PinnedAddress())
	}
	plain, err := Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Network.PinnedSubnet().IsValid() || plain.Nodes[0].PinnedAddress().IsValid() || strings.Contains(string(plain.Canonical()), "address") || strings.Contains(string(plain.Canonical()), "subnet") {
		t.Errorf("an unpinned spec: %s", plain.Canonical())
	}
	for _, tc := range []struct{ yaml, want string }{
		{validYAML + "network: {subnet: 192.168.200.1/24}\n", `network.subnet: "192.168.200.1/24" is not a subnet: write 192.168.200.0/24`},
		{validYAML + "network: {subnet: fd00::/64}\n", `network.subnet: "fd00::/64" is not an IPv4 CIDR`},
		{validYAML + "network: {subnet: 10.0.0.0/24, exclude_cidrs: [10.0.0.0/16]}\n", "network.subnet: 10.0.0.0/24 overlaps network.exclude_cidrs 10.0.0.0/16"},
		{strings.Replace(pinned, "address: 192.168.200.12", "address: 10.0.0.12", 1), "nodes[1].address: 10.0.0.12 is not in network.subnet 192.168.200.0/24"},
		{strings.Replace(pinned, "address: 192.168.200.12", "address: 192.168.200.11", 1), "nodes[1].address: 192.168.200.11 is also node-a's"},
		{strings.Replace(pinned, "address: 192.168.200.12", "address: spark-2", 1), `nodes[1].address: "spark-2" is not an IPv4 address`},
		{strings.Replace(validYAML, "role: worker, gpus: 1", "role: worker, gpus: 1, address: 127.0.0.1", 1), "nodes[1].address: 127.0.0.1 is not an address other nodes can reach"},
	} {
		if _, err := Parse([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
}

// #36 finding 2: a flag tpdeploy sets cannot be given again in extra_args in any spelling
// vLLM's parser reads as it: underscores (--master_addr), =value, an abbreviation argparse
// expands (--master-a), or --model/--config, which bring in what tpdeploy cannot check.
func TestManagedArgsInVLLMSpelling(t *testing.T) {
	withArgs := func(args string) string {
		return strings.Replace(validYAML, "served_name: tiny", "served_name: tiny, extra_args: "+args, 1)
	}
	for _, tc := range []struct{ args, want string }{
		{"[--master_addr, 10.0.0.9]", "model.extra_args[0]: --master-addr is set by tpdeploy from the plan"},
		{"[--master_port=1]", "model.extra_args[0]: --master-port is set by tpdeploy from ports.master"},
		{"[--max-model-len, '8', --tensor_parallel_size=4]", "model.extra_args[2]: --tensor-parallel-size is set by tpdeploy from parallel.tensor"},
		{"[--master-a, 10.0.0.9]", "model.extra_args[0]: --master-a is an abbreviation of --master-addr"},
		{"[--served_model_name=x]", "model.extra_args[0]: --served-model-name is set by tpdeploy from model.served_name"},
		{"[--model, /etc]", "model.extra_args[0]: --model: vLLM takes it as the model"},
		{"[--config, /models/a.yaml]", "model.extra_args[0]: --config: vLLM reads further arguments"},
		{"[--max-model-len, '-1']", ""},
	} {
		c, err := Parse([]byte(withArgs(tc.args)))
		if err == nil {
			err = c.Validate()
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s refused: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

// The plan may restrict NCCL to its ring, or turn its IB plugin off, where the node's env
// says nothing; no other value or variable passes as the plan's own.
func TestPlanDefaultEnvIsOnlyTheRestrictions(t *testing.T) {
	if !PlanDefaultEnv("NCCL_ALGO", "Ring") || !PlanDefaultEnv("NCCL_IB_DISABLE", "1") || !PlanDefaultEnv("NCCL_IB_SUBNET_AWARE_ROUTING", "1") ||
		!PlanDefaultEnv("NCCL_IB_SUBNET_PREFIX_LEN", "24") || !PlanDefaultEnv("NCCL_IB_SUBNET_PREFIX_LEN", "30") {
		t.Error("NCCL_ALGO=Ring, NCCL_IB_DISABLE=1 and NCCL's subnet-aware routing are the plan's")
	}
	for _, kv := range [][2]string{{"NCCL_IB_SUBNET_AWARE_ROUTING", "0"}, {"NCCL_IB_SUBNET_PREFIX_LEN", "0"}, {"NCCL_IB_SUBNET_PREFIX_LEN", "33"}, {"NCCL_IB_SUBNET_PREFIX_LEN", "024"}, {"NCCL_ALGO", "Tree"}, {"NCCL_ALGO", "ring,tree"}, {"NCCL_COMM_ID", "Ring"}, {"NCCL_RUNTIME_CONNECT", "0"}, {"NCCL_IB_DISABLE", "0"}, {"NCCL_NET", "Socket"}} {
		if PlanDefaultEnv(kv[0], kv[1]) {
			t.Errorf("%s=%s passes as the plan's", kv[0], kv[1])
		}
	}
}

// A router names its node and a port none of the cluster's own ports is.
func TestRouterValidation(t *testing.T) {
	c := Cluster{Name: "r", Image: "tpdeploy/sim:x", Model: Model{Path: "/models/m"}, Parallel: Parallel{Tensor: 1},
		Nodes: []Node{{Name: "a", Role: RoleHead}}}
	for _, tt := range []struct {
		r    Router
		want string
	}{
		{Router{Node: "b"}, ""},
		{Router{Node: "a", Port: 8000}, "router.port: 8000 is also ports.vllm"},
		{Router{}, "router.node: required"},
		{Router{Node: "a", Port: 70000}, "router.port: 70000 is not a TCP port"},
	} {
		c.Router = &tt.r
		err := c.WithDefaults().Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: %v, want %q", tt.r, err, tt.want)
		}
	}
}

// nodes[].gpus is a count or a list of GPU indices: the list is kept, counts as its
// length, round-trips through the canonical JSON, and a spec written with a count hashes
// as it did before indices existed.
func TestGPUsAreACountOrIndices(t *testing.T) {
	c, err := Parse([]byte(strings.Replace(validYAML, "role: worker, gpus: 1", "role: worker, gpus: [0, 2]", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Nodes[1]; n.GPUs != 2 || len(n.GPUIndices) != 2 || n.GPUIndices[1] != 2 || c.Nodes[0].GPUIndices != nil {
		t.Fatalf("nodes: %+v", c.Nodes)
	}
	if !strings.Contains(string(c.Canonical()), `"name":"node-b","role":"worker","docker_host":"unix:///var/run/docker.sock","gpus":[0,2],"interfaces"`) &&
		!strings.Contains(string(c.Canonical()), `"name":"node-b","role":"worker","docker_host":"unix:///var/run/docker.sock","gpus":[0,2]}`) {
		t.Errorf("canonical: %s", c.Canonical())
	}
	back, err := Parse(c.Canonical())
	if err != nil || back.Hash() != c.Hash() {
		t.Errorf("round trip: %v, hash %s vs %s", err, back.Hash(), c.Hash())
	}
	counted, _ := Parse([]byte(validYAML))
	if !strings.Contains(string(counted.Canonical()), `"docker_host":"unix:///var/run/docker.sock","gpus":1}`) {
		t.Errorf("a count's canonical JSON changed: %s", counted.Canonical())
	}
	// The hash of the package's reference spec, as every release before indices computed it.
	if h := counted.Hash(); h != countedHash {
		t.Errorf("a spec with a count hashes %s, was %s", h, countedHash)
	}
	for _, tt := range []struct{ gpus, want string }{
		{"[]", "nodes[1].gpus: [] lists no GPU"},
		{"[0, 0]", "nodes[1].gpus[1]: GPU 0 is listed twice"},
		{"[-1]", "nodes[1].gpus[0]: -1 is not a GPU index"},
		{`"two"`, "gpus: want a count or a list of GPU indices"},
	} {
		_, err := Parse([]byte(strings.Replace(validYAML, "role: worker, gpus: 1", "role: worker, gpus: "+tt.gpus, 1)))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("gpus: %s: %v, want %q", tt.gpus, err, tt.want)
		}
	}
}

// countedHash is validYAML's hash before nodes[].gpus took a list.
const countedHash = "db8d84ce2f09e178"
