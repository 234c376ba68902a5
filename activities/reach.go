package activities

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
)

// Reachability measures which subnet every node reaches: listeners on this node's
// candidate addresses (OpenProbeListeners, CloseProbeListeners) and dials to the other
// nodes' (DialPeers), from the node's own network namespace.
type Reachability struct {
	*nodeBase
	net       *hostNet
	listeners listenerSet
}

// maxListenTTL caps how long reachability listeners may live, whatever a request asks.
const maxListenTTL = 5 * time.Minute

// dialParallelism bounds concurrent dials from one node (16 nodes x a few subnets).
const dialParallelism = 32

// Bounds on what requests can make an agent hold or do, whoever sends them: open listener
// sets (one per reachability round or mp master check), listeners in one set (one per
// candidate address), and targets of one dial request (16 nodes x a few subnets).
const (
	maxListenerSets    = 16
	maxListenersPerSet = 32
	maxDialTargets     = 512
)

// listenerSet holds the open reachability listeners of one agent, by token.
type listenerSet struct {
	mu   sync.Mutex
	sets map[string]*openListeners
}

type openListeners struct {
	listeners []net.Listener
	timer     *time.Timer
	once      sync.Once
}

func (o *openListeners) close() {
	o.once.Do(func() {
		o.timer.Stop()
		for _, l := range o.listeners {
			_ = l.Close()
		}
	})
}

// openSets reports how many listener sets are open, for tests and leak checks.
func (r *Reachability) openSets() int {
	r.listeners.mu.Lock()
	defer r.listeners.mu.Unlock()
	return len(r.listeners.sets)
}

// OpenProbeListeners opens a TCP listener on an ephemeral port of each candidate address.
// They accept and close connections until CloseProbeListeners or the TTL, whichever first.
func (r *Reachability) OpenProbeListeners(ctx context.Context, req contract.ListenRequest) (contract.ListenResult, error) {
	if err := r.checkNode(req.Node); err != nil {
		return contract.ListenResult{}, err
	}
	ttl := req.TTL
	if ttl <= 0 || ttl > maxListenTTL {
		ttl = maxListenTTL
	}
	if len(req.Addrs) > maxListenersPerSet {
		return contract.ListenResult{}, r.deny("%d listeners asked for: at most %d per request", len(req.Addrs), maxListenersPerSet)
	}
	addrs := make([]netip.Addr, len(req.Addrs))
	for i, p := range req.Addrs {
		addrs[i] = p.Addr()
	}
	if err := r.net.checkListen(addrs, req.Port); err != nil {
		return contract.ListenResult{}, err
	}
	if n := r.openSets(); n >= maxListenerSets {
		return contract.ListenResult{}, r.deny("%d listener sets are open, the most an agent keeps (each closes within %s)", n, maxListenTTL)
	}
	var res contract.ListenResult
	var opened []net.Listener
	err := r.net.inNetNS(func() error {
		for _, addr := range req.Addrs {
			var l net.Listener
			var err error
			if req.Ephemeral && req.Port == 0 {
				l, err = listenBelowEphemeral(addr.Addr())
			} else {
				l, err = net.Listen("tcp", netip.AddrPortFrom(addr.Addr(), uint16(req.Port)).String())
			}
			if err != nil {
				return fmt.Errorf("listen on %s: %w", addr, err)
			}
			opened = append(opened, l)
			res.Targets = append(res.Targets, listenTarget(r.name, addr, l, false))
			if !req.Ephemeral {
				continue
			}
			// Port 0: the kernel's pick from the ephemeral range, as vLLM's ZMQ binds.
			e, err := net.Listen("tcp", netip.AddrPortFrom(addr.Addr(), 0).String())
			if err != nil {
				return fmt.Errorf("listen on %s: %w", addr, err)
			}
			opened = append(opened, e)
			res.Targets = append(res.Targets, listenTarget(r.name, addr, e, true))
		}
		return nil
	})
	if err != nil {
		for _, l := range opened {
			_ = l.Close()
		}
		return contract.ListenResult{}, err
	}
	token, err := newToken()
	if err != nil {
		return contract.ListenResult{}, err
	}
	set := &openListeners{listeners: opened}
	set.timer = time.AfterFunc(ttl, func() { r.closeListeners(token) })
	r.listeners.mu.Lock()
	if r.listeners.sets == nil {
		r.listeners.sets = map[string]*openListeners{}
	}
	r.listeners.sets[token] = set
	r.listeners.mu.Unlock()
	for _, l := range opened {
		go acceptAndClose(l)
	}
	res.Token = token
	return res, nil
}

