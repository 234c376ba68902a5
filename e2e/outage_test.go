//go:build integration

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// outageWatch asks the cluster's /v1/models every 25 ms, as a client would (waiting up
// to 2 s for an answer: a shared CI machine can be slow, a stopped server refuses at
// once), and keeps when it answered and when it did not: the outage of a redeploy is the
// longest time it did not answer.
type outageWatch struct {
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	lastOK   time.Time
	firstBad time.Time // the first failure after lastOK; zero while it answers
	longest  time.Duration
	from, to time.Time // the longest outage seen
	fails    int
	checks   int
}

func watchOutage(s spec.Cluster) *outageWatch {
	w := &outageWatch{stop: make(chan struct{}), done: make(chan struct{})}
	url := fmt.Sprintf("http://%s:%d/v1/models", theLab.Nodes[0].Fast, s.Ports.VLLM)
	cl := &http.Client{Timeout: 2 * time.Second}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			ok := answers(cl, url)
			w.record(time.Now(), ok)
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func answers(cl *http.Client, url string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := cl.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (w *outageWatch) record(at time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checks++
	if !ok {
		w.fails++
		if w.firstBad.IsZero() {
			w.firstBad = at
		}
		return
	}
	if !w.firstBad.IsZero() {
		// The outage ran from the last answer before it to this one.
		start := w.lastOK
		if start.IsZero() {
			start = w.firstBad
		}
		if d := at.Sub(start); d > w.longest {
			w.longest, w.from, w.to = d, start, at
		}
		w.firstBad = time.Time{}
	}
	w.lastOK = at
}

// outage stops the watch and returns its longest outage, when it began (the last answer
// before it) and how many checks failed of how many; an outage still open when it stops
// counts up to then.
func (w *outageWatch) outage() (longest time.Duration, began time.Time, fails, checks int) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.firstBad.IsZero() {
		start := w.lastOK
		if start.IsZero() {
			start = w.firstBad
		}
		if d := time.Since(start); d > w.longest {
			w.longest, w.from = d, start
		}
	}
	return w.longest, w.from, w.fails, w.checks
}
