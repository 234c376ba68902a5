package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/netplan"
	"github.com/tpdeploy/tpdeploy/policy"
)

// probeRetries bounds retries of netlink dumps the kernel interrupted (links changing
// while we read them).
const probeRetries = 5

// ProbeNode describes the node: links and addresses (netlink), the default route Ray's
// auto-detection would follow, link speeds and RDMA devices (sysfs), boot ID, hostname,
// GPU count.
func (a *Node) ProbeNode(ctx context.Context, req contract.ProbeRequest) (netplan.NodeProbe, error) {
	if err := a.checkNode(req.Node); err != nil {
		return netplan.NodeProbe{}, err
	}
	p := netplan.NodeProbe{Node: a.Name}
	var err error
	if p.Hostname, err = os.Hostname(); err != nil {
		return p, fmt.Errorf("hostname: %w", err)
	}
	if p.BootID, err = a.bootID(); err != nil {
		return p, err
	}
	h, err := a.netlinkHandle()
	if err != nil {
		return p, err
	}
	defer h.Close()
	if p.Links, err = a.links(h); err != nil {
		return p, err
	}
	p.DefaultRoute = defaultRoute(h, p.Links)
	p.RDMA = a.rdmaDevices()
	p.GPUs, p.GPUSource = a.gpus(req.SpecGPUs)
	if err := a.allowed(func(pol policy.Policy) error { return pol.CheckDockerHost(cmp.Or(req.DockerHost, DefaultDockerHost)) }); err != nil {
		p.Docker = netplan.DockerInfo{Error: err.Error()}
	} else {
		p.Docker = a.engines.engineInfo(ctx, req.DockerHost)
	}
	return p, nil
}

func (a *Node) sys(parts ...string) string {
	root := a.SysRoot
	if root == "" {
		root = "/sys"
	}
	return filepath.Join(append([]string{root}, parts...)...)
}

func (a *Node) proc(parts ...string) string {
	root := a.ProcRoot
	if root == "" {
		root = "/proc"
	}
	return filepath.Join(append([]string{root}, parts...)...)
}

func (a *Node) bootID() (string, error) {
	file := a.BootIDFile
	if file == "" {
		file = a.proc("sys/kernel/random/boot_id")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (a *Node) netlinkHandle() (*netlink.Handle, error) {
	if a.NetNS == "" {
		h, err := netlink.NewHandle()
		if err != nil {
			return nil, fmt.Errorf("netlink: %w", err)
		}
		return h, nil
	}
	ns, err := netns.GetFromName(a.NetNS)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", a.NetNS, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in netns %s: %w", a.NetNS, err)
	}
	return h, nil
}

// retryDump repeats a netlink dump the kernel interrupted; a consistent read is worth a
// few retries, and an inconsistent one is never returned.
func retryDump[T any](what string, dump func() (T, error)) (T, error) {
	var v T
	var err error
	for range probeRetries {
		v, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return v, fmt.Errorf("netlink %s: %w", what, err)
	}
	return v, nil
}

