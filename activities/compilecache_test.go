package activities

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

func cacheCluster() spec.Cluster {
	return spec.Cluster{Name: "c", Image: "vllm/vllm-openai:v0.32.0", Model: spec.Model{Path: "/models/m", Revision: "abc", ServedName: "m",
		ExtraArgs: []string{"--dtype", "bfloat16", "--gpu-memory-utilization", "0.8"}}, Parallel: spec.Parallel{Tensor: 2, Pipeline: 1},
		Nodes: []spec.Node{{Name: "n1", Role: spec.RoleHead}}}.WithDefaults()
}

// The key follows the image, the model and revision, TP and PP; not the name, the served
// name, the ports, nor any extra arg (vLLM's own hash below it covers the args that change
// the graph, and an args-only change must keep the engine containers).
func TestCompileCacheKeyFollowsCompilation(t *testing.T) {
	base := cacheCluster()
	key := CompileCacheKey(base)
	if len(key) != 32 || strings.Trim(key, "0123456789abcdef") != "" {
		t.Fatalf("key %q: want 32 hex characters", key)
	}
	same := map[string]func(*spec.Cluster){
		"name":        func(c *spec.Cluster) { c.Name = "other" },
		"served name": func(c *spec.Cluster) { c.Model.ServedName = "x" },
		"port":        func(c *spec.Cluster) { c.Ports.VLLM = 9000 },
		"--gpu-memory-utilization": func(c *spec.Cluster) {
			c.Model.ExtraArgs = []string{"--dtype", "bfloat16", "--gpu-memory-utilization", "0.5"}
		},
		"--dtype":         func(c *spec.Cluster) { c.Model.ExtraArgs = []string{"--dtype", "float16"} },
		"--max-model-len": func(c *spec.Cluster) { c.Model.ExtraArgs = []string{"--max-model-len", "4096"} },
		"-O3":             func(c *spec.Cluster) { c.Model.ExtraArgs = []string{"-O3"} },
	}
	other := map[string]func(*spec.Cluster){
		"image":    func(c *spec.Cluster) { c.Image = "vllm/vllm-openai:v0.33.0" },
		"model":    func(c *spec.Cluster) { c.Model.Path = "/models/n" },
		"revision": func(c *spec.Cluster) { c.Model.Revision = "def" },
		"TP":       func(c *spec.Cluster) { c.Parallel.Tensor = 1 },
		"PP":       func(c *spec.Cluster) { c.Parallel.Pipeline = 2 },
	}
	for name, f := range same {
		c := cacheCluster()
		f(&c)
		if CompileCacheKey(c) != key {
			t.Errorf("%s changed the key", name)
		}
	}
	for name, f := range other {
		c := cacheCluster()
		f(&c)
		if CompileCacheKey(c) == key {
			t.Errorf("%s kept the key", name)
		}
	}
}

// Every container a rank of vLLM runs in mounts its key's directory at vLLM's cache root,
// under the node's (the lab's: its host root's) CompileCacheDir, with VLLM_CACHE_ROOT
// forced there over any a spec gives.
func TestEngineContainersMountTheCompileCache(t *testing.T) {
	c := cacheCluster()
	c.Nodes[0].Env = map[string]string{"VLLM_CACHE_ROOT": "/tmp/elsewhere"}
	o := ContainerOptions{HostRoot: "/lab/n1", CompileCache: CompileCacheDir}
	plan := netplan.Plan{Nodes: []netplan.NodePlan{{Name: "n1", Address: netip.MustParseAddr("10.0.0.1")}}}
	d := contract.Deployment{Cluster: c.Name, ID: "d"}
	head := rayHeadSpec(contract.StartRayRequest{Node: "n1", Deployment: d, Spec: c, Plan: plan.Nodes[0]}, o)
	worker := rayWorkerSpec(contract.StartRayRequest{Node: "n1", Deployment: d, Spec: c, Plan: plan.Nodes[0], RayAddress: "10.0.0.1:6379"}, o)
	rank, _, err := rankSpec(contract.RankRequest{Node: "n1", Deployment: d, Spec: c, Plan: plan, Rank: 0}, o)
	if err != nil {
		t.Fatal(err)
	}
	bind := "/lab/n1" + CompileCacheDir + "/" + CompileCacheKey(c) + ":" + compileCacheMount
	for name, s := range map[string]containerSpec{"ray head": head, "ray worker": worker, "mp rank": rank} {
		if !slices.Contains(s.AgentBinds, bind) {
			t.Errorf("%s: agent binds %v, want %s", name, s.AgentBinds, bind)
		}
		var roots []string
		for _, e := range s.Env {
			if v, ok := strings.CutPrefix(e, "VLLM_CACHE_ROOT="); ok {
				roots = append(roots, v)
			}
		}
		if !slices.Equal(roots, []string{compileCacheMount}) {
			t.Errorf("%s: VLLM_CACHE_ROOT %q, want only %s", name, roots, compileCacheMount)
		}
	}
	// An agent keeping no cache mounts none, and still drops the spec's VLLM_CACHE_ROOT.
	o.CompileCache = ""
	off := rayHeadSpec(contract.StartRayRequest{Node: "n1", Deployment: d, Spec: c, Plan: plan.Nodes[0]}, o)
	if len(off.AgentBinds) != 0 || slices.ContainsFunc(off.Env, func(e string) bool { return strings.HasPrefix(e, "VLLM_CACHE_ROOT=") }) {
		t.Errorf("no cache: binds %v env %v", off.AgentBinds, off.Env)
	}
	if DefaultContainerOptions().CompileCache != CompileCacheDir {
		t.Errorf("the agent's default keeps no cache")
	}
}
