package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
)

// fakeEngine answers the API server's requests as EngineCore's execute does (the lab's
// deterministic completion), over a real socket pair.
func fakeEngine(t *testing.T, a *apiServer) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	api, err := newIPC(os.NewFile(uintptr(fds[0]), "api"))
	if err != nil {
		t.Fatal(err)
	}
	core, err := newIPC(os.NewFile(uintptr(fds[1]), "core"))
	if err != nil {
		t.Fatal(err)
	}
	a.p = api
	go func() {
		for m := range core.messages() {
			out := engineMsg{T: "out", ID: m.ID}
			out.Text, out.Tokens = completion(m.Prompt, max(m.Tokens, 1))
			_ = core.send(out)
		}
	}()
	go func() {
		for m := range api.messages() {
			a.mu.Lock()
			ch := a.wait[m.ID]
			delete(a.wait, m.ID)
			a.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}()
}

// events reads a text/event-stream body's data lines.
func events(t *testing.T, resp *http.Response) []string {
	t.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		} else if sc.Text() != "" {
			t.Fatalf("line %q: not an SSE data line or the blank line ending an event", sc.Text())
		}
	}
	return out
}

// A streamed completion is one chunk a token, finish_reason on the last only, the usage
// chunk when asked, then [DONE]; its text is the non-streamed completion's.
func TestStreamedCompletionIsVLLMsChunks(t *testing.T) {
	a := &apiServer{flags: serveFlags{served: "tiny", model: "/models/tiny"}, wait: map[uint64]chan engineMsg{}}
	fakeEngine(t, a)
	srv := httptest.NewServer(a.api())
	defer srv.Close()
	want, n := completion("hello there", 5)
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"tiny","prompt":"hello there","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	ev := events(t, resp)
	if len(ev) != n+2 || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("%d events %q, want %d chunks, a usage chunk and [DONE]", len(ev), ev, n)
	}
	var text strings.Builder
	for i, e := range ev[:n] {
		var c struct {
			Object  string `json:"object"`
			Model   string `json:"model"`
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil || len(c.Choices) != 1 || c.Object != "text_completion" || c.Model != "tiny" {
			t.Fatalf("chunk %d %s: %v", i, e, err)
		}
		text.WriteString(c.Choices[0].Text)
		if last := i == n-1; (c.Choices[0].FinishReason != nil) != last || (last && *c.Choices[0].FinishReason != "length") {
			t.Errorf("chunk %d: finish_reason %v", i, c.Choices[0].FinishReason)
		}
	}
	if text.String() != want {
		t.Errorf("streamed text %q, want %q", text.String(), want)
	}
	var u struct {
		Choices []any          `json:"choices"`
		Usage   map[string]int `json:"usage"`
	}
	if err := json.Unmarshal([]byte(ev[n]), &u); err != nil || len(u.Choices) != 0 || u.Usage["completion_tokens"] != n || u.Usage["prompt_tokens"] != 2 {
		t.Errorf("usage chunk %s: %v", ev[n], err)
	}
}

// A streamed chat completion opens with the assistant's role, then its content deltas.
func TestStreamedChatOpensWithTheRole(t *testing.T) {
	a := &apiServer{flags: serveFlags{served: "tiny", model: "/models/tiny"}, wait: map[uint64]chan engineMsg{}}
	fakeEngine(t, a)
	srv := httptest.NewServer(a.api())
	defer srv.Close()
	want, n := completion("hi", 3)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	ev := events(t, resp)
	if len(ev) != n+2 || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("%d events %q, want the role chunk, %d content chunks and [DONE]", len(ev), ev, n)
	}
	var content strings.Builder
	for i, e := range ev[:n+1] {
		var c struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta map[string]string `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil || c.Object != "chat.completion.chunk" || len(c.Choices) != 1 {
			t.Fatalf("chunk %d %s: %v", i, e, err)
		}
		if i == 0 && c.Choices[0].Delta["role"] != "assistant" {
			t.Errorf("first chunk %s: no assistant role", e)
		}
		content.WriteString(c.Choices[0].Delta["content"])
	}
	if content.String() != want {
		t.Errorf("content %q, want %q", content.String(), want)
	}
	// Not streamed: one chat.completion with the same content.
	resp, err = http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var full struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&full); err != nil || full.Object != "chat.completion" || len(full.Choices) != 1 || full.Choices[0].Message.Content != want {
		t.Errorf("chat completion %+v: %v", full, err)
	}
}
