package activities

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// Issue #36, item 5: the data-plane proof's request is bounded and its master checked
// before anything reaches the engine: a timeout of a day would hold the exec (and the
// step) for a day, a master outside the node's subnets would have every rank dial it.
func TestProofRequestIsBoundedAndItsMasterChecked(t *testing.T) {
	a := guardedNode(t, t.TempDir())
	own := ownIPv4(t)
	master := netip.AddrPortFrom(own.Addr(), 29501).String()
	ok := contract.ProofRequest{Node: "node-a", Container: "tpd_tpdtest-proof_node-a_ray-head", Rank: 0, World: 2, Master: master, Timeout: 90 * time.Second}
	for _, tc := range []struct {
		name       string
		edit       func(*contract.ProofRequest)
		kind, want string
	}{
		{"a master in no subnet of the node", func(r *contract.ProofRequest) { r.Master = "198.51.100.7:29501" }, contract.ErrPolicyDenied, "198.51.100.7"},
		{"a master that is no address", func(r *contract.ProofRequest) { r.Master = "evil.example:29501" }, contract.ErrPolicyDenied, "not an address and port"},
		{"a master at a port the policy refuses", func(r *contract.ProofRequest) { r.Master = netip.AddrPortFrom(own.Addr(), 22).String() }, contract.ErrPolicyDenied, "22"},
		{"a day's timeout", func(r *contract.ProofRequest) { r.Timeout = 24 * time.Hour }, contract.ErrBadRequest, "timeout 24h0m0s"},
		{"a rank outside the world", func(r *contract.ProofRequest) { r.Rank = 2 }, contract.ErrBadRequest, "rank 2 of 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := ok
			tc.edit(&req)
			_, err := a.DataPlane.ProveDataPlane(context.Background(), req)
			if err == nil {
				t.Fatal("accepted")
			}
			if app := appError(t, err); app.Type() != tc.kind || !strings.Contains(app.Message(), tc.want) {
				t.Errorf("%s: %v; want %s saying %q", tc.name, err, tc.kind, tc.want)
			}
		})
	}
}

// endlessExec is an engine whose exec prints fast and never ends.
type endlessExec struct {
	containerEngine
	conns chan net.Conn
}

func (e endlessExec) ExecCreate(context.Context, string, client.ExecCreateOptions) (client.ExecCreateResult, error) {
	return client.ExecCreateResult{ID: "x"}, nil
}

func (e endlessExec) ExecAttach(context.Context, string, client.ExecAttachOptions) (client.ExecAttachResult, error) {
	mine, theirs := net.Pipe()
	e.conns <- theirs
	return client.ExecAttachResult{HijackedResponse: client.NewHijackedResponse(mine, "")}, nil
}

func (e endlessExec) ExecInspect(context.Context, string, client.ExecInspectOptions) (client.ExecInspectResult, error) {
	return client.ExecInspectResult{Running: true}, nil
}

// The proof's exec keeps at most maxExecOutput of what the container prints, and returns
// at its deadline even when the container neither ends nor stops printing.
func TestProofExecIsCappedAndEndsAtItsDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		print  int // bytes printed before the container goes silent, never ending
		within time.Duration
	}{
		{"silent after a line", 100, 300 * time.Millisecond},
		// Long enough for the cap to be reached first, even under the race detector.
		{"printing without end", 64 << 20, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := endlessExec{conns: make(chan net.Conn, 1)}
			go func() {
				c := <-eng.conns
				// Docker's multiplexed stream: a header (stream 1, stdout; the size) per frame.
				line := []byte(strings.Repeat("x", 1023) + "\n")
				frame := append([]byte{byte(stdcopy.Stdout), 0, 0, 0, 0, 0, byte(len(line) >> 8), byte(len(line))}, line...)
				for n := 0; n < tc.print; n += len(line) {
					if _, err := c.Write(frame); err != nil {
						return
					}
				}
				// Then silence, the connection held open.
			}()
			done := make(chan struct{})
			var out string
			var err error
			start := time.Now()
			go func() {
				defer close(done)
				out, _, err = execBounded(context.Background(), eng, "c", []string{"python3"}, nil, tc.within)
			}()
			select {
			case <-done:
			case <-time.After(tc.within + 10*time.Second):
				t.Fatal("the exec did not return at its deadline")
			}
			if len(out) > maxExecOutput {
				t.Errorf("kept %d bytes; want at most %d", len(out), maxExecOutput)
			}
			if tc.print > maxExecOutput && err == nil {
				t.Errorf("no error for %d bytes of output", tc.print)
			}
			t.Logf("returned after %s with %d bytes, %v", time.Since(start).Round(time.Millisecond), len(out), err)
		})
	}
}
