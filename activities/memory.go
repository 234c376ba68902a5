package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// cgroupRoot is where the agent finds its memory cgroup: in a container (the lab's
// nodes) the container's own, in its cgroup namespace; on a host the hierarchy's root,
// which has no limit (package hostmem says which files it reads).
const cgroupRoot = "/sys/fs/cgroup"

// memory reads the node's memory facts: /proc/meminfo and the kernel's PSI, bounded by the
// memory cgroup when the agent's node is a limited container; the reserve is the node
// policy's. Whether the GPUs use host memory is asked once per agent (unifiedGPU).
func (s sysfs) memory(pol *policy.Policy) hostmem.Facts {
	b, err := os.ReadFile(s.proc("meminfo"))
	if err != nil {
		return hostmem.Facts{Error: "meminfo: " + err.Error()}
	}
	mi, err := hostmem.ParseMeminfo(string(b))
	if err != nil {
		return hostmem.Facts{Error: err.Error()}
	}
	f := hostmem.Combine(mi, s.cgroup())
	pressure := s.proc("pressure/memory")
	if f.Source == "cgroup2" {
		pressure = filepath.Join(s.cgroupDir(), "memory.pressure")
	}
	if b, err := os.ReadFile(pressure); err == nil {
		if p, err := hostmem.ParsePSI(string(b)); err == nil {
			f.WithPSI(p)
		}
	}
	res := hostmem.DefaultReserve
	if pol != nil {
		res = pol.HostReserve
	}
	f.ReserveBytes = res.Of(f.TotalBytes)
	if pol != nil && pol.EngineRankMemory > 0 {
		f.EngineRankBytes = pol.EngineRankMemory
	}
	f.Unified, f.UnifiedSource = unifiedGPU(s)
	return f
}

func (s sysfs) cgroupDir() string {
	if s.cgroupRoot != "" {
		return s.cgroupRoot
	}
	return cgroupRoot
}

// cgroup is the agent's memory cgroup, v2 or v1, or nil when neither can be read.
func (s sysfs) cgroup() *hostmem.Cgroup {
	dir := s.cgroupDir()
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}
	if max := read("memory.max"); max != "" {
		if c, err := hostmem.ParseCgroup2(max, read("memory.current"), read("memory.stat")); err == nil {
			return &c
		}
	}
	if limit := read("memory/memory.limit_in_bytes"); limit != "" {
		if c, err := hostmem.ParseCgroup1(limit, read("memory/memory.usage_in_bytes"), read("memory/memory.stat")); err == nil {
			return &c
		}
	}
	return nil
}

var unifiedOnce struct {
	sync.Once
	unified bool
	source  string
}

// unifiedGPU says whether the node's GPUs compute in host memory: `nvidia-smi -q` where
// it is installed (hostmem.ParseNvidiaSMI), else the model the driver names in procfs.
// The answer cannot change while the agent runs, so it is asked once.
func unifiedGPU(s sysfs) (bool, string) {
	unifiedOnce.Do(func() {
		if path, err := exec.LookPath("nvidia-smi"); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if out, err := exec.CommandContext(ctx, path, "-q").Output(); err == nil {
				if u, n := hostmem.ParseNvidiaSMI(string(out)); n > 0 {
					unifiedOnce.unified, unifiedOnce.source = u, "nvidia-smi"
					return
				}
			}
		}
		infos, _ := filepath.Glob(s.proc("driver/nvidia/gpus/*/information"))
		for _, name := range infos {
			if b, err := os.ReadFile(name); err == nil {
				if _, u := hostmem.ParseProcModel(string(b)); u {
					unifiedOnce.unified, unifiedOnce.source = true, "proc"
					return
				}
			}
		}
	})
	return unifiedOnce.unified, unifiedOnce.source
}

// OwnCgroup is the agent's own memory cgroup as the Docker engine names it, for
// ContainerOptions.CgroupParent "self": cgroup v1's memory controller line of
// /proc/self/cgroup ("4:memory:/docker/ID"), else v2's unified line ("0::/PATH"). It
// fails when the path is the root ("/": a host's agent, or a container in a private
// cgroup namespace, which hides its path — cgroup v2's default), where nesting the
// engines would mean nothing or name the wrong cgroup.
func OwnCgroup(procSelfCgroup string) (string, error) {
	var v2 string
	for line := range strings.SplitSeq(procSelfCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			if c == "memory" {
				return ownPath(parts[2])
			}
		}
	}
	if v2 != "" {
		return ownPath(v2)
	}
	return "", fmt.Errorf("/proc/self/cgroup names no memory cgroup")
}

