// Command nodeinit is PID 1 of a lab node container. It gives the node a fresh boot ID
// every time the container starts (so `docker restart node-b` is a reboot), then runs the
// real tpdeploy worker and restarts it whenever it exits — killing the worker is an agent
// crash (Ray and vLLM keep running, as under systemd on a real node), not a reboot.
package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "nodeinit:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: nodeinit PROGRAM [ARGS...]")
	}
	bootFile := os.Getenv("TPDEPLOY_BOOT_ID_FILE")
	if bootFile == "" {
		bootFile = "/run/tpdeploy/boot_id"
	}
	if err := os.MkdirAll(filepath.Dir(bootFile), 0o755); err != nil {
		return err
	}
	id := newUUID()
	if err := os.WriteFile(bootFile, []byte(id+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("nodeinit: boot %s\n", id)
	if os.Getenv("TPDEPLOY_LAB_NO_DEFAULT_ROUTE") != "" {
		// Docker gives a container a default route even on internal networks; a node
		// with only the fast link has none (the seed's node B), so unroutable addresses
		// fail with "Network is unreachable", not a timeout.
		if err := dropDefaultRoute(); err != nil {
			return fmt.Errorf("drop default route: %w", err)
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	for {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
			}
			return nil
		case err := <-exited:
			fmt.Printf("nodeinit: %s exited (%v); restarting in 1s\n", args[0], err)
		}
		select {
		case <-sigs:
			return nil
		case <-time.After(time.Second):
		}
	}
}

func dropDefaultRoute() error {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask) {
			if err := netlink.RouteDel(&r); err != nil {
				return err
			}
		}
	}
	return nil
}

func isZeroMask(m []byte) bool {
	for _, b := range m {
		if b != 0 {
			return false
		}
	}
	return true
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
