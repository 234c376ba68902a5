package activities

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/netplan"
)

func TestAddressHolds(t *testing.T) {
	addr := netip.MustParseAddr("10.200.3.13")
	link := func(name string, up bool, addrs ...string) netplan.Link {
		l := netplan.Link{Name: name, Up: up, OperState: "down"}
		if up {
			l.OperState = "up"
		}
		for _, a := range addrs {
			l.Addrs = append(l.Addrs, netip.MustParsePrefix(a))
		}
		return l
	}
	for _, tc := range []struct {
		name   string
		links  []netplan.Link
		holds  bool
		detail string
	}{
		{"unchanged", []netplan.Link{link("eth0", true, "10.231.3.11/24"), link("eth1", true, "10.200.3.13/24")}, true, ""},
		{"renamed after the link came back", []netplan.Link{link("eth3", true, "10.200.3.13/24")}, false, "10.200.3.13 is now on eth3, not on the planned eth1"},
		{"renumbered", []netplan.Link{link("eth1", true, "10.200.3.99/24")}, false, "eth1 no longer holds 10.200.3.13"},
		{"link down", []netplan.Link{link("eth1", false, "10.200.3.13/24")}, false, "eth1 holds 10.200.3.13 but is down (down)"},
		{"gone", []netplan.Link{link("eth0", true, "10.231.3.11/24")}, false, "eth1 is gone and no interface holds 10.200.3.13"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := addressHolds(tc.links, "eth1", addr)
			if got.Holds != tc.holds || !strings.Contains(got.Detail, tc.detail) || (tc.holds && got.Detail != "") {
				t.Errorf("addressHolds = %+v, want holds=%v detail %q", got, tc.holds, tc.detail)
			}
		})
	}
}
