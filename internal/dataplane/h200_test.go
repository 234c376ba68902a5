package dataplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// The proof's program as it ran on a real GPU (one NVIDIA H200, driver 580.159.04, torch
// 2.11.0+cu130, NCCL 2.28.9, no RDMA devices: /dev/infiniband held only rdma_cm), through
// `scripts/nccl-check.sh proof`, 2026-12-01; testdata/h200/summary.txt is what the script
// printed. The parser must read NCCL's real lines, the empty `NET/IB : Using [RO]` after
// `No device found.` included, and a forced IB transport must be the proof's named failure.
func h200(t *testing.T, name string) Rank {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "h200", name))
	if err != nil {
		t.Fatal(err)
	}
	return Parse(string(b))
}

func TestRealH200Runs(t *testing.T) {
	one := h200(t, "ws1-socket.rank0.log")
	if one.Transport != "Socket" || len(one.HCAs) != 0 || !one.IBNoDevice || !one.IBFailed || one.Bootstrap != "eth0:192.0.2.2<0>" {
		t.Errorf("world size 1: %+v", one)
	}
	if !one.Finished || !one.SumOK || one.NCCL != "2.28.9" || len(one.Sizes) != 4 || !one.MemlockUnlimited() {
		t.Errorf("world size 1, the program's own lines: %+v", one)
	}
	// A plan without RDMA accepts sockets; with RDMA planned the same run is degraded,
	// and the cause named is the missing verbs device.
	node := func(r Rank) Node { return Node{Node: "h200", Rank: r.Rank, Verbs: true, Output: r} }
	if v := Decide(Expect{Mode: "require"}, []Node{node(one)}); v.ErrType != "" || !strings.HasPrefix(v.Summary, "Socket") {
		t.Errorf("no RDMA planned: %+v", v)
	}
	v := Decide(Expect{Mode: "require", RDMA: true, Rails: 1}, []Node{{Node: "h200", HCAs: []string{"mlx5_0:1"}, Verbs: true, Output: one}})
	if v.ErrType != failure.DataPlaneDegraded || !strings.Contains(v.Err, "no /dev/infiniband/uverbs* device in the container") {
		t.Errorf("RDMA planned, sockets used: %+v", v)
	}

	forced := h200(t, "forced-ib.rank0.log")
	if !forced.NoNetPlugin || forced.Finished || forced.Phase != "init" || forced.Transport != "" {
		t.Errorf("NCCL_NET=IB: %+v", forced)
	}
	v = Decide(Expect{Mode: "require", RDMA: true, Rails: 1}, []Node{{Node: "h200", HCAs: []string{"mlx5_0:1"}, Verbs: true, Output: forced}})
	if v.ErrType != failure.DataPlaneDegraded || !strings.Contains(v.Err, "Failed to initialize any NET plugin") {
		t.Errorf("NCCL_NET=IB: %+v", v)
	}

	var ranks []Node
	for i, f := range []string{"dupgpu.rank0.log", "dupgpu.rank1.log"} {
		r := h200(t, f)
		if r.Finished || !strings.Contains(r.Error, "Duplicate GPU detected") {
			t.Errorf("%s: %+v", f, r)
		}
		ranks = append(ranks, Node{Node: "h200", Rank: i, Verbs: true, Output: r})
	}
	if v := Decide(Expect{Mode: "require"}, ranks); v.ErrType != failure.DataPlaneFailed {
		t.Errorf("two ranks on one GPU: %+v", v)
	}
}
