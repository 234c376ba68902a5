package lab

import (
	"context"
	"strings"
	"testing"
)

// Each topology's networks and HCAs as lab/README.md describes them, without Docker.
func TestTopologiesLayOutTheirCables(t *testing.T) {
	for _, tc := range []struct {
		topo   string
		nets   []string
		cables [][2]string
	}{
		{TopologyPair, []string{"mgmt", "ext", "fast", "ctl"}, nil},
		{TopologySpark, []string{"mgmt", "ext", "fast", "fast2", "ctl"}, nil},
		{TopologyTriangle, []string{"mgmt", "ext", "link-ab", "link-bc", "link-ca", "ctl"}, [][2]string{{"node-a", "node-b"}, {"node-b", "node-c"}, {"node-c", "node-a"}}},
		{TopologyRing4, []string{"mgmt", "ext", "link-ab", "link-bc", "link-cd", "link-da", "ctl"}, [][2]string{{"node-a", "node-b"}, {"node-b", "node-c"}, {"node-c", "node-d"}, {"node-d", "node-a"}}},
	} {
		topo, err := topologyOf(tc.topo)
		if err != nil {
			t.Fatal(err)
		}
		nets, cables := topo.build(topo.nodes, 7)
		var names []string
		subnets := map[string]bool{}
		for _, n := range nets {
			names = append(names, n.Name)
			if subnets[n.Subnet.String()] {
				t.Errorf("%s: subnet %s twice", tc.topo, n.Subnet)
			}
			subnets[n.Subnet.String()] = true
			if strings.HasPrefix(n.Name, "link-") && (n.MTU != 9000 || !n.Internal || len(n.Members) != 2) {
				t.Errorf("%s: cable %s is not an internal MTU 9000 network of two nodes: %+v", tc.topo, n.Name, n)
			}
		}
		if strings.Join(names, " ") != strings.Join(tc.nets, " ") {
			t.Errorf("%s: networks %v, want %v", tc.topo, names, tc.nets)
		}
		if len(cables) != len(tc.cables) {
			t.Fatalf("%s: cables %+v, want %v", tc.topo, cables, tc.cables)
		}
		l := &Lab{Topology: topo.name, Nets: nets, Cables: cables}
		for i, c := range cables {
			if c.A != tc.cables[i][0] || c.B != tc.cables[i][1] || c.AHCA != "rocep1s0f1" || c.BHCA != "rocep1s0f0" {
				t.Errorf("%s: cable %d is %+v", tc.topo, i, c)
			}
		}
		for i := range topo.nodes {
			hcas := l.hcasOf(i)
			if tc.topo == TopologyPair {
				if len(hcas) != 0 {
					t.Errorf("pair: node %d has HCAs %v", i, hcas)
				}
				continue
			}
			if len(hcas) != 2 {
				t.Fatalf("%s: node %d has HCAs %v", tc.topo, i, hcas)
			}
			for _, h := range hcas {
				found := false
				for _, n := range nets {
					if n.Name == h.Network {
						_, found = n.addrOf(i)
					}
				}
				if !found {
					t.Errorf("%s: node %d's %s is on %s, which it does not join", tc.topo, i, h.HCA, h.Network)
				}
			}
		}
	}
	ring := &Lab{}
	_, ring.Cables = mustTopo(t, TopologyRing4).build(4, 1)
	if ring.Linked("node-a", "node-c") || ring.Linked("node-b", "node-d") || !ring.Linked("node-d", "node-a") {
		t.Error("ring4's opposite corners must share no cable, its neighbours one")
	}
}

func mustTopo(t *testing.T, name string) topology {
	t.Helper()
	topo, err := topologyOf(name)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// A wrong topology or node count fails before anything is built or started.
func TestUpRefusesUnknownTopologyAndNodeCount(t *testing.T) {
	_, err := Up(context.Background(), nil, "", Config{Prefix: "tpd-test-none", Topology: "mesh"})
	if err == nil || !strings.Contains(err.Error(), `no topology "mesh": one of pair, spark, triangle, ring4`) {
		t.Errorf("unknown topology: %v", err)
	}
	_, err = Up(context.Background(), nil, "", Config{Prefix: "tpd-test-none", Topology: TopologyRing4, Nodes: 3})
	if err == nil || !strings.Contains(err.Error(), "topology ring4 has 4 nodes, not 3") {
		t.Errorf("wrong node count: %v", err)
	}
}

// Each image's libnccl.so.2 stand-in carries the version string NCCL compiles in, of the
// library the image's engine loads: the wheel's, or the 2.30.7 build copied over it.
func TestNCCLStandInCarriesTheLoadedVersion(t *testing.T) {
	stock, ok := ReleaseNamed("vllm-0.22.1")
	if !ok {
		t.Fatal("no vllm-0.22.1")
	}
	for r, want := range map[*Release]string{&stock: "NCCL version 2.28.9+cuda13.0\x00", &NCCL230Release: "NCCL version 2.30.7+cuda13.0\x00"} {
		if got := ncclStandIn(*r); !strings.Contains(got, want) || !strings.HasPrefix(got, "\x7fELF") {
			t.Errorf("%s: stand-in %q lacks %q", r.Name, got, want)
		}
	}
	if NCCL230Release.NCCL != "2.29.7" || NCCL230Release.LoadedNCCL() != "2.30.7" {
		t.Errorf("the 2.30 image keeps the wheel's record (2.29.7) under a 2.30.7 library: %+v", NCCL230Release)
	}
	if _, in := ReleaseNamed(NCCL230Release.Name); in {
		t.Errorf("%s is in Releases: every release-matrix test would run it", NCCL230Release.Name)
	}
}
