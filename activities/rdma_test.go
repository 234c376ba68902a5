package activities

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

func TestRDMAMapping(t *testing.T) {
	root := t.TempDir()
	sys := filepath.Join(root, "sys")
	writeFile(t, filepath.Join(sys, "class/infiniband/rocep1s0f1/device/infiniband_verbs/uverbs1/ibdev"), "rocep1s0f1\n")
	writeFile(t, filepath.Join(sys, "class/infiniband/roceP2p1s0f1/device/infiniband_verbs/uverbs3/ibdev"), "roceP2p1s0f1\n")
	writeFile(t, filepath.Join(root, "dev/infiniband/uverbs1"), "")
	writeFile(t, filepath.Join(root, "dev/infiniband/uverbs3"), "")
	o := DefaultContainerOptions()
	o.HostRoot = root
	np := netplan.NodePlan{Name: "spark-a", RDMA: []netplan.RDMADevice{{Name: "rocep1s0f1", Port: 1}, {Name: "roceP2p1s0f1", Port: 1}}}
	cfg := Config{Name: "spark-a", SysRoot: sys, Containers: o}
	a := New(cfg).Ray.docker

	m := a.rdmaMapping(np)
	want := []string{root + "/dev/infiniband/uverbs1:/dev/infiniband/uverbs1", root + "/dev/infiniband/uverbs3:/dev/infiniband/uverbs3"}
	if strings.Join(m.Devices, " ") != strings.Join(want, " ") || m.Note != "" {
		t.Fatalf("mapping %+v", m)
	}
	s := a.withRDMA(containerSpec{Name: "c", Image: "i"}, np)
	opts, err := s.createOptions()
	if err != nil {
		t.Fatal(err)
	}
	hc := opts.HostConfig
	if len(hc.Devices) != 2 || hc.Devices[1].PathInContainer != "/dev/infiniband/uverbs3" || len(hc.CapAdd) != 1 || hc.CapAdd[0] != "IPC_LOCK" || hc.Privileged {
		t.Fatalf("host config devices %+v caps %v", hc.Devices, hc.CapAdd)
	}

	// The node's policy says none: nothing mapped, and the note names the setting.
	none, _ := policy.Parse([]byte("rdma_devices: none\n"), "/etc/tpdeploy/policy.yaml", policy.Overrides{})
	cfg.Policy = &none
	a = New(cfg).Ray.docker
	if m := a.rdmaMapping(np); len(m.Devices) != 0 || !strings.Contains(m.Note, "rdma_devices: none") {
		t.Fatalf("policy none: %+v", m)
	}
	cfg.Policy = nil

	// A device missing on the node, and a limited memlock, are said.
	os.Remove(filepath.Join(root, "dev/infiniband/uverbs3"))
	cfg.Containers.Ulimits = nil
	a = New(cfg).Ray.docker
	m = a.rdmaMapping(np)
	if len(m.Devices) != 1 || !strings.Contains(m.Note, "uverbs3 is not there") || !strings.Contains(m.Note, "memlock is not unlimited") {
		t.Fatalf("missing device: %+v", m)
	}
	// HCA names from the plan go into a sysfs path: one that climbs out of
	// class/infiniband (to a tree a container could have planted) or is no kernel device
	// name maps nothing, and the note names it.
	writeFile(t, filepath.Join(sys, "planted/device/infiniband_verbs/uverbs1/ibdev"), "planted\n")
	for _, name := range []string{"../../planted", "rocep1s0f1/../../../planted", "..", ".", "", "a b", strings.Repeat("m", 65)} {
		m := a.rdmaMapping(netplan.NodePlan{RDMA: []netplan.RDMADevice{{Name: name, Port: 1}}})
		if len(m.Devices) != 0 || !strings.Contains(m.Note, fmt.Sprintf("%q is not an RDMA device name", name)) {
			t.Errorf("HCA %q: %+v", name, m)
		}
	}
	// A verbs entry that is not uverbsN is not a device name either.
	writeFile(t, filepath.Join(sys, "class/infiniband/mlx5_0/device/infiniband_verbs/uverbs1x/ibdev"), "mlx5_0\n")
	writeFile(t, filepath.Join(root, "dev/infiniband/uverbs1x"), "")
	if m := a.rdmaMapping(netplan.NodePlan{RDMA: []netplan.RDMADevice{{Name: "mlx5_0", Port: 1}}}); len(m.Devices) != 0 {
		t.Errorf("a verbs entry uverbs1x: %+v", m)
	}
	// No RDMA in the plan: nothing at all.
	if m := a.rdmaMapping(netplan.NodePlan{}); len(m.Devices) != 0 || m.Note != "" {
		t.Fatalf("no rdma: %+v", m)
	}
}