func (a *Node) links(h *netlink.Handle) ([]netplan.Link, error) {
	links, err := retryDump("link list", h.LinkList)
	if err != nil {
		return nil, err
	}
	out := make([]netplan.Link, 0, len(links))
	for _, l := range links {
		attrs := l.Attrs()
		addrs, err := retryDump("addr list "+attrs.Name, func() ([]netlink.Addr, error) {
			return h.AddrList(l, netlink.FAMILY_ALL)
		})
		if err != nil {
			return nil, err
		}
		link := netplan.Link{
			Name:      attrs.Name,
			Kind:      l.Type(),
			MTU:       attrs.MTU,
			OperState: attrs.OperState.String(),
			Loopback:  attrs.Flags&net.FlagLoopback != 0,
			MAC:       attrs.HardwareAddr.String(),
			SpeedMbps: a.linkSpeed(attrs.Name),
		}
		// "unknown" is what loopback and many virtual links report while passing traffic.
		link.Up = attrs.Flags&net.FlagUp != 0 &&
			(attrs.OperState == netlink.OperUp || attrs.OperState == netlink.OperUnknown)
		for _, ad := range addrs {
			if ad.IPNet == nil {
				continue
			}
			ip, ok := netip.AddrFromSlice(ad.IP)
			if !ok {
				continue
			}
			ones, _ := ad.Mask.Size()
			link.Addrs = append(link.Addrs, netip.PrefixFrom(ip.Unmap(), ones))
		}
		out = append(out, link)
	}
	slices.SortFunc(out, func(x, y netplan.Link) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// defaultRoute asks the kernel which route a packet to 8.8.8.8 would take, as Ray's
// head does with a UDP connect; no packet is sent either way.
func defaultRoute(h *netlink.Handle, links []netplan.Link) *netplan.DefaultRoute {
	routes, err := h.RouteGet(net.IPv4(8, 8, 8, 8))
	if err != nil || len(routes) == 0 {
		return nil
	}
	r := routes[0]
	dr := &netplan.DefaultRoute{}
	if src, ok := netip.AddrFromSlice(r.Src); ok {
		dr.Source = src.Unmap()
	}
	if gw, ok := netip.AddrFromSlice(r.Gw); ok {
		dr.Gateway = gw.Unmap()
	}
	if l, err := h.LinkByIndex(r.LinkIndex); err == nil {
		dr.Interface = l.Attrs().Name
	}
	// The source can be empty when the route has no preferred source; Ray would get the
	// link's first address from the kernel's choice.
	if !dr.Source.IsValid() {
		for _, l := range links {
			if l.Name == dr.Interface {
				for _, p := range l.Addrs {
					if p.Addr().Is4() {
						dr.Source = p.Addr()
						break
					}
				}
			}
		}
	}
	return dr
}

// linkSpeed reads /sys/class/net/NAME/speed; virtual links report -1 or fail the read.
func (a *Node) linkSpeed(name string) int {
	b, err := os.ReadFile(a.sys("class/net", name, "speed"))
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
func (a *Node) rdmaDevices() []netplan.RDMADevice {
	devs, err := os.ReadDir(a.sys("class/infiniband"))
	if err != nil {
		return nil
	}
	var out []netplan.RDMADevice
	for _, d := range devs {
		ports, err := os.ReadDir(a.sys("class/infiniband", d.Name(), "ports"))
		if err != nil {
			continue
		}
		for _, p := range ports {
			port, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			dev := netplan.RDMADevice{Name: d.Name(), Port: port}
			if b, err := os.ReadFile(a.sys("class/infiniband", d.Name(), "ports", p.Name(), "state")); err == nil {
				// "4: ACTIVE"
				s := strings.TrimSpace(string(b))
				if _, after, ok := strings.Cut(s, ":"); ok {
					s = strings.TrimSpace(after)
				}
				dev.State = s
			}
			if b, err := os.ReadFile(a.sys("class/infiniband", d.Name(), "ports", p.Name(), "link_layer")); err == nil {
				dev.LinkLayer = strings.TrimSpace(string(b))
			}
			if b, err := os.ReadFile(a.sys("class/infiniband", d.Name(), "ports", p.Name(), "rate")); err == nil {
				dev.RateMbps = parseRate(string(b))
			}
			dev.UVerbs = a.uverbsOf(d.Name())
			if b, err := os.ReadFile(a.sys("class/infiniband", d.Name(), "ports", p.Name(), "gid_attrs/ndevs/0")); err == nil {
				dev.Netdev = strings.TrimSpace(string(b))
			} else if nets, err := os.ReadDir(a.sys("class/infiniband", d.Name(), "device/net")); err == nil && len(nets) > 0 {
				dev.Netdev = nets[0].Name()
			}
			out = append(out, dev)
		}
	}
	return out
}

// uverbsOf is the HCA's verbs device: sysfs lists it as
// /sys/class/infiniband/HCA/device/infiniband_verbs/uverbsN, the name of the character
// device /dev/infiniband/uverbsN that libibverbs opens for it (rdma-core's open_cdev).
func (a *Node) uverbsOf(hca string) string {
	entries, err := os.ReadDir(a.sys("class/infiniband", hca, "device/infiniband_verbs"))
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "uverbs") {
			return e.Name()
		}
	}
	return ""
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
func (a *Node) gpus(specGPUs int) (int, string) {
	if entries, err := os.ReadDir(a.proc("driver/nvidia/gpus")); err == nil && len(entries) > 0 {
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
