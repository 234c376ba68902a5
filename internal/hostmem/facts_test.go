package hostmem

import (
	"os"
	"path/filepath"
	"testing"
)

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The real /proc/meminfo of two machines: the x86 development host and an H200 node.
func TestParseMeminfoReadsRealFiles(t *testing.T) {
	for _, name := range []string{"meminfo.host", "meminfo.h200"} {
		m, err := ParseMeminfo(read(t, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.Total <= 0 || m.Available <= 0 || m.Available > m.Total {
			t.Errorf("%s: total %d, available %d", name, m.Total, m.Available)
		}
		if m.Total%1024 != 0 {
			t.Errorf("%s: total %d is not kB×1024", name, m.Total)
		}
	}
}

func TestParseMeminfoFields(t *testing.T) {
	m, err := ParseMeminfo("MemTotal:       1000 kB\nMemFree:    10 kB\nMemAvailable:    600 kB\nSwapTotal:   200 kB\nSwapFree:  50 kB\nHugePages_Total:       0\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Meminfo{Total: 1000 << 10, Available: 600 << 10, SwapTotal: 200 << 10, SwapFree: 50 << 10}); m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	if _, err := ParseMeminfo("MemTotal: 1000 kB\n"); err == nil {
		t.Error("a meminfo without MemAvailable parsed")
	}
}

func TestParsePSI(t *testing.T) {
	p, err := ParsePSI(read(t, "cg2.pressure"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Some != 12.5 || !p.HasFull || p.Full != 8.25 {
		t.Errorf("got %+v", p)
	}
	for _, name := range []string{"pressure.host", "pressure.h200"} {
		p, err := ParsePSI(read(t, name))
		if err != nil || !p.HasFull {
			t.Errorf("%s: %+v, %v", name, p, err)
		}
	}
	if _, err := ParsePSI("full avg10=1.00 avg60=0 avg300=0 total=0\n"); err == nil {
		t.Error("a PSI file without some parsed")
	}
}

// cg1.* were read from a memory cgroup limited to 512 MiB that had read a 50 MiB file
// (this host runs cgroup v1); cg2.* are in cgroup v2's format (cgroup-v2.rst), and
// cg2.stat.h200root is the real root memory.stat of a cgroup v2 host.
func TestParseCgroup(t *testing.T) {
	c1, err := ParseCgroup1(read(t, "cg1.limit_in_bytes"), read(t, "cg1.usage_in_bytes"), read(t, "cg1.stat"))
	if err != nil {
		t.Fatal(err)
	}
	if c1.Limit != 512*MiB || c1.Usage <= 0 || c1.InactiveFile < 40*MiB || c1.Version != 1 {
		t.Errorf("v1: %+v", c1)
	}
	c2, err := ParseCgroup2(read(t, "cg2.max"), read(t, "cg2.current"), read(t, "cg2.stat"))
	if err != nil {
		t.Fatal(err)
	}
	if c2 != (Cgroup{Limit: GiB, Usage: 768 * MiB, InactiveFile: 192 * MiB, Version: 2}) {
		t.Errorf("v2: %+v", c2)
	}
	root, err := ParseCgroup2("max\n", "1000\n", read(t, "cg2.stat.h200root"))
	if err != nil || root.Limit != 0 || root.InactiveFile <= 0 {
		t.Errorf("v2 without a limit: %+v, %v", root, err)
	}
	un, err := ParseCgroup1("9223372036854771712\n", "3165364224\n", "")
	if err != nil || un.Limit != 0 {
		t.Errorf("v1 without a limit: %+v, %v", un, err)
	}
	if _, err := ParseCgroup2("lots\n", "0", ""); err == nil {
		t.Error("a bad memory.max parsed")
	}
}

func TestCombine(t *testing.T) {
	host := Meminfo{Total: 24 * GiB, Available: 10 * GiB}
	for _, tc := range []struct {
		name         string
		cg           *Cgroup
		source       string
		total, avail int64
	}{
		{"a host", nil, "meminfo", 24 * GiB, 10 * GiB},
		{"a cgroup without a limit", &Cgroup{Version: 2, Usage: GiB}, "meminfo", 24 * GiB, 10 * GiB},
		{"a limited container", &Cgroup{Version: 2, Limit: GiB, Usage: 768 * MiB, InactiveFile: 192 * MiB}, "cgroup2", GiB, 448 * MiB},
		{"a container over its limit", &Cgroup{Version: 1, Limit: GiB, Usage: 2 * GiB}, "cgroup1", GiB, 0},
		{"a limit above what the host has free", &Cgroup{Version: 2, Limit: 16 * GiB, Usage: GiB}, "cgroup2", 16 * GiB, 10 * GiB},
		{"a limit above the host's memory", &Cgroup{Version: 2, Limit: 64 * GiB}, "meminfo", 24 * GiB, 10 * GiB},
	} {
		f := Combine(host, tc.cg)
		if f.Source != tc.source || f.TotalBytes != tc.total || f.AvailableBytes != tc.avail {
			t.Errorf("%s: got %s %d/%d, want %s %d/%d", tc.name, f.Source, f.AvailableBytes, f.TotalBytes, tc.source, tc.avail, tc.total)
		}
	}
}

func TestUnifiedDetection(t *testing.T) {
	if u, n := ParseNvidiaSMI(read(t, "nvidia-smi-q.gb10")); !u || n != 1 {
		t.Errorf("GB10: unified %v, %d GPUs", u, n)
	}
	// The real `nvidia-smi -q` of an H200 node: a framebuffer, addressing mode None.
	if u, n := ParseNvidiaSMI(read(t, "nvidia-smi-q.h200")); u || n != 1 {
		t.Errorf("H200: unified %v, %d GPUs", u, n)
	}
	// A GH200 addresses host memory through ATS but has its own HBM.
	if u, _ := ParseNvidiaSMI("GPU 00000009:01:00.0\n    Addressing Mode : ATS\n    FB Memory Usage\n        Total : 97871 MiB\n"); u {
		t.Error("an ATS GPU with a framebuffer read as unified")
	}
	if m, u := ParseProcModel(read(t, "proc-information.h200")); u || m != "NVIDIA H200" {
		t.Errorf("H200 information: %q %v", m, u)
	}
	if m, u := ParseProcModel("Model: \t\t NVIDIA GB10\nIRQ:   \t\t 41\n"); !u || m != "NVIDIA GB10" {
		t.Errorf("GB10 information: %q %v", m, u)
	}
}
