package activities

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// What a request may make the agent listen on and dial, whoever sent it: listeners only on
// this node's own addresses and on unprivileged ports its policy allows; dials only to
// addresses in a subnet this node has an address in (where the cluster's peers are), on
// unprivileged ports, never loopback or link-local. The workflow's plan picks among these;
// a request outside them is PolicyDenied.

// minUnprivilegedPort is the first port a non-root process could bind: below it, a
// listener or dial would impersonate or probe a system service.
const minUnprivilegedPort = 1024

// ownPrefixes are this node's addresses with their prefix length (loopback excluded).
func (n *hostNet) ownPrefixes() ([]netip.Prefix, error) {
	h, err := n.netlinkHandle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	links, err := n.links(h)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, l := range links {
		for _, p := range l.Addrs {
			if !p.Addr().IsLoopback() {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// checkListen allows a listener on one of this node's addresses, at port 0 (ephemeral) or
// an unprivileged port the policy allows.
func (n *hostNet) checkListen(addrs []netip.Addr, port int) error {
	if n.policy == nil {
		return nil
	}
	own, err := n.ownPrefixes()
	if err != nil {
		return err
	}
	return n.allowed(func(p policy.Policy) error {
		for _, addr := range addrs {
			if !ownsAddr(own, addr) {
				return fmt.Errorf("listen on %s: not an address of this node", addr)
			}
		}
		if port != 0 {
			if port < minUnprivilegedPort {
				return fmt.Errorf("listen on port %d: a privileged port", port)
			}
			return p.CheckPorts(port)
		}
		return nil
	})
}

func ownsAddr(own []netip.Prefix, addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range own {
		if p.Addr() == addr {
			return true
		}
	}
	return false
}

// checkDial allows dialling targets in this node's subnets on unprivileged ports.
func (n *hostNet) checkDial(targets ...netip.AddrPort) error {
	if n.policy == nil {
		return nil
	}
	own, err := n.ownPrefixes()
	if err != nil {
		return err
	}
	return n.allowed(func(policy.Policy) error {
		for _, t := range targets {
			if err := dialable(own, t); err != nil {
				return err
			}
		}
		return nil
	})
}

func dialable(own []netip.Prefix, t netip.AddrPort) error {
	switch {
	case !t.IsValid():
		return fmt.Errorf("dial %s: not an address and port", t)
	case t.Port() < minUnprivilegedPort:
		return fmt.Errorf("dial %s: a privileged port", t)
	}
	if err := peerAddr(own, t.Addr()); err != nil {
		return fmt.Errorf("dial %s: %w", t, err)
	}
	return nil
}

// peerAddr allows an address a peer of this node may have: in one of its subnets, not
// loopback, link-local, multicast or unspecified.
func peerAddr(own []netip.Prefix, addr netip.Addr) error {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsLoopback() || addr.IsLinkLocalUnicast() || addr.IsMulticast() || addr.IsUnspecified() {
		return errors.New("loopback, link-local, multicast and unspecified addresses are no peer's")
	}
	for _, p := range own {
		if p.Masked().Contains(addr) {
			return nil
		}
	}
	return errors.New("in no subnet this node has an address in")
}

// checkPeers allows the addresses a model server accepts requests from: peers' (peerAddr).
func (n *hostNet) checkPeers(addrs []netip.Addr) error {
	if n.policy == nil {
		return nil
	}
	own, err := n.ownPrefixes()
	if err != nil {
		return err
	}
	return n.allowed(func(policy.Policy) error {
		for _, a := range addrs {
			if err := peerAddr(own, a); err != nil {
				return fmt.Errorf("serve %s: %w", a, err)
			}
		}
		return nil
	})
}

// checkSource allows an address to dial from: one of this node's own.
func (n *hostNet) checkSource(addr netip.Addr) error {
	if n.policy == nil {
		return nil
	}
	own, err := n.ownPrefixes()
	if err != nil {
		return err
	}
	return n.allowed(func(policy.Policy) error {
		if !ownsAddr(own, addr) {
			return fmt.Errorf("dial from %s: not an address of this node", addr)
		}
		return nil
	})
}

// checkDialString is checkDial for "host:port".
func (n *hostNet) checkDialString(hostport string) error {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return n.allowed(func(policy.Policy) error { return fmt.Errorf("dial %q: not an IP address and port", hostport) })
	}
	return n.checkDial(ap)
}

// checkEndpoint allows an http:// URL whose host is an address in this node's subnets.
func (n *hostNet) checkEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" || u.User != nil {
		return n.allowed(func(policy.Policy) error { return fmt.Errorf("endpoint %q: not an http://ADDRESS:PORT URL", endpoint) })
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	if _, err := strconv.Atoi(port); err != nil {
		return n.allowed(func(policy.Policy) error { return fmt.Errorf("endpoint %q: bad port", endpoint) })
	}
	return n.checkDialString(net.JoinHostPort(u.Hostname(), port))
}

// checkOwnGCS allows a Ray GCS address (ADDRESS:PORT) that is one of this node's own
// addresses: where a call that carries Ray's token may go (the placement check and the
// serving watch run on the head, beside its GCS), so that no request can have the agent
// hand a secret to another host.
func (n *hostNet) checkOwnGCS(hostport string) error {
	if n.policy == nil {
		return nil
	}
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return n.allowed(func(policy.Policy) error { return fmt.Errorf("ray GCS %q: not an IP address and port", hostport) })
	}
	own, err := n.ownPrefixes()
	if err != nil {
		return err
	}
	if !ownsAddr(own, ap.Addr()) {
		return n.allowed(func(policy.Policy) error {
			return fmt.Errorf("ray GCS %s: Ray's token goes only to a GCS on this node's own addresses", hostport)
		})
	}
	return nil
}

// checkOwnEndpoint allows an http:// URL whose host is one of this node's own addresses
// and whose port is port: where a check that carries a secret (vLLM's API key) may go.
func (n *hostNet) checkOwnEndpoint(endpoint string, port int) error {
	if n.policy == nil {
		return nil
	}
	deny := func(why string) error {
		return n.allowed(func(policy.Policy) error { return fmt.Errorf("endpoint %q: %s", endpoint, why) })
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return deny("not an http://ADDRESS:PORT URL")
	}
	addr, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return deny("not an IP address")
	}
	if u.Port() != strconv.Itoa(port) {
		return deny(fmt.Sprintf("vLLM's API key goes only to the spec's vLLM port %d", port))
	}
	own, err := n.ownPrefixes()
	if err != nil {
		return err
	}
	if !ownsAddr(own, addr) {
		return deny("vLLM's API key goes only to vLLM on this node's own addresses")
	}
	return nil
}
