// Package hostmem is what a node agent knows of its host's memory, and the admission
// decision built on it: the facts (MemTotal, MemAvailable, swap, pressure, whether the
// GPUs compute in host memory) parsed from the kernel's own files, and the per-node budget
// a spec needs (Budget). Everything here is pure: the agent reads the files, this package
// reads their text.
//
// Where the facts come from:
//   - A host: /proc/meminfo (MemTotal, MemAvailable, SwapTotal, SwapFree; proc(5)) and
//     /proc/pressure/memory (PSI: "some" and "full" lines, avg10 in percent;
//     Documentation/accounting/psi.rst).
//   - A node that is a container (the lab's nodes; an agent under a memory-limited
//     systemd slice): the memory cgroup bounds it, not the host. cgroup v2
//     (Documentation/admin-guide/cgroup-v2.rst): memory.max ("max" or bytes),
//     memory.current, memory.stat's inactive_file (reclaimable page cache, as
//     MemAvailable counts it), memory.pressure (PSI, the same format as the host's).
//     cgroup v1 (Documentation/admin-guide/cgroup-v1/memory.rst): memory.limit_in_bytes,
//     memory.usage_in_bytes, memory.stat's total_inactive_file; v1 has no per-cgroup PSI.
//     A cgroup with no limit (max, or v1's page-counter maximum) leaves the host's facts.
//   - Unified memory: see unified.go.
package hostmem

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// Facts are a node's memory as its agent read them.
type Facts struct {
	// TotalBytes and AvailableBytes are MemTotal and MemAvailable, or the cgroup's limit
	// and what is left under it when the node is a container (Source says which).
	TotalBytes     int64 `json:"total_bytes"`
	AvailableBytes int64 `json:"available_bytes"`
	SwapTotalBytes int64 `json:"swap_total_bytes,omitempty"`
	SwapFreeBytes  int64 `json:"swap_free_bytes,omitempty"`
	// PSISome and PSIFull are the memory pressure's avg10 (percent of the last 10 s some or
	// all tasks stalled on memory); nil when the kernel exposes no PSI there.
	PSISome *float64 `json:"psi_some_avg10,omitempty"`
	PSIFull *float64 `json:"psi_full_avg10,omitempty"`
	// Source is "meminfo", "cgroup2" or "cgroup1".
	Source string `json:"source"`
	// Unified says the GPUs compute in host memory (a GB10, a Jetson): their memory is
	// this RAM. UnifiedSource says how that was found ("nvidia-smi", "proc", "spec", or
	// "" when no GPU said so).
	Unified       bool   `json:"unified,omitempty"`
	UnifiedSource string `json:"unified_source,omitempty"`
	// ReserveBytes is what the node's policy keeps for the host (policy.HostReserve).
	ReserveBytes int64 `json:"reserve_bytes,omitempty"`
	// EngineRankBytes is the node policy's estimate of one engine rank's own memory
	// (policy.EngineRankMemory; 0: EngineRankBytes).
	EngineRankBytes int64 `json:"engine_rank_bytes,omitempty"`
	// Error is why the facts could not be read (the fields are then zero).
	Error string `json:"error,omitempty"`
}

// Meminfo is what /proc/meminfo says, in bytes.
type Meminfo struct {
	Total, Available, SwapTotal, SwapFree int64
}

// ParseMeminfo reads /proc/meminfo ("MemTotal:       24680000 kB"). MemTotal and
// MemAvailable are required (MemAvailable exists since Linux 3.14).
func ParseMeminfo(text string) (Meminfo, error) {
	var m Meminfo
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("meminfo %s: %w", key, err)
		}
		if len(f) > 1 && f[1] == "kB" {
			v *= 1024
		}
		switch key {
		case "MemTotal":
			m.Total = v
		case "MemAvailable":
			m.Available = v
		case "SwapTotal":
			m.SwapTotal = v
		case "SwapFree":
			m.SwapFree = v
		default:
			continue
		}
		seen[key] = true
	}
	if !seen["MemTotal"] || !seen["MemAvailable"] {
		return m, fmt.Errorf("meminfo: no MemTotal or MemAvailable")
	}
	return m, nil
}

