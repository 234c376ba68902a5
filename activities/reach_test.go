package activities

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// With Ephemeral, each address gets a listener below this namespace's ephemeral range and
// one the kernel picked in it (as vLLM's ZMQ sockets bind), marked as such.
func TestProbeListenersBelowAndInTheEphemeralRange(t *testing.T) {
	a := New(Config{Name: "node-a", unrestricted: true})
	ctx := context.Background()
	res, err := a.Reachability.OpenProbeListeners(ctx, contract.ListenRequest{Node: "node-a", Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}, TTL: time.Minute, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Reachability.CloseProbeListeners(ctx, contract.CloseRequest{Node: "node-a", Token: res.Token})
	if len(res.Targets) != 2 || res.Targets[0].Ephemeral || !res.Targets[1].Ephemeral {
		t.Fatalf("targets %+v, want one below the range, then one in it", res.Targets)
	}
	low := ephemeralLow()
	if p := int(res.Targets[0].Addr.Port()); low > probePortsLow && (p < probePortsLow || p >= low) {
		t.Errorf("the listener below the range is on %d (range from %d)", p, low)
	}
	if p := int(res.Targets[1].Addr.Port()); p < low {
		t.Errorf("the ephemeral listener is on %d, below the range from %d", p, low)
	}
	pairs, err := New(Config{Name: "node-b", unrestricted: true}).Reachability.DialPeers(ctx, contract.DialRequest{Node: "node-b", Targets: res.Targets, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) != 2 || !pairs[0].OK || !pairs[1].OK || pairs[0].Ephemeral || !pairs[1].Ephemeral {
		t.Fatalf("dials %+v", pairs)
	}
	// Without it, one listener per address, as before.
	plain, err := a.Reachability.OpenProbeListeners(ctx, contract.ListenRequest{Node: "node-a", Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Reachability.CloseProbeListeners(ctx, contract.CloseRequest{Node: "node-a", Token: plain.Token})
	if len(plain.Targets) != 1 || plain.Targets[0].Ephemeral {
		t.Fatalf("targets %+v", plain.Targets)
	}
}