func ownPath(p string) (string, error) {
	if p == "" || p == "/" {
		return "", fmt.Errorf("the agent's memory cgroup is the root (a private cgroup namespace hides its path): engines cannot be nested under it")
	}
	return p, nil
}

// AgentLeaf is the child cgroup an agent on a cgroup v2 host moves its node container's
// processes into (NestCgroupV2).
const AgentLeaf = "tpdeploy-agent"

// CgroupV2 says whether /proc/self/cgroup is a cgroup v2 host's: the unified line only, no
// v1 memory controller.
func CgroupV2(procSelfCgroup string) bool {
	v2 := false
	for line := range strings.SplitSeq(procSelfCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = true
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			if c == "memory" {
				return false
			}
		}
	}
	return v2
}

// PlanCgroupV2 is the cgroup a node container's agent on a cgroup v2 host nests the
// engines under (the node container's own, which holds its memory limit) and the leaf it
// moves its own processes into, from /proc/self/cgroup's unified line. cgroup v2 lets a
// cgroup hand its memory controller to children only while it holds no processes itself
// (the "no internal processes" rule), so the agent's processes leave for the leaf first:
// what moby's hack/dind does for Docker in Docker, one level down. It needs the node
// container's real path, so the container runs in the host's cgroup namespace (a private
// one shows "/"), and Docker's cgroupfs driver: the systemd driver names the container
// docker-ID.scope and takes only a slice for --cgroup-parent. An agent that restarted
// inside the leaf plans the same parent again.
func PlanCgroupV2(procSelfCgroup string) (parent, leaf string, err error) {
	var p string
	for line := range strings.SplitSeq(procSelfCgroup, "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			p = strings.TrimSpace(rest)
		}
	}
	if p == "" {
		return "", "", fmt.Errorf("/proc/self/cgroup has no cgroup v2 line")
	}
	if before, ok := strings.CutSuffix(p, "/"+AgentLeaf); ok {
		p = before
	}
	if p == "/" || p == "" {
		return "", "", fmt.Errorf("the agent's cgroup shows as the root: run the node container in the host's cgroup namespace (docker run --cgroupns host) so its agent can name its cgroup to Docker")
	}
	if strings.HasSuffix(p, ".scope") {
		return "", "", fmt.Errorf("the agent's cgroup %s is a systemd scope (Docker's systemd cgroup driver): --cgroup-parent then takes a slice, not a container's cgroup; use the cgroupfs driver for nested engines", p)
	}
	return p, p + "/" + AgentLeaf, nil
}

// NestCgroupV2 makes the cgroup parent (under root, the cgroup v2 mount) able to hold the
// engine containers: it creates leaf, moves every process of parent into it (one pid per
// write, as cgroup.procs takes them; one that exited meanwhile is skipped) and enables the
// memory controller for parent's children. Run once, when the agent starts; on a cgroup
// v2 host only.
func NestCgroupV2(root, parent, leaf string) error {
	if err := os.MkdirAll(filepath.Join(root, leaf), 0o755); err != nil {
		return fmt.Errorf("create the agent's leaf cgroup: %w", err)
	}
	// A process that joins the node's cgroup meanwhile (a docker exec) makes the write to
	// subtree_control fail EBUSY: move again and retry, as moby's hack/dind users loop.
	var err error
	for range 5 {
		var procs []byte
		if procs, err = os.ReadFile(filepath.Join(root, parent, "cgroup.procs")); err != nil {
			return fmt.Errorf("read the node's processes: %w", err)
		}
		for pid := range strings.FieldsSeq(string(procs)) {
			if err := appendLine(filepath.Join(root, leaf, "cgroup.procs"), pid); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("move process %s into %s: %w", pid, leaf, err)
			}
		}
		if err = appendLine(filepath.Join(root, parent, "cgroup.subtree_control"), "+memory"); !errors.Is(err, syscall.EBUSY) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("enable the memory controller under %s: %w", parent, err)
	}
	return nil
}

// appendLine writes one value to a cgroup file, as `echo v > file` does (one write).
func appendLine(name, v string) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v + "\n")
	return errors.Join(err, f.Close())
}
