package activities

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
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

// Ray's token goes only to a GCS on the node's own addresses: a request naming another
// host's GCS is refused before the secret is read.
func TestRayTokenOnlyToThisNodesGCS(t *testing.T) {
	pol := policy.Default()
	a := New(Config{Name: "node-a", Policy: &pol})
	t.Setenv("RAY_AUTH_TOKEN", "tok-secret")
	ref := &spec.SecretRef{Env: "RAY_AUTH_TOKEN"}
	_, err := a.Ray.placementToken(contract.PlacementRequest{Node: "node-a", RayToken: ref, Plan: netplan.Plan{RayAddress: "192.0.2.1:6379"}})
	if app := appError(t, err); app.Type() != contract.ErrPolicyDenied || strings.Contains(app.Error(), "tok-secret") {
		t.Fatalf("another host's GCS: %v", err)
	}
	own := ""
	addrs, _ := net.InterfaceAddrs()
	for _, ad := range addrs {
		if ip, ok := ad.(*net.IPNet); ok && !ip.IP.IsLoopback() && ip.IP.To4() != nil {
			own = ip.IP.String()
			break
		}
	}
	if own == "" {
		t.Fatal("this host has no IPv4 address but loopback")
	}
	got, err := a.Ray.placementToken(contract.PlacementRequest{Node: "node-a", RayToken: ref, Plan: netplan.Plan{RayAddress: own + ":6379"}})
	if err != nil || got != "tok-secret" {
		t.Fatalf("this node's GCS: %q %v", got, err)
	}
	if got, err := a.Ray.placementToken(contract.PlacementRequest{Node: "node-a", Plan: netplan.Plan{RayAddress: "192.0.2.1:6379"}}); err != nil || got != "" {
		t.Fatalf("no token: %q %v", got, err)
	}
}
