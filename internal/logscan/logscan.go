// Package logscan reads Ray's and vLLM's output: it splits off Ray's process prefixes,
// removes colour codes (real ones and the caret notation of pasted logs), follows weight
// loading, and classifies fatal lines into typed failures with a one-line diagnosis and the
// fix. Classify judges one line; a Scanner follows a stream, keeps Python tracebacks apart
// per process and reports the exception a traceback ends with rather than its source lines.
// It does no I/O.
package logscan

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// Line is one output line: the Ray process prefix it carried, if any, and its text.
type Line struct {
	// Source is Ray's prefix without parentheses, e.g. "RayWorkerWrapper pid=3173774,
	// ip=10.254.20.30" (the legacy Ray executor's actor) or "RayWorkerProc pid=2158,
	// ip=192.168.10.254" (RayExecutorV2's, vLLM ≥ 0.21); nested prefixes are joined with
	// " / ", e.g. "EngineCore_DP0 pid=1 / RayWorkerProc pid=2, ip=10.0.0.2 / Worker_TP1 pid=2".
	Source string
	Text   string
	// Repeated is N of Ray's "[repeated Nx across cluster]" suffix (removed from Text),
	// 0 when the line carried none.
	Repeated int
}

// Node is the address of the Ray node the line came from (the last "ip=" of Source), or
// "" for a line of the local process.
func (l Line) Node() string {
	i := strings.LastIndex(l.Source, "ip=")
	if i < 0 {
		return ""
	}
	ip := l.Source[i+3:]
	if j := strings.IndexAny(ip, ", /)"); j >= 0 {
		ip = ip[:j]
	}
	return ip
}

var (
	ansi      = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)
	caretCSI  = regexp.MustCompile(`\^\[\[[0-9;?]*[ -/]*[@-~]`)
	repeated  = regexp.MustCompile(`\s*\[repeated (\d+)x across cluster\]\s*$`)
	dedupNote = regexp.MustCompile(`\s*\(Ray deduplicates logs by default\.[^()]*(?:\([^()]*\)[^()]*)*\)\s*$`)
)

// StripANSI removes terminal colour and cursor codes, and any stray escape byte left, so
// that stripping twice changes nothing.
func StripANSI(s string) string {
	return strings.ReplaceAll(ansi.ReplaceAllString(s, ""), "\x1b", "")
}

// stripCaret removes escapes as they look once pasted into an issue: "^[[36m" for ESC [36m.
func stripCaret(s string) string {
	for i := 0; i < 64 && strings.Contains(s, "^[["); i++ {
		n := caretCSI.ReplaceAllString(s, "")
		if n == s {
			break
		}
		s = n
	}
	return s
}

// Parse removes colours (ANSI and caret notation) and carriage returns (tqdm redraws,
// "^M"), splits off Ray's and vLLM's `(Name pid=N, ip=X)` prefixes (one space after each
// prefix is removed, so a traceback's indentation survives) and Ray's
// "[repeated Nx across cluster]" suffix.
func Parse(raw string) Line {
	s := StripANSI(raw)
	if strings.Contains(s, "^") {
		s = strings.ReplaceAll(stripCaret(s), "^M", "\r")
	}
	s = strings.TrimRight(s, "\r\n")
	if i := strings.LastIndexByte(s, '\r'); i >= 0 {
		s = s[i+1:]
	}
	var l Line
	var sources []string
	for strings.HasPrefix(s, "(") {
		end := closing(s)
		if end < 0 {
			break
		}
		inner := s[1:end]
		if !strings.Contains(inner, "pid=") && !strings.Contains(inner, "ip=") {
			break
		}
		sources = append(sources, inner)
		s = strings.TrimPrefix(s[end+1:], " ")
	}
	l.Source = strings.Join(sources, " / ")
	for i := 0; i < 8; i++ {
		t := dedupNote.ReplaceAllString(s, "")
		if m := repeated.FindStringSubmatchIndex(t); m != nil {
			if n, err := strconv.Atoi(t[m[2]:m[3]]); err == nil && n > l.Repeated {
				l.Repeated = n
			}
			t = t[:m[0]]
		}
		if t == s {
			break
		}
		s = t
	}
	l.Text = s
	return l
}

