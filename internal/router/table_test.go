package router

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func routes(models ...Model) Routes { return Routes{Models: models} }

func mustSet(t *testing.T, tb *Table, r Routes) {
	t.Helper()
	if err := tb.Set(r); err != nil {
		t.Fatal(err)
	}
}

func acquire(t *testing.T, tb *Table, model string) *Lease {
	t.Helper()
	l, _, err := tb.Acquire(context.Background(), model, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Requests go to the replica with the fewest outstanding; ties rotate; a replica down or
// draining gets none.
func TestAcquireLeastOutstanding(t *testing.T) {
	tb := NewTable(8)
	mustSet(t, tb, routes(Model{ID: "m", Replicas: []Replica{{Name: "a", URL: "http://10.0.0.1:8000"}, {Name: "b", URL: "http://10.0.0.2:8000"}, {Name: "c", URL: "http://10.0.0.3:8000", Down: true}}}))
	l1, l2 := acquire(t, tb, "m"), acquire(t, tb, "m")
	if l1.Replica() == l2.Replica() {
		t.Fatalf("two requests on %s, with b idle", l1.Replica())
	}
	l3 := acquire(t, tb, "m") // a tie at 1: either
	l1.Release()
	l1.Release() // a second release is no second decrement
	l4 := acquire(t, tb, "m")
	if l3.Replica() == l1.Replica() {
		if l4.Replica() != l2.Replica() && l4.Replica() != l1.Replica() {
			t.Fatalf("got %s", l4.Replica())
		}
	} else if l4.Replica() != l1.Replica() {
		t.Fatalf("after %s's release it has the fewest, got %s", l1.Replica(), l4.Replica())
	}
	counts := map[string]int{}
	for range 100 {
		l := acquire(t, tb, "m")
		counts[l.Replica()]++
		l.Release()
	}
	if counts["c"] != 0 {
		t.Fatalf("the down replica got %d requests", counts["c"])
	}
	for _, s := range tb.State()[0].Replicas {
		if s.Name == "c" && (s.Available || s.Outstanding != 0) {
			t.Fatalf("c: %+v", s)
		}
	}
}

// A model whose only replica drains holds new requests; a Set with the replacement lets them
// through, holding each for about as long as the swap took.
func TestHeldUntilTheReplacementIsRouted(t *testing.T) {
	tb := NewTable(8)
	mustSet(t, tb, routes(Model{ID: "m", Replicas: []Replica{{Name: "old", URL: "http://10.0.0.1:8000"}}}))
	if err := tb.Drain(context.Background(), "m", "old"); err != nil {
		t.Fatal(err)
	}
	type got struct {
		l    *Lease
		held Held
		err  error
	}
	done := make(chan got, 3)
	for range 3 {
		go func() {
			l, h, err := tb.Acquire(context.Background(), "m", time.Now().Add(10*time.Second))
			done <- got{l, h, err}
		}()
	}
	waitFor(t, func() bool { return tb.State()[0].Held == 3 })
	time.Sleep(50 * time.Millisecond)
	mustSet(t, tb, routes(Model{ID: "m", Replicas: []Replica{{Name: "new", URL: "http://10.0.0.2:8000"}}}))
	for range 3 {
		g := <-done
		if g.err != nil || g.l.Replica() != "new" {
			t.Fatalf("held request: %v %+v", g.err, g.l)
		}
		if g.held.Waited < 50*time.Millisecond {
			t.Fatalf("waited %s, held for at least 50ms", g.held.Waited)
		}
	}
	if h := tb.State()[0].Held; h != 0 {
		t.Fatalf("held %d after release", h)
	}
}

// Past the bound a request is refused at once; past the deadline a held one is refused.
func TestHoldIsBounded(t *testing.T) {
	tb := NewTable(1)
	mustSet(t, tb, routes(Model{ID: "m"}))
	errc := make(chan error, 1)
	go func() {
		_, _, err := tb.Acquire(context.Background(), "m", time.Now().Add(300*time.Millisecond))
		errc <- err
	}()
	waitFor(t, func() bool { return tb.State()[0].Held == 1 })
	if _, _, err := tb.Acquire(context.Background(), "m", time.Now().Add(time.Second)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("second held request: %v, want ErrQueueFull", err)
	}
	if err := <-errc; !errors.Is(err, ErrHoldTimeout) {
		t.Fatalf("held request: %v, want ErrHoldTimeout", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for tb.State()[0].Held != 1 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, _, err := tb.Acquire(ctx, "m", time.Now().Add(time.Minute)); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled held request: %v", err)
	}
	if h := tb.State()[0].Held; h != 0 {
		t.Fatalf("held %d after all left", h)
	}
	if _, _, err := tb.Acquire(context.Background(), "other", time.Now().Add(time.Second)); !errors.Is(err, ErrUnknownModel) {
		t.Fatalf("unknown model: %v", err)
	}
}

// A model dropped from the routes answers its held requests ErrUnknownModel.
func TestHeldRequestsOfADroppedModel(t *testing.T) {
	tb := NewTable(4)
	mustSet(t, tb, routes(Model{ID: "m"}))
	errc := make(chan error, 1)
	go func() {
		_, _, err := tb.Acquire(context.Background(), "m", time.Now().Add(10*time.Second))
		errc <- err
	}()
	waitFor(t, func() bool { return tb.State()[0].Held == 1 })
	mustSet(t, tb, routes())
	if err := <-errc; !errors.Is(err, ErrUnknownModel) {
		t.Fatalf("%v", err)
	}
}

// Drain answers when the replica's last request ends, not before; a Set keeps the count.
func TestDrainWaitsForInFlight(t *testing.T) {
	tb := NewTable(4)
	r := routes(Model{ID: "m", Replicas: []Replica{{Name: "a", URL: "http://10.0.0.1:8000/"}}})
	mustSet(t, tb, r)
	l1, l2 := acquire(t, tb, "m"), acquire(t, tb, "m")
	mustSet(t, tb, r) // the supervisor pushes the same routes: the counts stay
	if o := tb.State()[0].Replicas[0].Outstanding; o != 2 {
		t.Fatalf("outstanding %d after a Set, want 2", o)
	}
	drained := make(chan error, 1)
	go func() { drained <- tb.Drain(context.Background(), "m", "a") }()
	l1.Release()
	select {
	case err := <-drained:
		t.Fatalf("drained with a request in flight: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	l2.Release()
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	mustSet(t, tb, routes(Model{ID: "m", Replicas: []Replica{{Name: "a", URL: "http://10.0.0.1:8000"}, {Name: "b", URL: "http://10.0.0.2:8000"}}}))
	l := acquire(t, tb, "m")
	if err := tb.Drain(ctx, "m", l.Replica()); err == nil || !strings.Contains(err.Error(), "1 requests still in flight") {
		t.Fatalf("drain past its deadline: %v", err)
	}
	if err := tb.Drain(ctx, "m", "zz"); !errors.Is(err, ErrUnknownReplica) {
		t.Fatalf("%v", err)
	}
}

// An ejected replica (its dial failed) gets no request until the ejection ends; a request
// held meanwhile gets it then.
func TestEjectedReplicaIsSkippedThenRetried(t *testing.T) {
	tb := NewTable(4)
	mustSet(t, tb, routes(Model{ID: "m", Replicas: []Replica{{Name: "a", URL: "http://10.0.0.1:8000"}}}))
	l := acquire(t, tb, "m")
	l.Eject(100 * time.Millisecond)
	l.Release()
	start := time.Now()
	l2, held, err := tb.Acquire(context.Background(), "m", time.Now().Add(5*time.Second))
	if err != nil || l2.Replica() != "a" {
		t.Fatal(err)
	}
	if held.Waited < 80*time.Millisecond || time.Since(start) > 3*time.Second {
		t.Fatalf("held %s for an ejection of 100ms", held.Waited)
	}
}

// Bad routes are refused naming the field; good ones parse from JSON or YAML.
func TestRoutesValidate(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"models: [{id: ''}]", "models[0].id: empty"},
		{"models: [{id: a}, {id: a}]", `models[1].id: "a" listed twice`},
		{"models: [{id: a, replicas: [{name: r, url: 'ftp://x'}]}]", "models[0].replicas[0].url"},
		{"models: [{id: a, replicas: [{name: r, url: 'http://u:p@x:1'}]}]", "credentials"},
		{"models: [{id: a, replicas: [{name: r, url: 'http://x:1/v1'}]}]", "without a path"},
		{"models: [{id: a, replicas: [{name: r, url: 'http://x:1'}, {name: r, url: 'http://y:1'}]}]", `"r" listed twice`},
		{"models: [{id: a, replicas: [{url: 'http://x:1'}]}]", "replicas[0].name: empty"},
		{"modles: []", "unknown field"},
	} {
		_, err := ParseRoutes([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.want)
		}
	}
	r, err := ParseRoutes([]byte(`{"models": [{"id": "b", "replicas": [{"name": "r", "url": "http://x:1"}]}, {"id": "a"}]}`))
	if err != nil || strings.Join(r.IDs(), ",") != "a,b" {
		t.Fatalf("%v %v", r, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
