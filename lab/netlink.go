package lab

import (
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// netlinkHandle opens netlink in the network namespace of process pid (needs root).
func netlinkHandle(pid int) (*netlink.Handle, error) {
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}
