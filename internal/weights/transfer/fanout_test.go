package transfer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/confined"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// A fleet of in-process nodes on loopback addresses (127.0.0.1, .2, …), each with its
// own model directory, Placed and servers, and each node's link shaped to a rate: what
// it sends (its servers' connections) and what it receives (its copies' connections)
// each pass one token bucket of that node's, as a NIC's two directions would.

// bucket paces bytes to a rate: each take books its bytes after the last booked, and
// waits until then (no burst beyond one chunk).
type bucket struct {
	mu   sync.Mutex
	rate float64 // bytes per second; 0 is unshaped
	next time.Time
}

func (b *bucket) take(n int) {
	if b.rate <= 0 || n <= 0 {
		return
	}
	b.mu.Lock()
	now := time.Now()
	if b.next.Before(now) {
		b.next = now
	}
	b.next = b.next.Add(time.Duration(float64(n) / b.rate * float64(time.Second)))
	d := time.Until(b.next)
	b.mu.Unlock()
	time.Sleep(d)
}

const shapeChunk = 32 << 10

// shapedConn sends through out and receives through in.
type shapedConn struct {
	net.Conn
	out, in *bucket
}

func (c shapedConn) Write(p []byte) (int, error) {
	var n int
	for len(p) > 0 {
		k := min(len(p), shapeChunk)
		c.out.take(k)
		w, err := c.Conn.Write(p[:k])
		n += w
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

func (c shapedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p[:min(len(p), shapeChunk)])
	c.in.take(n)
	return n, err
}

type shapedListener struct {
	net.Listener
	out, in *bucket
}

func (l shapedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return shapedConn{Conn: c, out: l.out, in: l.in}, nil
}

type testNode struct {
	name    string
	addr    netip.Addr
	root    string
	dir     *confined.Dir
	placed  Placed
	servers Servers
	out, in bucket
}

func newFleet(t testing.TB, n int, rate float64) []*testNode {
	t.Helper()
	nodes := make([]*testNode, n)
	for i := range nodes {
		root := t.TempDir()
		dir, err := confined.Open(root)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dir.Close() })
		nodes[i] = &testNode{name: fmt.Sprintf("n%d", i), addr: netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)}), root: root, dir: dir}
		nodes[i].out.rate, nodes[i].in.rate = rate, rate
	}
	return nodes
}

// writeModel writes count random files of size bytes on the node and returns them as a
// manifest's files (hashed).
func writeModel(t testing.TB, n *testNode, count int, size int64) []weights.File {
	t.Helper()
	var files []weights.File
	for i := range count {
		b := make([]byte, size)
		_, _ = rand.Read(b)
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, count)
		if err := os.WriteFile(filepath.Join(n.root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		files = append(files, weights.File{Name: name, Size: size, SHA256: hex.EncodeToString(sum[:])})
	}
	return files
}

// serve opens a model server on n for the peers' copies (secrets named after them).
func (n *testNode) serve(t testing.TB, files []string, relay map[string]int64, peers ...*testNode) (netip.AddrPort, string) {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.addr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := confined.Open(n.root)
	if err != nil {
		t.Fatal(err)
	}
	s := Serve{Listener: shapedListener{Listener: ln, out: &n.out, in: &n.in}, Dir: dir, Rel: ".", Files: files, Relay: relay, Placed: &n.placed, Node: n.name}
	for _, p := range peers {
		s.Keys, s.Peers = append(s.Keys, KeyHash("secret-"+p.name)), append(s.Peers, p.addr)
	}
	id, err := n.servers.Open(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.servers.Close(id) })
	return ln.Addr().(*net.TCPAddr).AddrPort(), id
}

// copyFrom is n's copy of files from the server at from (the node called source).
func (n *testNode) copyFrom(from netip.AddrPort, source string, files []weights.File) Copy {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: n.addr.AsSlice()}}
	return Copy{From: from, Secret: "secret-" + n.name, Dir: n.dir, Rel: ".", Files: files, Node: n.name, Source: source, Placed: &n.placed,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return shapedConn{Conn: c, out: &n.out, in: &n.in}, nil
		}}
}

// fanOut is one fan-out's outcome: each copy's result and error, and the bytes each
// server sent, by the sending node.
type fanOut struct {
	took    time.Duration
	results map[string]Result
	errs    map[string]error
	served  map[string]int64
}

// runFanOut copies nodes[0]'s files to every other node: as a chain (weights.Chain) or a
// star (every node from nodes[0]). lacking defaults to everything for every node.
func runFanOut(t testing.TB, nodes []*testNode, files []weights.File, chain bool, lacking map[string][]weights.File) fanOut {
	t.Helper()
	out := fanOut{results: map[string]Result{}, errs: map[string]error{}, served: map[string]int64{}}
	head := nodes[0]
	byName := map[string]*testNode{}
	var order []string
	if lacking == nil {
		lacking = map[string][]weights.File{}
	}
	for _, n := range nodes {
		byName[n.name] = n
		order = append(order, n.name)
		if _, ok := lacking[n.name]; !ok && n != head {
			lacking[n.name] = files
		}
	}
	type job struct {
		to    *testNode
		c     Copy
		srv   *testNode
		srvID string
	}
	var jobs []job
	if chain {
		for _, l := range weights.Chain(head.name, order, lacking) {
			from, to := byName[l.From], byName[l.To]
			addr, id := from.serve(t, l.Serve, l.Relay, to)
			jobs = append(jobs, job{to: to, c: to.copyFrom(addr, from.name, l.Files), srv: from, srvID: id})
		}
	} else {
		var names []string
		for _, f := range files {
			names = append(names, f.Name)
		}
		addr, id := head.serve(t, names, nil, nodes[1:]...)
		for _, n := range nodes[1:] {
			jobs = append(jobs, job{to: n, c: n.copyFrom(addr, head.name, lacking[n.name]), srv: head, srvID: id})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			r, err := j.c.Run(ctx)
			mu.Lock()
			out.results[j.to.name], out.errs[j.to.name] = r, err
			mu.Unlock()
		})
	}
	wg.Wait()
	out.took = time.Since(start)
	for _, j := range jobs {
		st, _ := j.srv.servers.Stats(j.srvID)
		out.served[j.srv.name] = st.Served
	}
	return out
}

// checkHolds fails unless node n holds every file, whole and with its hash.
func checkHolds(t testing.TB, n *testNode, files []weights.File) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(n.root, f.Name))
		if err != nil {
			t.Errorf("%s: %v", n.name, err)
			continue
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Errorf("%s: %s has sha256 %x, want %s", n.name, f.Name, sum, f.SHA256)
		}
	}
}
