package lab

import (
	"context"
	"errors"
	"fmt"

	"github.com/moby/moby/client"
	"github.com/vishvananda/netlink"
)

// ShapeBurst is the token bucket of a shaped link: bytes sent at the interface's own speed
// before the rate holds. It is larger than a segment the veth hands over with GSO (64 KiB)
// and than the fast network's MTU 9000, so no packet is ever larger than the bucket.
const ShapeBurst = 256 << 10

// ShapeLatency bounds the queue of a shaped link: the bytes tbf holds waiting for tokens
// (its limit) are what the rate sends in this long, as `tc qdisc add ... tbf latency`.
const ShapeLatency = 0.05 // seconds

// ShapeLinks shapes every node's link on a lab network ("fast", "link-ab") to rate bytes a
// second in each direction, as a NIC of that speed would: a tbf qdisc at the root of the
// node's interface in its network namespace (what the node sends) and one at the root of
// that veth's peer on the host (what the node receives, the bridge's egress toward it).
// Both are made with netlink from this process (root on the Docker host), so node
// containers need no capability for it. The returned func removes the qdiscs (a node's
// host-side veth goes with its container anyway).
func (l *Lab) ShapeLinks(ctx context.Context, network string, rate uint64) (func() error, error) {
	if rate == 0 {
		return nil, errors.New("lab: shape: rate 0")
	}
	var undo []func() error
	unshape := func() error {
		var errs []error
		for _, u := range undo {
			errs = append(errs, u())
		}
		return errors.Join(errs...)
	}
	for _, n := range l.Nodes {
		if !n.Addr(network).IsValid() {
			continue
		}
		name, err := l.Iface(ctx, n.Name, network)
		if err != nil {
			_ = unshape()
			return nil, err
		}
		info, err := l.eng.ContainerInspect(ctx, n.Container, client.ContainerInspectOptions{})
		if err != nil {
			_ = unshape()
			return nil, fmt.Errorf("lab: shape %s: %w", n.Name, err)
		}
		in, err := netlinkHandle(info.Container.State.Pid)
		if err != nil {
			_ = unshape()
			return nil, fmt.Errorf("lab: shape %s: netns: %w", n.Name, err)
		}
		link, err := in.LinkByName(name)
		if err != nil {
			in.Close()
			_ = unshape()
			return nil, fmt.Errorf("lab: shape %s %s: %w", n.Name, name, err)
		}
		// A veth's IFLA_LINK is its peer's index, here the host's end on the bridge.
		peer := link.Attrs().ParentIndex
		if peer == 0 {
			in.Close()
			_ = unshape()
			return nil, fmt.Errorf("lab: shape %s: %s is not a veth with a peer", n.Name, name)
		}
		host, err := netlink.NewHandle()
		if err != nil {
			in.Close()
			_ = unshape()
			return nil, err
		}
		for _, side := range []struct {
			h     *netlink.Handle
			index int
			what  string
		}{{in, link.Attrs().Index, n.Name + " " + name}, {host, peer, fmt.Sprintf("host veth %d of %s", peer, n.Name)}} {
			q := tbf(side.index, rate)
			if err := side.h.QdiscReplace(q); err != nil {
				in.Close()
				host.Close()
				_ = unshape()
				return nil, fmt.Errorf("lab: shape %s: tbf: %w", side.what, err)
			}
			h := side.h
			undo = append(undo, func() error {
				if err := h.QdiscDel(q); err != nil && !errors.Is(err, netlink.ErrNotImplemented) {
					// A container already removed took its interfaces with it.
					if _, lerr := h.LinkByIndex(q.LinkIndex); lerr != nil {
						return nil
					}
					return fmt.Errorf("lab: unshape %s: %w", side.what, err)
				}
				return nil
			})
		}
		undo = append(undo, func() error { in.Close(); host.Close(); return nil })
	}
	if len(undo) == 0 {
		return nil, fmt.Errorf("lab: no node on network %s", network)
	}
	return unshape, nil
}

// tbf is the token bucket filter `tc qdisc replace dev DEV root tbf rate RATE burst
// ShapeBurst latency ShapeLatency` makes (iproute2's tc/q_tbf.c: buffer is the burst's
// transmit time at the rate, limit the bytes the rate sends in the latency plus the burst).
func tbf(index int, rate uint64) *netlink.Tbf {
	return &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       rate,
		Buffer:     netlink.Xmittime(rate, ShapeBurst),
		Limit:      uint32(float64(rate)*ShapeLatency) + ShapeBurst,
	}
}
