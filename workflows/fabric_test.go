package workflows

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// ring4Agents are fake agents for four switchless Sparks listed a, c, b, d and cabled
// a-b-c-d-a: a 10 GbE LAN every node shares, and a /30 per cable between two CX-7 ports
// (port k of a node is enp1s0f<k>np<k> with HCA rocep1s0f<k>).
func ring4Agents() (*fakeagents.Agents, spec.Cluster) {
	f := fakeagents.New()
	names := []string{"node-a", "node-c", "node-b", "node-d"}
	probes := map[string]*netplan.NodeProbe{}
	s := fakeagents.SeedSpec()
	s.Nodes = nil
	for i, n := range names {
		role := spec.RoleWorker
		if i == 0 {
			role = spec.RoleHead
		}
		s.Nodes = append(s.Nodes, spec.Node{Name: n, Role: role, GPUs: 1})
		probes[n] = &netplan.NodeProbe{Node: n, Hostname: n, BootID: "boot-" + n, GPUs: 1, GPUSource: "spec", Links: []netplan.Link{
			{Name: "enP7s7", Kind: "device", MTU: 1500, Up: true, SpeedMbps: 10000, Addrs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.1.230.%d/24", 10+i))}},
		}}
	}
	s.Parallel = spec.Parallel{Tensor: 4}
	port := func(n, addr string) {
		p := probes[n]
		k := len(p.RDMA)
		netdev := fmt.Sprintf("enp1s0f%dnp%d", k, k)
		p.Links = append(p.Links, netplan.Link{Name: netdev, Kind: "device", MTU: 9000, Up: true, SpeedMbps: 200000, Addrs: []netip.Prefix{netip.MustParsePrefix(addr)}})
		p.RDMA = append(p.RDMA, netplan.RDMADevice{Name: fmt.Sprintf("rocep1s0f%d", k), Port: 1, Netdev: netdev, State: "ACTIVE", LinkLayer: "Ethernet", RateMbps: 200000, UVerbs: fmt.Sprintf("uverbs%d", k)})
	}
	for i, cb := range [][2]string{{"node-a", "node-b"}, {"node-b", "node-c"}, {"node-c", "node-d"}, {"node-d", "node-a"}} {
		port(cb[0], fmt.Sprintf("192.168.%d.1/30", 10+i))
		port(cb[1], fmt.Sprintf("192.168.%d.2/30", 10+i))
	}
	f.Probes = map[string]netplan.NodeProbe{}
	for n, p := range probes {
		f.Probes[n] = *p
	}
	return f, s.WithDefaults()
}

// TestSwitchlessRingIsRefusedBeforeAnyContainer: on a ring of four one-GPU Sparks the
// cables carry tensor 4 in the cables' order, but NCCL 2.28.9 connects each channel of a
// node to both its neighbours over one NIC (netplan channelNICs), so IB cannot carry it:
// under either executor the deploy is refused DataPlaneUnreachable naming the nodes' ports
// and the ways out, before any container.
func TestSwitchlessRingIsRefusedBeforeAnyContainer(t *testing.T) {
	// (The fake nodes' image is the seed's, NCCL 2.27.5.)
	for _, ex := range []string{spec.ExecutorMP, spec.ExecutorRay} {
		f, s := ring4Agents()
		s.Executor = ex
		env := newEnv(t, f)
		executeDeploy(env, DeployRequest{Spec: s})
		var app *temporal.ApplicationError
		err := env.GetWorkflowError()
		if !errors.As(err, &app) || app.Type() != contract.ErrDataPlaneUnreachable || !strings.Contains(app.Message(), "ncclTopoGetNetDev") ||
			!strings.Contains(app.Message(), "node-a reaches node-b only over rocep1s0f0:1 and node-d only over rocep1s0f1:1") || !strings.Contains(app.Message(), "the image's NCCL 2.27.5") ||
			!strings.Contains(app.Message(), "ways out: an image whose NCCL is 2.30.7 or later") {
			t.Fatalf("%s: err = %v, want DataPlaneUnreachable naming NCCL's channel NIC", ex, err)
		}
		if starts := fakeagents.Calls(f, "StartRayHead", "StartRayWorker", "StartVLLMRank"); len(starts) != 0 {
			t.Errorf("%s: started %q", ex, starts)
		}
	}
}

// TestSwitchlessRingServesOnNCCL230: the same ring with an image whose libnccl.so.2 is
// NCCL 2.30.7 deploys under mp: the plan that reaches every rank turns on NCCL's
// subnet-aware routing with the cables' /30 and keeps NCCL to its ring, and the ranks are
// placed by the cables (node-b holds rank 1 although the spec lists node-c second).
func TestSwitchlessRingServesOnNCCL230(t *testing.T) {
	f, s := ring4Agents()
	s.Executor = spec.ExecutorMP
	for _, n := range s.Nodes {
		img := fakeagents.SeedImage(n.Name)
		img.VLLM, img.Ray, img.RayBin, img.NCCL, img.NCCLLib = "0.32.0", "", false, "2.30.7", "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2"
		f.Images[n.Name] = img
	}
	env := newEnv(t, f)
	executeDeploy(env, DeployRequest{Spec: s})
	var res DeployResult
	if err := env.GetWorkflowError(); err != nil || env.GetWorkflowResult(&res) != nil {
		t.Fatalf("deploy failed: %v", err)
	}
	if res.Engine == nil || res.Engine.NCCL != "2.30.7" || res.Plan.Fabric == nil || !res.Plan.Fabric.Used || res.Plan.Fabric.SubnetPrefixLen != 30 {
		t.Fatalf("engine %+v fabric %+v", res.Engine, res.Plan.Fabric)
	}
	for _, n := range res.Plan.Nodes {
		if n.Env[netplan.EnvSubnetRouting] != "1" || n.Env[netplan.EnvSubnetPrefixLen] != "30" || n.Env["NCCL_ALGO"] != "Ring" || n.Env["NCCL_IB_HCA"] != "=rocep1s0f0:1,rocep1s0f1:1" {
			t.Errorf("%s: env %v", n.Name, n.Env)
		}
	}
	if got := res.Plan.NodeRank(s, "node-b"); got != 1 {
		t.Errorf("node-b ranks %d, want 1 (the cables' order)", got)
	}
	if starts := fakeagents.Calls(f, "StartVLLMRank"); len(starts) != 4 {
		t.Errorf("started %q, want four ranks", starts)
	}
}
