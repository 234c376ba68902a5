package activities

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// The agent reads a limited container's facts from its cgroup (v2 here, v1 below), and a
// host's from /proc, with the policy's reserve; the files are the real formats
// (internal/hostmem/testdata).
func TestMemoryFactsFromProcAndCgroup(t *testing.T) {
	td := filepath.Join("..", "internal", "hostmem", "testdata")
	cp := func(from, to string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(td, from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	proc, cg2, cg1, none := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	cp("meminfo.h200", filepath.Join(proc, "meminfo"))
	cp("pressure.h200", filepath.Join(proc, "pressure/memory"))
	cp("cg2.max", filepath.Join(cg2, "memory.max"))
	cp("cg2.current", filepath.Join(cg2, "memory.current"))
	cp("cg2.stat", filepath.Join(cg2, "memory.stat"))
	cp("cg2.pressure", filepath.Join(cg2, "memory.pressure"))
	cp("cg1.limit_in_bytes", filepath.Join(cg1, "memory/memory.limit_in_bytes"))
	cp("cg1.usage_in_bytes", filepath.Join(cg1, "memory/memory.usage_in_bytes"))
	cp("cg1.stat", filepath.Join(cg1, "memory/memory.stat"))
	pol := policy.Default()
	pol.HostReserve = hostmem.Reserve{Bytes: 256 * hostmem.MiB}

	f := sysfs{procRoot: proc, cgroupRoot: cg2}.memory(&pol)
	if f.Source != "cgroup2" || f.TotalBytes != hostmem.GiB || f.AvailableBytes != 448*hostmem.MiB || f.PSISome == nil || *f.PSISome != 12.5 || f.ReserveBytes != 256*hostmem.MiB {
		t.Errorf("cgroup v2: %+v", f)
	}
	f = sysfs{procRoot: proc, cgroupRoot: cg1}.memory(&pol)
	if f.Source != "cgroup1" || f.TotalBytes != 512*hostmem.MiB || f.AvailableBytes <= 0 || f.PSISome == nil {
		t.Errorf("cgroup v1: %+v", f)
	}
	f = sysfs{procRoot: proc, cgroupRoot: none}.memory(nil)
	if f.Source != "meminfo" || f.TotalBytes < 100*hostmem.GiB || f.ReserveBytes != hostmem.DefaultReserve.Of(f.TotalBytes) || f.Error != "" {
		t.Errorf("host: %+v", f)
	}
	if f := (sysfs{procRoot: none, cgroupRoot: none}).memory(nil); f.Error == "" {
		t.Errorf("no meminfo: %+v", f)
	}
}

// BenchmarkProbeMemoryFacts is what the memory facts add to every probe, and what the
// guard reads every second: /proc/meminfo, the pressure file and the memory cgroup of
// this machine, parsed.
func BenchmarkProbeMemoryFacts(b *testing.B) {
	s := sysfs{}
	pol := policy.Default()
	s.memory(&pol) // the unified-memory answer is asked once per agent
	b.ResetTimer()
	for b.Loop() {
		if f := s.memory(&pol); f.Error != "" {
			b.Fatal(f.Error)
		}
	}
}

// The agent nests the lab's engines under its own memory cgroup: v1's memory line, else
// v2's unified one; a root path (a host, a private cgroup namespace) is refused.
func TestOwnCgroup(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n", "/docker/abc"},
		{"5:cpu,memory:/lab/x\n", "/lab/x"},
		{"0::/docker/def\n", "/docker/def"},
		{"0::/\n", ""},
		{"4:memory:/\n", ""},
		{"", ""},
	} {
		got, err := OwnCgroup(tc.in)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("OwnCgroup(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// On a cgroup v2 host the agent of a node container in the host's cgroup namespace plans
// to nest the engines under the container's own cgroup, its own processes moved to a
// leaf; the root (a private namespace) and a systemd scope are refused; an agent that
// restarted in the leaf plans the same.
func TestPlanCgroupV2(t *testing.T) {
	for _, tc := range []struct{ in, parent, err string }{
		{"0::/docker/0123abcd\n", "/docker/0123abcd", ""},
		{"0::/docker/0123abcd/tpdeploy-agent\n", "/docker/0123abcd", ""},
		{"0::/\n", "", "--cgroupns host"},
		{"0::/system.slice/docker-0123abcd.scope\n", "", "systemd scope"},
		{"", "", "no cgroup v2 line"},
	} {
		parent, leaf, err := PlanCgroupV2(tc.in)
		if parent != tc.parent || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) || (err == nil && leaf != tc.parent+"/tpdeploy-agent") {
			t.Errorf("PlanCgroupV2(%q) = %q, %q, %v; want %q (error %q)", tc.in, parent, leaf, err, tc.parent, tc.err)
		}
	}
	for in, want := range map[string]bool{"0::/docker/x\n": true, "12:pids:/docker/x\n4:memory:/docker/x\n0::/docker/x\n": false, "4:memory:/docker/x\n": false, "": false} {
		if got := CgroupV2(in); got != want {
			t.Errorf("CgroupV2(%q) = %v", in, got)
		}
	}
}

// NestCgroupV2 moves each of the node's processes into the leaf, one write each, then
// hands the memory controller to the node cgroup's children (a cgroup v2 tree in a
// directory: the kernel's side of each write is not run here).
func TestNestCgroupV2(t *testing.T) {
	root := t.TempDir()
	node := filepath.Join(root, "docker", "abc")
	if err := os.MkdirAll(node, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(node, "cgroup.procs"), []byte("1\n17\n42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := NestCgroupV2(root, "/docker/abc", "/docker/abc/tpdeploy-agent"); err != nil {
		t.Fatal(err)
	}
	moved, _ := os.ReadFile(filepath.Join(node, "tpdeploy-agent", "cgroup.procs"))
	ctl, _ := os.ReadFile(filepath.Join(node, "cgroup.subtree_control"))
	if string(moved) != "1\n17\n42\n" || string(ctl) != "+memory\n" {
		t.Errorf("moved %q, subtree_control %q", moved, ctl)
	}
}
