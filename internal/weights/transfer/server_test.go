package transfer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/confined"
)

// openTestServer serves one file to 127.0.0.1 and returns its address and the secret.
func openTestServer(t *testing.T, peers ...netip.Addr) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, err := confined.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var ss Servers
	id, err := ss.Open(Serve{Listener: ln, Dir: dir, Rel: ".", Files: []string{"f"}, Keys: []string{KeyHash("secret")}, Peers: peers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close(id) })
	return ln.Addr().String()
}

// closedWithin says whether the server closes c (a read ends with EOF or a reset) within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// A connection left idle after its request is closed after idleTimeout: a peer (or its
// compromised node) cannot hold the agent's sockets open for the server's life.
func TestModelServerClosesIdleConnections(t *testing.T) {
	old := idleTimeout
	idleTimeout = 200 * time.Millisecond
	t.Cleanup(func() { idleTimeout = old })
	addr := openTestServer(t, netip.MustParseAddr("127.0.0.1"))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /f HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /f: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if !closedWithin(c, 3*time.Second) {
		t.Fatal("a keep-alive connection idle for 3 s (idle timeout 200 ms) is still open")
	}
}

// A peer gets at most MaxConnsPerPeer connections at once, and all addresses that are no
// peer together as many: a connection over the cap is closed at once, before any HTTP.
func TestModelServerCapsConnections(t *testing.T) {
	for _, peer := range []string{"127.0.0.1", "127.0.0.2"} { // the test dials from 127.0.0.1
		addr := openTestServer(t, netip.MustParseAddr(peer))
		var held []net.Conn
		for range MaxConnsPerPeer {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			held = append(held, c)
		}
		time.Sleep(100 * time.Millisecond) // the server has accepted them
		extra, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer extra.Close()
		if !closedWithin(extra, time.Second) {
			t.Errorf("peer %s: connection %d from 127.0.0.1 was kept", peer, MaxConnsPerPeer+1)
		}
		// One within the cap is answered (200 to the peer, 403 to another address), and
		// its place is free again once it is closed.
		fmt.Fprintf(held[0], "GET /f HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(held[0]), nil)
		want := http.StatusOK
		if peer != "127.0.0.1" {
			want = http.StatusForbidden
		}
		if err != nil || resp.StatusCode != want {
			t.Errorf("peer %s: a connection within the cap: %v %v, want %d", peer, resp, err, want)
		}
		held[0].Close()
		time.Sleep(100 * time.Millisecond)
		again, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		if closedWithin(again, 300*time.Millisecond) {
			t.Errorf("peer %s: a connection after one was closed is refused", peer)
		}
	}
}
