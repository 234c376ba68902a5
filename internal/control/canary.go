package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/readiness"
)

// The canary: /health answers 200 while vLLM's EngineCore is frozen (its process alive,
// its busy loop stuck in a deadlock, a CUDA call or an NCCL collective that a frozen rank
// never joins; vLLM PR #36451, issue #39863), and /v1/models is the API server's own. Only
// an answer from the engine says it serves, so the supervisor's watch sends one tiny
// completion (a short prompt, max_tokens 1, temperature 0) every canary.every and waits up
// to canary.timeout for it; canary.failures unanswered in a row are EngineWedged.
//
// Queueing, and why a slow answer is not a failure:
//   - One canary at a time, never a second while one waits: a loaded engine gets at most
//     one extra request of one token from it.
//   - The timeout bounds queueing plus one prefill and one decode step of a few tokens:
//     continuous batching admits a new request at the next step unless the batch is full
//     (max_num_seqs) or the KV cache is, when it waits in vLLM's queue. A canary that times
//     out is then judged by the engine's own progress: vLLM's /metrics (the API server
//     records vllm:generation_tokens_total from the engine's outputs) is read before the
//     canary and after its timeout; tokens generated meanwhile mean a busy engine, and that
//     canary counts as answered ("slow"). A frozen engine generates none. Without /metrics
//     (a proxy in front) the timeout alone decides.
//   - The canary's connection is closed at its timeout, which aborts the request in vLLM
//     (a client that goes away), so unanswered canaries do not pile up in the queue.
//   - After an unanswered canary the next is sent at once, not a period later: the engine
//     is declared wedged within canary.every + failures × canary.timeout of freezing.
//   - An error answer (5xx, a refused connection) counts as a failure too, but the
//     incident is EngineWedged only when a canary of the run went unanswered; an engine
//     that answers 503 is dead, which /health reports as well.

// canaryTarget is what the canary asks: the endpoint, the served model, and vLLM's API key
// when the spec has one (resolved on this agent: the head's, Checks.APIKey).
type canaryTarget struct{ endpoint, served, key string }

type canaryResult struct {
	ok, slow, timedOut bool
	detail             string
}

type canary struct {
	req     contract.CanaryRequest
	target  atomic.Pointer[canaryTarget]
	results chan canaryResult
	client  *http.Client
}

func newCanary(req contract.CanaryRequest) *canary {
	if req.Every <= 0 {
		return nil
	}
	req.Timeout = max(req.Timeout, 100*time.Millisecond)
	req.Failures = max(req.Failures, 1)
	// No redirect is followed: the key would go on to wherever the answer points. No
	// connection is kept between completions (readiness.Transport says why).
	return &canary{req: req, results: make(chan canaryResult), client: &http.Client{Transport: readiness.Transport, CheckRedirect: readiness.NoRedirects}}
}

// aim points the canary at a serving endpoint, or (nil) holds it while nothing serves.
func (c *canary) aim(t *canaryTarget) {
	if c != nil {
		c.target.Store(t)
	}
}

func (c *canary) run(ctx context.Context) {
	pause := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for ctx.Err() == nil {
		t := c.target.Load()
		if t == nil {
			if !pause(time.Second) {
				return
			}
			continue
		}
		r := c.probe(ctx, *t)
		if ctx.Err() != nil {
			return
		}
		select {
		case c.results <- r:
		case <-ctx.Done():
			return
		}
		switch {
		case r.ok:
			pause(c.req.Every)
		case !r.timedOut:
			pause(time.Second) // an error answer came at once: not a busy loop
		}
	}
}

// maxReplyRecorded bounds what the canary keeps of an error answer (it goes into the
// supervisor's state and history): vLLM's error JSON fits.
const maxReplyRecorded = 256

// printable is an answer's text as it may be recorded: control characters (a terminal's
// escapes) as spaces, trimmed.
func printable(b []byte) string {
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(string(b), "?")))
}

// probe sends one canary and judges it.
func (c *canary) probe(ctx context.Context, t canaryTarget) canaryResult {
	before, haveBefore := generatedTokens(ctx, t.endpoint)
	body, _ := json.Marshal(map[string]any{"model": t.served, "prompt": "tpdeploy canary", "max_tokens": 1, "temperature": 0})
	rctx, cancel := context.WithTimeout(ctx, c.req.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, t.endpoint+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return canaryResult{detail: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	if t.key != "" {
		req.Header.Set("Authorization", "Bearer "+t.key)
	}
	start := time.Now()
	resp, err := c.client.Do(req)
	took := time.Since(start)
	if err == nil {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxReplyRecorded))
		if resp.StatusCode == http.StatusOK {
			return canaryResult{ok: true, detail: fmt.Sprintf("one token in %s", took.Round(time.Millisecond))}
		}
		return canaryResult{detail: fmt.Sprintf("answered %s: %s", resp.Status, printable(msg))}
	}
	if rctx.Err() == nil || ctx.Err() != nil {
		return canaryResult{detail: err.Error()}
	}
	after, haveAfter := generatedTokens(ctx, t.endpoint)
	if haveBefore && haveAfter && after > before {
		return canaryResult{ok: true, slow: true, detail: fmt.Sprintf("no token within %s, but the engine generated %.0f tokens meanwhile: busy, not wedged", c.req.Timeout, after-before)}
	}
	why := "no token generated meanwhile (vllm:generation_tokens_total unchanged)"
	if !haveBefore || !haveAfter {
		why = "the engine's progress not readable from /metrics"
	}
	return canaryResult{timedOut: true, detail: fmt.Sprintf("no answer within %s; %s", c.req.Timeout, why)}
}

// generatedTokens reads vllm:generation_tokens_total from the endpoint's /metrics (vLLM's
// Prometheus exposition, served by the API server without an API key), summed over its
// label sets.
func generatedTokens(ctx context.Context, endpoint string) (float64, bool) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	b, err := fetcher("")(ctx, endpoint+"/metrics")
	if err != nil {
		return 0, false
	}
	sum, found := 0.0, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "vllm:generation_tokens_total") {
			continue
		}
		rest := strings.TrimPrefix(line, "vllm:generation_tokens_total")
		if strings.HasPrefix(rest, "{") {
			if i := strings.LastIndexByte(rest, '}'); i >= 0 {
				rest = rest[i+1:]
			}
		} else if !strings.HasPrefix(rest, " ") {
			continue // another series with this prefix
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum, found = sum+v, true
		}
	}
	return sum, found
}
