package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// A ring's plan shows both planes: the bootstrap subnet, and the links the data plane
// runs on instead of rails that span every node.
func TestPlanDrawsTheDataPlane(t *testing.T) {
	nodes := []string{"node-a", "node-b", "node-c", "node-d"}
	g := netplan.Graph{Nodes: nodes}
	for i, a := range nodes {
		b := nodes[(i+1)%4]
		hca := netplan.RDMADevice{Name: "rocep1s0f0", Port: 1}
		g.Links = append(g.Links, netplan.DataLink{A: a, B: b, Subnet: netip.MustParsePrefix(fmt.Sprintf("192.168.%d.0/30", 10+i)), AHCA: hca, BHCA: hca})
	}
	plan := netplan.Plan{Subnet: netip.MustParsePrefix("10.1.230.0/24"), DataPlane: spec.DataPlaneRequire,
		Rails:  []netplan.Rail{{Subnet: netip.MustParsePrefix("192.168.10.0/30"), Reason: "left out: node-c has no ACTIVE HCA port"}},
		Fabric: &netplan.Fabric{Graph: g, Shape: "ring", Used: true, Order: nodes, Algo: "Ring", AlgoReason: "NCCL_ALGO=Ring: ..."}}
	var out bytes.Buffer
	printPlan(&out, spec.Cluster{}, workflows.PlanReport{Plan: &plan})
	for _, w := range []string{
		"NCCL_SOCKET_IFNAME stays on the bootstrap subnet 10.1.230.0/24",
		"data plane: require over 4 link(s)",
		"data plane: ring node-a-node-b-node-c-node-d, 4 link(s)",
		"  node-a-node-b 192.168.10.0/30 rocep1s0f0:1<->rocep1s0f0:1",
		"NCCL_ALGO=Ring",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("plan lacks %q:\n%s", w, out.String())
		}
	}
	if strings.Contains(out.String(), "0 rail(s) used") {
		t.Errorf("a ring's plan reports rails:\n%s", out.String())
	}
}

// `starter plan` gives each node's host-memory budget: a Spark at vLLM's default
// utilization does not fit, a discrete node does, each with what it needs and has.
func TestPlanShowsEachNodesMemoryBudget(t *testing.T) {
	some := 0.5
	yes := true
	s := spec.Cluster{Parallel: spec.Parallel{Tensor: 2}, Nodes: []spec.Node{{Name: "spark-1", UnifiedMemory: &yes}, {Name: "h200"}}}
	rep := workflows.PlanReport{Probes: []netplan.NodeProbe{
		{Node: "spark-1", Memory: &hostmem.Facts{TotalBytes: 120 * hostmem.GiB, AvailableBytes: 110 * hostmem.GiB, Source: "meminfo", PSISome: &some, ReserveBytes: 12 * hostmem.GiB}},
		{Node: "h200", Memory: &hostmem.Facts{TotalBytes: 1000 * hostmem.GiB, AvailableBytes: 900 * hostmem.GiB, Source: "meminfo", ReserveBytes: 100 * hostmem.GiB}},
	}}
	var out bytes.Buffer
	printPlan(&out, s, rep)
	for _, w := range []string{
		"Host memory",
		"spark-1: unified memory (spec), meminfo, pressure some 0.50%: needs",
		"110.0 GiB available of 120.0 GiB; DOES NOT FIT: lower --gpu-memory-utilization",
		"h200: discrete GPU memory, meminfo: needs 102.2 GiB",
		"900.0 GiB available of 1000.0 GiB; fits",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("plan lacks %q:\n%s", w, out.String())
		}
	}
}
