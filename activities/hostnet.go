package activities

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/raygcs"
)

// hostNet is the node's network as the agent sees it: netlink in the node's network
// namespace (its links and addresses), sockets opened there, and the guards on what a
// request may make it listen on and dial (netguard.go).
type hostNet struct {
	*nodeBase
	// netns, when set, is the named network namespace the node's network activities run
	// in (tests give one process several nodes); empty on real nodes.
	netns string
	sys   sysfs // link speeds
}

// inNetNS runs fn with the calling goroutine in the node's network namespace. Sockets
// created inside stay in that namespace after fn returns.
func (n *hostNet) inNetNS(fn func() error) error {
	if n.netns == "" {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(n.netns)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns %s: %w", n.netns, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", n.netns, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread is stuck in the wrong namespace: keep it locked so the runtime
		// discards it when this goroutine ends.
		return fmt.Errorf("leave netns %s: %w", n.netns, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// probeRetries bounds retries of netlink dumps the kernel interrupted (links changing
// while we read them).
const probeRetries = 5

func (n *hostNet) netlinkHandle() (*netlink.Handle, error) {
	if n.netns == "" {
		h, err := netlink.NewHandle()
		if err != nil {
			return nil, fmt.Errorf("netlink: %w", err)
		}
		return h, nil
	}
	ns, err := netns.GetFromName(n.netns)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", n.netns, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in netns %s: %w", n.netns, err)
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

func (n *hostNet) links(h *netlink.Handle) ([]netplan.Link, error) {
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
			SpeedMbps: n.sys.linkSpeed(attrs.Name),
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

// errNoGCSAddress is a request without the head's GCS address.
var errNoGCSAddress = errors.New("no Ray GCS address in the plan")

// registeredNodes reads Ray's nodes from the GCS at the plan's Ray address, from the
// agent's own network namespace, sending Ray's token (secrets.ray_token resolved on this
// node; "" for none).
func (n *hostNet) registeredNodes(ctx context.Context, gcsAddr, token string) ([]contract.RegisteredNode, error) {
	if gcsAddr == "" {
		return nil, errNoGCSAddress
	}
	if token != "" {
		if err := n.checkOwnGCS(gcsAddr); err != nil {
			return nil, err
		}
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		var c net.Conn
		err := n.inNetNS(func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, "tcp", addr)
			return err
		})
		return c, err
	}
	return raygcs.Nodes(ctx, gcsAddr, token, dial)
}

// signedAddress refuses a planned address that is not one of this node's own: the address
// a container registers under (Ray's --node-ip-address) is measured, not signed.
func (n *hostNet) signedAddress(addr netip.Addr) error {
	if !n.enforced() {
		return nil
	}
	own, err := n.ownPrefixes()
	if err != nil {
		return err
	}
	if !ownsAddr(own, addr) {
		return n.deny("signed intent: the planned address %s is not an address of this node", addr)
	}
	return nil
}
