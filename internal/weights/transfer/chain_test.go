package transfer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// A chain of four nodes: every node ends with the whole model, and every link carries
// one copy — the head's included, where a star's carries one per node.
func TestChainCarriesOneCopyPerLink(t *testing.T) {
	nodes := newFleet(t, 4, 64e6)
	files := writeModel(t, nodes[0], 3, 2<<20)
	total := weights.CopySize(files)
	out := runFanOut(t, nodes, files, true, nil)
	for _, n := range nodes[1:] {
		if err := out.errs[n.name]; err != nil {
			t.Fatalf("%s: %v", n.name, err)
		}
		checkHolds(t, n, files)
		if r := out.results[n.name]; r.Bytes != total {
			t.Errorf("%s received %d bytes, want one copy: %d", n.name, r.Bytes, total)
		}
	}
	for _, n := range nodes[:3] {
		if out.served[n.name] != total {
			t.Errorf("%s sent %d bytes, want one copy: %d", n.name, out.served[n.name], total)
		}
	}
	if out.served[nodes[3].name] != 0 {
		t.Errorf("the chain's last node sent %d bytes", out.served[nodes[3].name])
	}

	// The star, for contrast: the head sends one copy per node.
	star := newFleet(t, 4, 64e6)
	files = writeModel(t, star[0], 3, 2<<20)
	out = runFanOut(t, star, files, false, nil)
	if out.served["n0"] != 3*total {
		t.Errorf("the star's head sent %d bytes, want three copies: %d", out.served["n0"], 3*total)
	}
}

// A node that holds some files serves those from disk and relays the rest; a node that
// lacks nothing is not in the chain.
func TestChainServesWhatItHoldsAndRelaysTheRest(t *testing.T) {
	links := weights.Chain("head", []string{"head", "a", "b", "c"}, map[string][]weights.File{
		"a": {{Name: "x", Size: 1}},
		"b": {},
		"c": {{Name: "x", Size: 1}, {Name: "y", Size: 2}},
	})
	want := "head>a serve [x] relay map[]; a>c serve [x y] relay map[x:1]"
	var got []string
	for _, l := range links {
		got = append(got, fmt.Sprintf("%s>%s serve %v relay %v", l.From, l.To, l.Serve, l.Relay))
	}
	if strings.Join(got, "; ") != want {
		t.Fatalf("chain:\n got %s\nwant %s", strings.Join(got, "; "), want)
	}
}

// getRelayed asks a relay for a file and returns the connection's reader after the
// response header.
func getRelayed(t *testing.T, from *testNode, addr, name string) (net.Conn, *http.Response) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.addr.AsSlice()}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET /%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret-%s\r\n\r\n", name, from.name)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /%s: %v %v", name, resp, err)
	}
	return c, resp
}

