package logscan

import (
	"sort"
	"strings"
)

// Scanner classifies a stream of output lines. Unlike Classify it follows Python
// tracebacks, separately for every process prefix (Line.Source), so that lines of two
// processes interleaved do not confuse each other:
//
//   - a traceback's source lines (the line after `File "…", line N, in f`, its indented
//     continuation and ^^^ markers) are never taken as the failure;
//   - the exception line that ends a traceback (`RuntimeError: NCCL error: …`,
//     `torch.distributed.DistNetworkError: …`) is classified like any line;
//   - a generic engine line that announces a traceback ("EngineCore failed to start",
//     "EngineCore hit an exception", "Error executing method …") is held back until that
//     traceback's exception is known: a specific failure there wins; otherwise the
//     EngineDead finding is reported with the exception it ended with.
//
// The zero value is ready to use. Not safe for concurrent use.
type Scanner struct {
	procs map[string]*proc
}

// proc is the traceback state of one process prefix.
type proc struct {
	inTrace  bool     // between "Traceback (most recent call last):" and its exception line
	codeNext bool     // the previous line was a frame: this one is source
	pending  *Finding // an engine header waiting for its traceback's exception
	exc      string   // the last exception line seen while pending, unclassified
	lines    int      // lines seen while pending
}

// maxPending bounds how long a held-back engine finding waits for its traceback.
const maxPending = 400

// maxProcs bounds the per-process states kept (process ids come and go), maxSourceKey the
// length of the prefix a state is kept under.
const (
	maxProcs     = 512
	maxSourceKey = 256
)

// Scan parses one raw output line and returns it with its finding, or nil.
func (s *Scanner) Scan(raw string) (Line, *Finding) {
	l := Parse(raw)
	head := l.Text
	if len(head) > maxClassify {
		head = head[:maxClassify]
	}
	p := payload(head)
	pr := s.proc(l.Source)
	trimmed := strings.TrimSpace(p)
	if pr.pending != nil {
		pr.lines++
	}
	switch {
	case strings.Contains(p, "Traceback (most recent call last)"):
		pr.inTrace, pr.codeNext = true, false
		return l, s.settle(pr, l, Classify(l), false, trimmed)
	case pr.codeNext:
		pr.codeNext = false
		return l, s.settle(pr, l, nil, false, "")
	case isFrame(p):
		pr.inTrace, pr.codeNext = true, true
		return l, s.settle(pr, l, nil, false, "")
	case pr.inTrace && (trimmed == "" || p[0] == ' ' || p[0] == '\t' || markerLine.MatchString(trimmed)):
		return l, s.settle(pr, l, nil, false, "")
	case pr.inTrace:
		pr.inTrace = false
		return l, s.settle(pr, l, Classify(l), true, trimmed)
	}
	return l, s.settle(pr, l, Classify(l), false, trimmed)
}

// settle applies a line's finding f to the process state and returns what to report.
// trimmed is the line's message, "" for a source line of a traceback.
func (s *Scanner) settle(pr *proc, l Line, f *Finding, exception bool, trimmed string) *Finding {
	if f != nil && f.Fatal && f.header {
		if pr.pending == nil {
			pr.pending, pr.exc, pr.lines = f, "", 0
		}
		return nil
	}
	if f != nil && f.Fatal {
		pr.pending, pr.exc = nil, ""
		return f
	}
	if pr.pending == nil {
		return f
	}
	switch {
	case exception:
		pr.exc = l.Text
		return f
	case pr.exc != "" && trimmed != "" && !chained(trimmed):
		return pr.release()
	case pr.lines > maxPending:
		return pr.release()
	}
	return f
}

// chained says a line links one traceback to the next.
func chained(t string) bool {
	return strings.HasPrefix(t, "The above exception was the direct cause") ||
		strings.HasPrefix(t, "During handling of the above exception") ||
		strings.Contains(t, "Traceback (most recent call last)")
}

// release reports the held-back engine finding with the exception its traceback ended with.
func (pr *proc) release() *Finding {
	f := *pr.pending
	f.header = false
	if pr.exc != "" {
		f.Diagnosis = "vLLM's engine died: " + clip(strings.TrimSpace(payload(pr.exc)), 160) + f.where
		f.Line = pr.exc
	}
	pr.pending, pr.exc, pr.lines = nil, "", 0
	return &f
}

// Flush reports an engine failure still held back when the output ends (the container
// exited before its traceback did), or nil. Call it once the stream is over.
func (s *Scanner) Flush() *Finding {
	keys := make([]string, 0, len(s.procs))
	for k, pr := range s.procs {
		if pr.pending != nil {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Strings(keys)
	return s.procs[keys[0]].release()
}

func (s *Scanner) proc(source string) *proc {
	if s.procs == nil {
		s.procs = map[string]*proc{}
	}
	if len(source) > maxSourceKey {
		source = source[:maxSourceKey]
	}
	pr := s.procs[source]
	if pr == nil {
		if len(s.procs) >= maxProcs {
			for k, v := range s.procs {
				if v.pending == nil && !v.inTrace {
					delete(s.procs, k)
				}
			}
		}
		// Output that opens a traceback under a new prefix on every line would keep every
		// state busy: the table stays bounded anyway, forgetting states at random (a
		// held-back finding among them is lost, not the agent's memory).
		for k := range s.procs {
			if len(s.procs) < maxProcs {
				break
			}
			delete(s.procs, k)
		}
		pr = &proc{}
		s.procs[source] = pr
	}
	return pr
}
