package main

import (
	"net"
	"strings"
)

// netIf is one interface with the IPv4 address a socket transport would use.
type netIf struct {
	Name string
	Addr string
}

func (i netIf) String() string { return i.Name + ":" + i.Addr + "<0>" }

// localInterfaces lists the running interfaces of this network namespace with their
// first IPv4 address, in the kernel's order (getifaddrs order, which NCCL walks). NCCL
// 2.28.3+ considers only interfaces with IFF_RUNNING (up and with carrier; src/misc/socket.cc).
func localInterfaces() []netIf {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []netIf
	for _, i := range ifs {
		if i.Flags&net.FlagRunning == 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				out = append(out, netIf{Name: i.Name, Addr: n.IP.String()})
				break
			}
		}
	}
	return out
}

// ncclSelect applies NCCL_SOCKET_IFNAME's rules to ifs: a comma list of name prefixes, `^`
// to exclude, `=` for exact names; a value of one character or less counts as unset.
// Unset, NCCL 2.28.3+ tries ib*, then anything but docker*, lo and virbr*, then docker*,
// then lo, then virbr* (ncclFindInterfaces; NCCL_COMM_ID's subnet step is not modelled).
func ncclSelect(env string, ifs []netIf) []netIf {
	if len(env) <= 1 {
		for _, order := range []string{"ib", "^docker,lo,virbr", "docker", "lo", "virbr"} {
			if got := filterIfs(ifs, order); len(got) > 0 {
				return got
			}
		}
		return nil
	}
	return filterIfs(ifs, env)
}

func filterIfs(ifs []netIf, spec string) []netIf {
	exclude := strings.HasPrefix(spec, "^")
	spec = strings.TrimPrefix(spec, "^")
	exact := strings.HasPrefix(spec, "=")
	spec = strings.TrimPrefix(spec, "=")
	var names []string
	for _, n := range strings.Split(spec, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	matches := func(name string) bool {
		for _, n := range names {
			if (exact && name == n) || (!exact && strings.HasPrefix(name, n)) {
				return true
			}
		}
		return false
	}
	var out []netIf
	for _, i := range ifs {
		if matches(i.Name) != exclude {
			out = append(out, i)
		}
	}
	return out
}
