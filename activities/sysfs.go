package activities

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/netplan"
)

// sysfs is where the agent reads the machine: sysfs (link speeds, RDMA devices), procfs
// (GPUs, the boot ID). The lab points them at a simulated node's own tree.
type sysfs struct {
	sysRoot, procRoot string
	// bootIDFile overrides the kernel's boot ID.
	bootIDFile string
	// cgroupRoot overrides where the memory cgroup is read (tests; default /sys/fs/cgroup).
	cgroupRoot string
}

func (s sysfs) sys(parts ...string) string {
	root := s.sysRoot
	if root == "" {
		root = "/sys"
	}
	return filepath.Join(append([]string{root}, parts...)...)
}

func (s sysfs) proc(parts ...string) string {
	root := s.procRoot
	if root == "" {
		root = "/proc"
	}
	return filepath.Join(append([]string{root}, parts...)...)
}

func (s sysfs) bootID() (string, error) {
	file := s.bootIDFile
	if file == "" {
		file = s.proc("sys/kernel/random/boot_id")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// linkSpeed reads /sys/class/net/NAME/speed; virtual links report -1 or fail the read.
func (s sysfs) linkSpeed(name string) int {
	b, err := os.ReadFile(s.sys("class/net", name, "speed"))
	if err != nil {
		return 0
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// rdmaDevices maps each InfiniBand/RoCE port to its netdev, as ibdev2netdev does:
// /sys/class/infiniband/DEV/ports/PORT/gid_attrs/ndevs/0 names the netdev (RoCE), and
// /sys/class/infiniband/DEV/device/net/ lists it for IB.
func (s sysfs) rdmaDevices() []netplan.RDMADevice {
	devs, err := os.ReadDir(s.sys("class/infiniband"))
	if err != nil {
		return nil
	}
	var out []netplan.RDMADevice
	for _, d := range devs {
		ports, err := os.ReadDir(s.sys("class/infiniband", d.Name(), "ports"))
		if err != nil {
			continue
		}
		for _, p := range ports {
			port, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			dev := netplan.RDMADevice{Name: d.Name(), Port: port}
			if b, err := os.ReadFile(s.sys("class/infiniband", d.Name(), "ports", p.Name(), "state")); err == nil {
				// "4: ACTIVE"
				s := strings.TrimSpace(string(b))
				if _, after, ok := strings.Cut(s, ":"); ok {
					s = strings.TrimSpace(after)
				}
				dev.State = s
			}
			if b, err := os.ReadFile(s.sys("class/infiniband", d.Name(), "ports", p.Name(), "link_layer")); err == nil {
				dev.LinkLayer = strings.TrimSpace(string(b))
			}
			if b, err := os.ReadFile(s.sys("class/infiniband", d.Name(), "ports", p.Name(), "rate")); err == nil {
				dev.RateMbps = parseRate(string(b))
			}
			dev.UVerbs = s.uverbsOf(d.Name())
			if b, err := os.ReadFile(s.sys("class/infiniband", d.Name(), "ports", p.Name(), "gid_attrs/ndevs/0")); err == nil {
				dev.Netdev = strings.TrimSpace(string(b))
			} else if nets, err := os.ReadDir(s.sys("class/infiniband", d.Name(), "device/net")); err == nil && len(nets) > 0 {
				dev.Netdev = nets[0].Name()
			}
			out = append(out, dev)
		}
	}
	return out
}

// parseRate reads sysfs's port rate, "100 Gb/sec (4X EDR)" or "25 Gb/sec (1X EDR)", in Mb/s.
func parseRate(s string) int {
	f := strings.Fields(s)
	if len(f) < 2 || !strings.HasPrefix(f[1], "Gb/s") {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 {
		return 0
	}
	return int(v * 1000)
}

var nvidiaDev = regexp.MustCompile(`^nvidia[0-9]+$`)

// gpus counts NVIDIA GPUs from the driver's procfs entries or device nodes; with none
// visible (the agent in a container without them, or the lab) the spec's count stands.
func (s sysfs) gpus(specGPUs int) (int, string) {
	if entries, err := os.ReadDir(s.proc("driver/nvidia/gpus")); err == nil && len(entries) > 0 {
		return len(entries), "detected"
	}
	if entries, err := os.ReadDir("/dev"); err == nil {
		n := 0
		for _, e := range entries {
			if nvidiaDev.MatchString(e.Name()) && e.Type()&os.ModeDevice != 0 {
				n++
			}
		}
		if n > 0 {
			return n, "detected"
		}
	}
	return specGPUs, "spec"
}

// uverbsOf is the HCA's verbs device: sysfs lists it as
// /sys/class/infiniband/HCA/device/infiniband_verbs/uverbsN, the name of the character
// device /dev/infiniband/uverbsN that libibverbs opens for it (rdma-core's open_cdev).
// The caller checks hca with validHCAName first: it comes from the plan, and goes into a
// path. Only an entry named uverbsN counts: it goes into a /dev path in turn.
func (s sysfs) uverbsOf(hca string) string {
	if validHCAName(hca) != nil {
		return ""
	}
	entries, err := os.ReadDir(s.sys("class/infiniband", hca, "device/infiniband_verbs"))
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if uverbsName.MatchString(e.Name()) {
			return e.Name()
		}
	}
	return ""
}

var (
	// hcaName is what the kernel names an RDMA device (mlx5_0, rocep1s0f1, roceP2p1s0f1,
	// ibp1s0.8001 after a rename): one path component of at most IB_DEVICE_NAME_MAX-1 bytes
	// (include/rdma/ib_verbs.h: 64 with its NUL).
	hcaName    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,63}$`)
	uverbsName = regexp.MustCompile(`^uverbs[0-9]{1,4}$`)
)

// validHCAName refuses an HCA name from the plan that is not a kernel device name: it
// would be joined into /sys/class/infiniband/NAME/..., where "../.." or a slash would read
// (and map the device of) whatever tree it leads to.
func validHCAName(name string) error {
	if !hcaName.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("%q is not an RDMA device name (letters, digits, _, - and ., at most 63, no path)", name)
	}
	return nil
}