// closing is the index of the parenthesis that closes s[0], or -1.
func closing(s string) int {
	depth := 0
	for i := 0; i < len(s) && i < 300; i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// Finding is a classified line.
type Finding struct {
	// Type is the failure type (package internal/failure) the deploy fails with. vLLM's
	// waiting line is a PlacementGroupPending that is not fatal: ResolvePending decides.
	Type      string
	Diagnosis string
	Fix       string
	// Fatal findings end the deploy; the others are recorded as warnings.
	Fatal bool
	Line  string
	// Node is the Ray node the line came from (its "ip="), "" for the local process.
	Node string
	// Pinned is the address vLLM pinned its placement group to ('node:IP' in the specs),
	// "" when the specs pin nothing. Set for PlacementGroupPending only.
	Pinned string
	// Waited is how long vLLM had waited for its placement group when it printed the line.
	Waited time.Duration

	header bool   // an engine line that announces a traceback (a Scanner waits for its cause)
	where  string // the process part of Diagnosis, to rebuild it
}

// Message is the one-line account an operator reads.
func (f *Finding) Message() string {
	return f.Diagnosis + ". Fix: " + f.Fix
}

// ResolvePending decides a PlacementGroupPending finding, which one line cannot: the caller
// passes the addresses Ray has registered its nodes under (`ray status` / the state API;
// nil when unknown) and how long a group pinned to a live node may stay pending before the
// deploy gives up (the placement proof has passed by then, so a pending group most often
// means GPUs held by something else; vllm PR #11138 shows a late worker and then success,
// hence the bound).
//
//   - pinned to an address no Ray node has: fatal PlacementGroupPending (Ray registered
//     the node under another address);
//   - vLLM gave up ("Cannot provide …", Fatal) or waited at least bound: fatal ResourcesBusy;
//   - otherwise nil: keep waiting.
//
// It returns nil for a finding of another type.
func (f *Finding) ResolvePending(registered []string, bound time.Duration) *Finding {
	if f == nil || f.Type != failure.PlacementGroupPending {
		return nil
	}
	where := ""
	if f.Node != "" {
		where = " (on " + f.Node + ")"
	}
	if f.Pinned != "" && registered != nil && !containsAddr(registered, f.Pinned) {
		return &Finding{Type: failure.PlacementGroupPending, Fatal: true, Line: f.Line, Node: f.Node, Pinned: f.Pinned, Waited: f.Waited,
			Diagnosis: "vLLM pinned its placement group to node:" + f.Pinned + " but Ray registered its nodes as " + strings.Join(registered, ", ") +
				": the node running vllm serve is known to Ray under another address, so the group can never be placed" + where,
			Fix: "start that node's Ray with --node-ip-address " + f.Pinned + " (the planned subnet), or set its VLLM_HOST_IP to the address Ray registered; the two must be equal on every node"}
	}
	if !f.Fatal && (bound <= 0 || f.Waited < bound) {
		return nil
	}
	on := "the nodes"
	if f.Pinned != "" {
		on = f.Pinned
	}
	return &Finding{Type: failure.ResourcesBusy, Fatal: true, Line: f.Line, Node: f.Node, Pinned: f.Pinned, Waited: f.Waited,
		Diagnosis: "vLLM's placement group stayed pending for " + f.Waited.String() + " although Ray knows " + on +
			": the GPUs are held by something else (a stale placement group of a killed vllm serve, another container or process) or a planned node's GPUs never joined" + where,
		Fix: "free the GPUs on " + on + " (stop the other vllm/ray containers there, `ray list placement-groups` for stale groups) and check `ray status` shows the planned GPU count, then redeploy"}
}

func containsAddr(list []string, a string) bool {
	a = strings.Trim(a, "[]")
	for _, x := range list {
		if strings.Trim(strings.TrimSpace(x), "[]") == a {
			return true
		}
	}
	return false
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Progress is weight loading as tqdm reports it on rank 0.
type Progress struct {
	Loaded, Total, Percent int
	Elapsed, Remaining     time.Duration
}

var shards = regexp.MustCompile(`Loading safetensors checkpoint shards:\s*(\d+)% Completed \| (\d+)/(\d+) \[([0-9:]+)<([0-9:?]+)`)

// ParseProgress reads a shard-loading line.
func ParseProgress(text string) (Progress, bool) {
	m := shards.FindStringSubmatch(text)
	if m == nil {
		return Progress{}, false
	}
	var p Progress
	p.Percent, _ = strconv.Atoi(m[1])
	p.Loaded, _ = strconv.Atoi(m[2])
	p.Total, _ = strconv.Atoi(m[3])
	p.Elapsed = clockDuration(m[4])
	p.Remaining = clockDuration(m[5])
	return p, true
}

// clockDuration reads tqdm's [HH:]MM:SS; "?" is zero.
func clockDuration(s string) time.Duration {
	var d time.Duration
	for _, part := range strings.Split(s, ":") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return 0
		}
		d = d*60 + time.Duration(n)*time.Second
	}
	return d
}

// Phase names what a line says vLLM is doing, or "".
func Phase(text string) string {
	switch {
	case strings.Contains(text, "Application startup complete"), strings.Contains(text, "Starting vLLM server on"), strings.Contains(text, "Starting vLLM API server"),
		// The Rust front end (VLLM_USE_RUST_FRONTEND=1, the vllm-rs process) prints neither:
		// its server logs info!(%bind_address, %model, "starting OpenAI server") once bound.
		strings.Contains(text, "(RustFrontend pid=") && strings.Contains(text, "starting OpenAI server"):
		return "ready"
	case strings.Contains(text, "Model loading took"), strings.Contains(text, "Loading weights took"):
		return "warming"
	case strings.Contains(text, "Loading safetensors checkpoint shards"), strings.Contains(text, "Starting to load model"):
		return "loading"
	case strings.Contains(text, "distributed_init_method="), strings.Contains(text, "NCCL INFO Bootstrap"):
		return "rendezvous"
	case strings.Contains(text, "Connected to Ray cluster"), strings.Contains(text, "placement group"):
		return "placement"
	}
	return ""
}