func listenTarget(node string, addr netip.Prefix, l net.Listener, ephemeral bool) netplan.Target {
	ap := l.Addr().(*net.TCPAddr).AddrPort()
	return netplan.Target{Node: node, Addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), Subnet: addr.Masked(), Ephemeral: ephemeral}
}

// probePortsLow, probePortsHigh bound the ports a reachability listener below the
// ephemeral range takes: clear of the well-known service ports below (Ray's 6379 and
// 8265, vLLM's 8000) and of torch's and vLLM's master ports from 29500.
const probePortsLow, probePortsHigh = 20000, 29499

// listenBelowEphemeral listens on addr at a free port below this network namespace's
// ephemeral range (ip_local_port_range), so that a dial to it passes a firewall that drops
// the range; with no room below the range (a range reaching down to probePortsLow), any
// port the kernel picks.
func listenBelowEphemeral(addr netip.Addr) (net.Listener, error) {
	high := probePortsHigh
	if low := ephemeralLow(); low-1 < high {
		high = low - 1
	}
	if high < probePortsLow {
		return net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	}
	var err error
	for range 32 {
		port := probePortsLow + mrand.IntN(high-probePortsLow+1)
		var l net.Listener
		if l, err = net.Listen("tcp", netip.AddrPortFrom(addr, uint16(port)).String()); err == nil {
			return l, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, err
		}
	}
	return nil, err
}

// ephemeralLow is the low end of this network namespace's ip_local_port_range (read on the
// calling thread, which is in the node's namespace), or Linux's default.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return netplan.EphemeralLow
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return netplan.EphemeralLow
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return netplan.EphemeralLow
	}
	return n
}

func acceptAndClose(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}

func newToken() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("listener token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func (r *Reachability) closeListeners(token string) bool {
	r.listeners.mu.Lock()
	set, ok := r.listeners.sets[token]
	delete(r.listeners.sets, token)
	r.listeners.mu.Unlock()
	if ok {
		set.close()
	}
	return ok
}

// CloseProbeListeners closes the listeners of a token; an unknown token (already closed,
// expired, or lost with an agent restart) is not an error.
func (r *Reachability) CloseProbeListeners(ctx context.Context, req contract.CloseRequest) error {
	if err := r.checkNode(req.Node); err != nil {
		return err
	}
	r.closeListeners(req.Token)
	return nil
}

// DialPeers connects to every target from this node's own network namespace and measures
// the connect time. A failed dial is a result, not an error.
func (r *Reachability) DialPeers(ctx context.Context, req contract.DialRequest) ([]netplan.PairResult, error) {
	if err := r.checkNode(req.Node); err != nil {
		return nil, err
	}
	timeout := req.Timeout
	if timeout <= 0 || timeout > 10*time.Second {
		timeout = 2 * time.Second
	}
	if len(req.Targets) > maxDialTargets {
		return nil, r.deny("%d targets asked for: at most %d per request", len(req.Targets), maxDialTargets)
	}
	aps := make([]netip.AddrPort, len(req.Targets))
	for i, t := range req.Targets {
		aps[i] = t.Addr
	}
	if err := r.net.checkDial(aps...); err != nil {
		return nil, err
	}
	results := make([]netplan.PairResult, len(req.Targets))
	sem := make(chan struct{}, dialParallelism)
	var wg sync.WaitGroup
	var nsErr error
	var nsOnce sync.Once
	for i, t := range req.Targets {
		if t.Node == r.name {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("target %s is this node's own", t.Addr), contract.ErrBadRequest, nil)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			pair := netplan.PairResult{From: r.name, To: t.Node, Subnet: t.Subnet, Addr: t.Addr, Ephemeral: t.Ephemeral}
			err := r.net.inNetNS(func() error {
				start := time.Now()
				d := net.Dialer{Timeout: timeout}
				c, err := d.DialContext(ctx, "tcp", t.Addr.String())
				if err != nil {
					pair.Error = dialError(err)
					return nil
				}
				pair.RTT = time.Since(start)
				pair.OK = true
				return c.Close()
			})
			if err != nil {
				nsOnce.Do(func() { nsErr = err })
			}
			results[i] = pair
		}()
	}
	wg.Wait()
	if nsErr != nil {
		return nil, nsErr
	}
	return results, nil
}

// dialError keeps the part of a dial error an operator acts on: "connection refused",
// "network is unreachable", "i/o timeout".
func dialError(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		inner := op.Err
		var sys interface{ Unwrap() error }
		if errors.As(inner, &sys) && sys.Unwrap() != nil {
			return sys.Unwrap().Error()
		}
		return inner.Error()
	}
	return err.Error()
}
