package lab

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"time"

	"github.com/moby/moby/client"
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

// DialFrom dials addr (TCP, within timeout) from the network namespace of the lab
// container named container, as a process on that node would.
func (l *Lab) DialFrom(ctx context.Context, container, addr string, timeout time.Duration) error {
	info, err := l.eng.ContainerInspect(ctx, container, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("inspect %s: %w", container, err)
	}
	pid := info.Container.State.Pid
	errc := make(chan error, 1)
	go func() {
		// The thread enters the container's namespace and never leaves it: it ends with
		// the goroutine (LockOSThread without Unlock), so no other goroutine runs there.
		runtime.LockOSThread()
		ns, err := netns.GetFromPid(pid)
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err == nil {
			c.Close()
		}
		errc <- err
	}()
	return <-errc
}
