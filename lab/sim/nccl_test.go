package main

import (
	"reflect"
	"testing"
)

func TestNCCLSelect(t *testing.T) {
	nodeA := []netIf{{"lo", "127.0.0.1"}, {"eth0", "10.231.0.2"}, {"vethA", "192.168.77.12"}, {"ext0", "10.77.230.180"}, {"docker0", "172.17.0.1"}}
	nodeB := []netIf{{"lo", "127.0.0.1"}, {"ibp1", "192.168.77.13"}, {"enp1s0f1np1", "192.168.200.13"}}
	names := func(ifs []netIf) []string {
		var n []string
		for _, i := range ifs {
			n = append(n, i.Name)
		}
		return n
	}
	for _, tc := range []struct {
		env  string
		ifs  []netIf
		want []string
	}{
		{"=vethA", nodeA, []string{"vethA"}},
		{"=veth", nodeA, nil}, // exact name that does not exist: the measured bootstrap failure
		{"veth", nodeA, []string{"vethA"}},
		{"=ib", nodeB, nil},
		{"ib", nodeB, []string{"ibp1"}},
		{"enp1s0f1", nodeB, []string{"enp1s0f1np1"}}, // a prefix also matches longer names
		{"^=docker0,lo", nodeA, []string{"eth0", "vethA", "ext0"}},
		{"^eth,lo,docker", nodeA, []string{"vethA", "ext0"}},
		{"", nodeA, []string{"eth0", "vethA", "ext0"}},  // unset: several interfaces on the head
		{"e", nodeA, []string{"eth0", "vethA", "ext0"}}, // one character counts as unset
		{"", nodeB, []string{"ibp1"}},                   // unset prefers ib*
		{"=vethA,=ext0", nodeA, []string{"vethA"}},      // '=' applies to the whole list
		{"vethA,ext0", nodeA, []string{"vethA", "ext0"}},
	} {
		if got := names(ncclSelect(tc.env, tc.ifs)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("NCCL_SOCKET_IFNAME=%q: got %v, want %v", tc.env, got, tc.want)
		}
	}
}

func TestNCCLUnsetFallsBackDockerThenLoopback(t *testing.T) {
	onlyDocker := []netIf{{"lo", "127.0.0.1"}, {"docker0", "172.17.0.1"}, {"virbr0", "192.168.122.1"}}
	if got := ncclSelect("", onlyDocker); len(got) != 1 || got[0].Name != "docker0" {
		t.Errorf("unset with only docker0, lo, virbr0: got %v, want docker0", got)
	}
	if got := ncclSelect("", []netIf{{"lo", "127.0.0.1"}, {"virbr0", "192.168.122.1"}}); len(got) != 1 || got[0].Name != "lo" {
		t.Errorf("unset with only lo, virbr0: got %v, want lo", got)
	}
}
