//go:build integration

package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/vishvananda/netns"
)

// inNetns runs f on a thread in the network namespace of process pid: a socket made there
// stays in that namespace after the thread goes back.
func inNetns(pid int, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return err
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		return err
	}
	defer func() { _ = netns.Set(orig) }()
	return f()
}

// sendRate sends size bytes over TCP from node from's network namespace to node to's
// address on network and returns the rate the receiver saw, in bytes a second.
func sendRate(t *testing.T, l *Lab, pids map[string]int, from, to, network string, size int64) float64 {
	t.Helper()
	dst, _ := l.Node(to)
	var ln net.Listener
	if err := inNetns(pids[to], func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(dst.Addr(network).String(), "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan float64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- 0
			return
		}
		defer c.Close()
		start := time.Now()
		n, _ := io.Copy(io.Discard, c)
		got <- float64(n) / time.Since(start).Seconds()
	}()
	var c net.Conn
	if err := inNetns(pids[from], func() (err error) {
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(c, zeros{}, size); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case r := <-got:
		return r
	case <-time.After(2 * time.Minute):
		t.Fatal("receiver did not finish")
	}
	return 0
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestShapeLinksEnforcesTheRate: on a two-node lab the fast network, unshaped, carries a
// copy far faster than 20 MB/s (veths on one host); shaped to 20 MB/s with ShapeLinks a
// copy in each direction arrives at 20 MB/s ± 25 %, and once unshaped it is fast again.
func TestShapeLinksEnforcesTheRate(t *testing.T) {
	eng, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	prefix := "tpd-shape-" + hex.EncodeToString(b)
	ctx := context.Background()
	l, err := Up(ctx, eng, "", Config{Prefix: prefix, Nodes: 2})
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if err := Down(context.Background(), eng, prefix); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	pids := map[string]int{}
	for _, n := range l.Nodes {
		info, err := eng.ContainerInspect(ctx, n.Container, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pids[n.Name] = info.Container.State.Pid
	}
	const rate = 20e6
	free := sendRate(t, l, pids, "node-a", "node-b", "fast", 200<<20)
	t.Logf("unshaped: %.0f MB/s", free/1e6)
	if free < 2*rate {
		t.Fatalf("unshaped fast network carries only %.0f MB/s; the test needs it well above %.0f", free/1e6, rate/1e6)
	}
	unshape, err := l.ShapeLinks(ctx, "fast", rate)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range [][2]string{{"node-a", "node-b"}, {"node-b", "node-a"}} {
		r := sendRate(t, l, pids, dir[0], dir[1], "fast", 40<<20)
		t.Logf("shaped to %.0f MB/s: %s → %s %.1f MB/s", rate/1e6, dir[0], dir[1], r/1e6)
		if r < 0.75*rate || r > 1.25*rate {
			t.Errorf("%s → %s at %.1f MB/s; shaped to %.0f MB/s ± 25 %%", dir[0], dir[1], r/1e6, rate/1e6)
		}
	}
	if err := unshape(); err != nil {
		t.Fatal(err)
	}
	if r := sendRate(t, l, pids, "node-a", "node-b", "fast", 200<<20); r < 2*rate {
		t.Errorf("after unshaping %.0f MB/s; the qdiscs were not removed", r/1e6)
	}
}
