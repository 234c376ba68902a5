package control

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// fakeVLLM answers completions after delay (never, when frozen) and counts generated
// tokens in /metrics as vLLM's API server does; busy makes the counter move on its own
// (other requests generating).
type fakeVLLM struct {
	frozen, busy atomic.Bool
	tokens       atomic.Int64
	status       int
}

func (f *fakeVLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/metrics":
		if f.busy.Load() {
			f.tokens.Add(17)
		}
		fmt.Fprintf(w, "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} %d.0\nvllm:generation_tokens_total_created 1.7e9\n", f.tokens.Load())
	case "/v1/completions":
		_, _ = io.Copy(io.Discard, r.Body) // then a client that goes away cancels r.Context()
		if f.frozen.Load() {
			<-r.Context().Done()
			return
		}
		if f.status != 0 {
			w.WriteHeader(f.status)
			return
		}
		f.tokens.Add(1)
		fmt.Fprint(w, `{"choices":[{"text":" x"}]}`)
	}
}

func TestCanaryJudgesAnswersTimeoutsAndProgress(t *testing.T) {
	f := &fakeVLLM{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := newCanary(contract.CanaryRequest{Every: time.Second, Timeout: 300 * time.Millisecond, Failures: 2})
	target := canaryTarget{endpoint: srv.URL, served: "m"}
	if r := c.probe(context.Background(), target); !r.ok || r.slow {
		t.Errorf("serving: %+v", r)
	}
	f.frozen.Store(true)
	if r := c.probe(context.Background(), target); r.ok || !r.timedOut || !strings.Contains(r.detail, "unchanged") {
		t.Errorf("frozen: %+v", r)
	}
	f.busy.Store(true) // no answer in time, but the engine generates: queued behind a full batch
	if r := c.probe(context.Background(), target); !r.ok || !r.slow {
		t.Errorf("busy: %+v", r)
	}
	f.frozen.Store(false)
	f.status = http.StatusServiceUnavailable
	if r := c.probe(context.Background(), target); r.ok || r.timedOut || !strings.Contains(r.detail, "503") {
		t.Errorf("dead: %+v", r)
	}
	if v, ok := generatedTokens(context.Background(), srv.URL); !ok || v < 1 {
		t.Errorf("generatedTokens = %v %v", v, ok)
	}
	if newCanary(contract.CanaryRequest{}) != nil {
		t.Error("a canary without a period runs")
	}
}
