package netplan

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

func TestCheckEphemeralNamesEveryBlockedPair(t *testing.T) {
	a, b, c := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.1.2")
	plan := Plan{Subnet: netip.MustParsePrefix("10.0.0.0/24"), Nodes: []NodePlan{{Name: "node-a", Address: a}, {Name: "node-b", Address: b}}}
	dial := func(from, to string, addr netip.Addr, port uint16, ok bool) PairResult {
		r := PairResult{From: from, To: to, Addr: netip.AddrPortFrom(addr, port), OK: ok, Ephemeral: true}
		if !ok {
			r.Error = "i/o timeout"
		}
		return r
	}
	if err := CheckEphemeral(plan, []PairResult{dial("node-a", "node-b", b, 40001, true), dial("node-b", "node-a", a, 40002, true)}); err != nil {
		t.Fatalf("all pass: %v", err)
	}
	if err := CheckEphemeral(plan, nil); err != nil {
		t.Fatalf("nothing measured (older agents): %v", err)
	}
	results := []PairResult{
		dial("node-a", "node-b", b, 40001, false),
		dial("node-b", "node-a", a, 40002, true),
		dial("node-a", "node-b", c, 40003, false),                                                // another subnet's address: not the plan's
		{From: "node-a", To: "node-b", Addr: netip.AddrPortFrom(b, 20001), Error: "i/o timeout"}, // not an ephemeral dial
	}
	err := CheckEphemeral(plan, results)
	var pe *Error
	if !errors.As(err, &pe) || pe.Type != failure.EphemeralPortsBlocked {
		t.Fatalf("%v, want %s", err, failure.EphemeralPortsBlocked)
	}
	for _, w := range []string{"node-a → node-b: tcp port 40001 on 10.0.0.2 blocked (i/o timeout)", "32768–60999", "ZMQ"} {
		if !strings.Contains(pe.Msg, w) {
			t.Errorf("message lacks %q: %s", w, pe.Msg)
		}
	}
	for _, not := range []string{"node-b → node-a", "10.0.1.2", "20001"} {
		if strings.Contains(pe.Msg, not) {
			t.Errorf("message names %q: %s", not, pe.Msg)
		}
	}
}