// A relay forwards a file as it arrives but holds back its last byte until the copy has
// verified and placed it; when the copy removes it instead (corrupt), the response
// breaks off short of its end: the next node never holds the whole file.
func TestRelayWithholdsTheLastByteUntilVerified(t *testing.T) {
	oldGone := relayGone
	relayGone = 100 * time.Millisecond
	t.Cleanup(func() { relayGone = oldGone })
	nodes := newFleet(t, 2, 0)
	relay, next := nodes[0], nodes[1]
	content := []byte(strings.Repeat("weights!", 1000))
	size := int64(len(content))
	for _, name := range []string{"good", "bad"} {
		if err := os.WriteFile(filepath.Join(relay.root, name+weights.PartialSuffix), content[:size/2], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr, _ := relay.serve(t, []string{"good", "bad"}, map[string]int64{"good": size, "bad": size}, next)
	for _, name := range []string{"good", "bad"} {
		c, resp := getRelayed(t, next, addr.String(), name)
		got := make([]byte, size)
		if _, err := io.ReadFull(resp.Body, got[:size/2]); err != nil {
			t.Fatalf("%s: the half that arrived was not forwarded: %v", name, err)
		}
		// The rest arrives on the relay, whole: all but the last byte is forwarded.
		if err := os.WriteFile(filepath.Join(relay.root, name+weights.PartialSuffix), content, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(resp.Body, got[size/2:size-1]); err != nil {
			t.Fatalf("%s: the rest was not forwarded: %v", name, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if n, err := resp.Body.Read(got[size-1:]); n != 0 || !isTimeout(err) {
			t.Fatalf("%s: the last byte of an unverified file was released (%d bytes, %v)", name, n, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		partial := filepath.Join(relay.root, name+weights.PartialSuffix)
		if name == "good" {
			// Verified: placed, then recorded (as the copy does).
			if err := os.Rename(partial, filepath.Join(relay.root, name)); err != nil {
				t.Fatal(err)
			}
			relay.placed.Mark(relay.dir.Path(name))
			if _, err := io.ReadFull(resp.Body, got[size-1:]); err != nil || string(got) != string(content) {
				t.Fatalf("good: the last byte after the file was verified: %v", err)
			}
			continue
		}
		// Corrupt: the copy removes its partial copy.
		if err := os.Remove(partial); err != nil {
			t.Fatal(err)
		}
		if n, err := resp.Body.Read(got[size-1:]); n != 0 || err == nil || isTimeout(err) {
			t.Fatalf("bad: after the relay's copy was removed as corrupt the response gave %d bytes, %v; want it broken off", n, err)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A chain resumes from what its nodes already hold: a relay's partial copy and the next
// node's are kept, only the rest crosses the links, and every file is verified whole.
func TestChainResumesFromOffsets(t *testing.T) {
	nodes := newFleet(t, 3, 64e6)
	files := writeModel(t, nodes[0], 2, 1<<20)
	total := weights.CopySize(files)
	first, err := os.ReadFile(filepath.Join(nodes[0].root, files[0].Name))
	if err != nil {
		t.Fatal(err)
	}
	// n1 had received half of the first file, n2 a quarter, when they were stopped.
	half, quarter := int64(len(first)/2), int64(len(first)/4)
	if err := os.WriteFile(filepath.Join(nodes[1].root, files[0].Name+weights.PartialSuffix), first[:half], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nodes[2].root, files[0].Name+weights.PartialSuffix), first[:quarter], 0o644); err != nil {
		t.Fatal(err)
	}
	out := runFanOut(t, nodes, files, true, nil)
	for i, held := range []int64{half, quarter} {
		n := nodes[i+1]
		if err := out.errs[n.name]; err != nil {
			t.Fatalf("%s: %v", n.name, err)
		}
		checkHolds(t, n, files)
		if r := out.results[n.name]; r.Bytes != total-held || r.Reused != held {
			t.Errorf("%s received %d bytes and reused %d, want %d and %d", n.name, r.Bytes, r.Reused, total-held, held)
		}
	}
	if out.served["n0"] != total-half {
		t.Errorf("the head sent %d bytes, want %d (what n1 lacked)", out.served["n0"], total-half)
	}
	if out.served["n1"] != total-quarter {
		t.Errorf("n1 sent %d bytes, want %d (what n2 lacked)", out.served["n1"], total-quarter)
	}
}

// A file corrupt at the head stops at the first node: it fails ErrCorrupt and removes its
// partial copy, and the next node neither places the file nor holds all of it.
func TestChainStopsACorruptFile(t *testing.T) {
	oldGone, oldWait := relayGone, relayWait
	relayGone, relayWait = 100*time.Millisecond, 300*time.Millisecond
	t.Cleanup(func() { relayGone, relayWait = oldGone, oldWait })
	nodes := newFleet(t, 3, 0)
	files := writeModel(t, nodes[0], 1, 1<<20)
	p := filepath.Join(nodes[0].root, files[0].Name)
	b, _ := os.ReadFile(p)
	b[len(b)-1] ^= 0xff // the last byte: only the whole file shows it
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := runFanOut(t, nodes, files, true, nil)
	if !errors.Is(out.errs["n1"], ErrCorrupt) {
		t.Fatalf("n1: %v, want ErrCorrupt", out.errs["n1"])
	}
	if out.errs["n2"] == nil {
		t.Fatal("n2's copy of a file corrupt upstream succeeded")
	}
	// n2's transfer broke off; a whole file would have failed its own hash check.
	if errors.Is(out.errs["n2"], ErrCorrupt) {
		t.Fatalf("n2 received the whole corrupt file (%v)", out.errs["n2"])
	}
	if _, err := os.Stat(filepath.Join(nodes[2].root, files[0].Name)); err == nil {
		t.Fatal("n2 placed a file corrupt upstream")
	}
	if st, err := os.Stat(filepath.Join(nodes[2].root, files[0].Name+weights.PartialSuffix)); err == nil && st.Size() >= files[0].Size {
		t.Fatalf("n2 holds all %d bytes of a file its relay found corrupt", st.Size())
	}
}

// A relay asked for a file its node's copy has not begun waits while a copy runs there
// (it may be busy with files the next node holds), and answers 503, which the next node
// retries, once no copy has run for relayWait.
func TestRelayWaitsForAFileNotBegunWhileACopyRuns(t *testing.T) {
	oldWait, oldHeader := relayWait, relayHeaderAfter
	relayWait, relayHeaderAfter = 200*time.Millisecond, 50*time.Millisecond // the header goes before the file begins
	t.Cleanup(func() { relayWait, relayHeaderAfter = oldWait, oldHeader })
	nodes := newFleet(t, 2, 0)
	relay, next := nodes[0], nodes[1]
	addr, _ := relay.serve(t, []string{"late", "never"}, map[string]int64{"late": 4, "never": 4}, next)
	stop := make(chan struct{})
	go func() { // a copy runs on the relay, and begins "late" after 3 × relayWait
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		begin := time.After(3 * relayWait)
		for {
			select {
			case <-stop:
				return
			case <-begin:
				_ = os.WriteFile(filepath.Join(relay.root, "late"+weights.PartialSuffix), []byte("abcd"), 0o644)
				_ = os.Rename(filepath.Join(relay.root, "late"+weights.PartialSuffix), filepath.Join(relay.root, "late"))
				relay.placed.Mark(relay.dir.Path("late"))
			case <-tick.C:
				relay.placed.Touch()
			}
		}
	}()
	_, resp := getRelayed(t, next, addr.String(), "late")
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "abcd" {
		t.Fatalf("late: %q %v", b, err)
	}
	close(stop)
	time.Sleep(2 * relayWait)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: next.addr.AsSlice()}}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /never HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret-%s\r\n\r\n", next.name)
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a file not begun with no copy running: %v %v, want 503", r, err)
	}
}