// PSI is one pressure file's avg10 values, in percent.
type PSI struct {
	Some, Full float64
	HasFull    bool
}

// ParsePSI reads a PSI file (/proc/pressure/memory, a cgroup's memory.pressure):
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=0
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
func ParsePSI(text string) (PSI, error) {
	var p PSI
	var some bool
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k != "avg10" {
				continue
			}
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return p, fmt.Errorf("psi %s avg10: %w", f[0], err)
			}
			switch f[0] {
			case "some":
				p.Some, some = x, true
			case "full":
				p.Full, p.HasFull = x, true
			}
		}
	}
	if !some {
		return p, fmt.Errorf("psi: no some line")
	}
	return p, nil
}

// Cgroup is a memory cgroup's limit and use, in bytes; Limit 0 means none.
type Cgroup struct {
	Limit, Usage, InactiveFile int64
	Version                    int
}

// v1Unlimited is at or above cgroup v1's "no limit" (PAGE_COUNTER_MAX pages, which
// prints as 9223372036854771712 on 4 KiB pages; anything above 2^62 is no real limit).
const v1Unlimited = int64(1) << 62

// ParseCgroup2 reads cgroup v2's memory.max, memory.current and memory.stat.
func ParseCgroup2(max, current, stat string) (Cgroup, error) {
	c := Cgroup{Version: 2}
	if m := strings.TrimSpace(max); m != "max" {
		v, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			return c, fmt.Errorf("memory.max: %w", err)
		}
		c.Limit = v
	}
	v, err := strconv.ParseInt(strings.TrimSpace(current), 10, 64)
	if err != nil {
		return c, fmt.Errorf("memory.current: %w", err)
	}
	c.Usage = v
	c.InactiveFile = statValue(stat, "inactive_file")
	return c, nil
}

// ParseCgroup1 reads cgroup v1's memory.limit_in_bytes, memory.usage_in_bytes and
// memory.stat (total_inactive_file counts the hierarchy below, as usage does).
func ParseCgroup1(limit, usage, stat string) (Cgroup, error) {
	c := Cgroup{Version: 1}
	l, err := strconv.ParseInt(strings.TrimSpace(limit), 10, 64)
	if err != nil {
		return c, fmt.Errorf("memory.limit_in_bytes: %w", err)
	}
	if l < v1Unlimited {
		c.Limit = l
	}
	u, err := strconv.ParseInt(strings.TrimSpace(usage), 10, 64)
	if err != nil {
		return c, fmt.Errorf("memory.usage_in_bytes: %w", err)
	}
	c.Usage = u
	c.InactiveFile = statValue(stat, "total_inactive_file")
	if c.InactiveFile == 0 {
		c.InactiveFile = statValue(stat, "inactive_file")
	}
	return c, nil
}

func statValue(stat, key string) int64 {
	for line := range strings.SplitSeq(stat, "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return 0
}

// Combine makes the node's facts from the host's meminfo and, when the node is a
// memory-limited cgroup, that cgroup: the limit is the total (when below MemTotal), and
// what is available is what the cgroup may still take — the limit less its use, its
// reclaimable page cache counted back in as MemAvailable counts the host's — and never
// more than the host has.
func Combine(m Meminfo, cg *Cgroup) Facts {
	f := Facts{TotalBytes: m.Total, AvailableBytes: m.Available, SwapTotalBytes: m.SwapTotal, SwapFreeBytes: m.SwapFree, Source: "meminfo"}
	if cg == nil || cg.Limit == 0 || cg.Limit >= m.Total {
		return f
	}
	f.Source = fmt.Sprintf("cgroup%d", cg.Version)
	f.TotalBytes = cg.Limit
	avail := max(cg.Limit-cg.Usage+cg.InactiveFile, 0)
	f.AvailableBytes = min(avail, cg.Limit, m.Available)
	return f
}

// WithPSI sets the facts' pressure.
func (f *Facts) WithPSI(p PSI) {
	some := p.Some
	f.PSISome = &some
	if p.HasFull {
		full := p.Full
		f.PSIFull = &full
	}
}
