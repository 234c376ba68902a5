package readiness

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Every check opens a connection of its own and closes it when answered, so no check is
// sent on a connection vLLM's keep-alive timer is closing: a server that keeps connections
// forever sees each check's connection end, and as many connections as checks.
func TestEveryCheckHasAConnectionOfItsOwn(t *testing.T) {
	var mu sync.Mutex
	opened, closed := 0, 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"data": [{"id": "m"}]}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			opened++
		case http.StateClosed:
			closed++
		}
	}
	srv.Start()
	defer srv.Close()
	hc := Client(5 * time.Second)
	const checks = 3
	for range checks {
		if err := Check(context.Background(), func(ctx context.Context, url string) ([]byte, error) {
			return Get(ctx, hc, url, "", 1<<20)
		}, srv.URL, "m"); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		o, c := opened, closed
		mu.Unlock()
		if o == 2*checks && c == o {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests opened %d connections and closed %d, want a connection each, closed", 2*checks, o, c)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
