package activities

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// Probe describes the node (ProbeNode), and answers the supervisor's looks at it
// (AddressHolds, BootID): netlink, sysfs and procfs, and whether its Docker engine
// answers.
type Probe struct {
	*nodeBase
	net    *hostNet
	sys    sysfs
	docker *docker
}

// ProbeNode describes the node: links and addresses (netlink), the default route Ray's
// auto-detection would follow, link speeds and RDMA devices (sysfs), boot ID, hostname,
// GPU count.
func (pr *Probe) ProbeNode(ctx context.Context, req contract.ProbeRequest) (netplan.NodeProbe, error) {
	if err := pr.checkNode(req.Node); err != nil {
		return netplan.NodeProbe{}, err
	}
	p := netplan.NodeProbe{Node: pr.name}
	var err error
	if p.Hostname, err = os.Hostname(); err != nil {
		return p, fmt.Errorf("hostname: %w", err)
	}
	if p.BootID, err = pr.sys.bootID(); err != nil {
		return p, err
	}
	h, err := pr.net.netlinkHandle()
	if err != nil {
		return p, err
	}
	defer h.Close()
	if p.Links, err = pr.net.links(h); err != nil {
		return p, err
	}
	p.DefaultRoute = defaultRoute(h, p.Links)
	p.RDMA = pr.sys.rdmaDevices()
	p.GPUs, p.GPUSource = pr.sys.gpus(req.SpecGPUs)
	mem := pr.sys.memory(pr.policy)
	if req.UnifiedMemory != nil {
		mem.Unified, mem.UnifiedSource = *req.UnifiedMemory, "spec"
	}
	p.Memory = &mem
	if err := pr.allowed(func(pol policy.Policy) error { return pol.CheckDockerHost(cmp.Or(req.DockerHost, DefaultDockerHost)) }); err != nil {
		p.Docker = netplan.DockerInfo{Error: err.Error()}
	} else {
		p.Docker = pr.docker.engines.engineInfo(ctx, req.DockerHost)
	}
	return p, nil
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

// AddressHolds says whether the node's planned address is still on its planned
// interface, up: a link that flapped can come back renamed or renumbered (a hot-plugged
// NIC, a DHCP lease, a recreated bond), and then the plan's interface names and addresses
// (NCCL_SOCKET_IFNAME, --node-ip-address) are wrong although the node never rebooted.
func (pr *Probe) AddressHolds(ctx context.Context, req contract.AddressRequest) (contract.AddressCheck, error) {
	if err := pr.checkNode(req.Node); err != nil {
		return contract.AddressCheck{}, err
	}
	h, err := pr.net.netlinkHandle()
	if err != nil {
		return contract.AddressCheck{}, err
	}
	defer h.Close()
	links, err := pr.net.links(h)
	if err != nil {
		return contract.AddressCheck{}, err
	}
	return addressHolds(links, req.Interface, req.Address), nil
}

// addressHolds decides AddressHolds from the node's links.
func addressHolds(links []netplan.Link, iface string, addr netip.Addr) contract.AddressCheck {
	var now []string
	for _, l := range links {
		for _, p := range l.Addrs {
			if p.Addr() == addr {
				if l.Name == iface {
					if !l.Up {
						return contract.AddressCheck{Detail: fmt.Sprintf("%s holds %s but is down (%s)", iface, addr, l.OperState)}
					}
					return contract.AddressCheck{Holds: true}
				}
				now = append(now, l.Name)
			}
		}
	}
	if len(now) > 0 {
		return contract.AddressCheck{Detail: fmt.Sprintf("%s is now on %s, not on the planned %s", addr, strings.Join(now, ", "), iface)}
	}
	for _, l := range links {
		if l.Name == iface {
			return contract.AddressCheck{Detail: fmt.Sprintf("%s no longer holds %s", iface, addr)}
		}
	}
	return contract.AddressCheck{Detail: fmt.Sprintf("%s is gone and no interface holds %s", iface, addr)}
}

// BootID reports the node's boot ID; the supervisor compares it to notice reboots.
func (pr *Probe) BootID(ctx context.Context, req contract.BootIDRequest) (string, error) {
	if err := pr.checkNode(req.Node); err != nil {
		return "", err
	}
	return pr.sys.bootID()
}
