package logscan

import (
	"fmt"
	"strings"
	"testing"
)

// #23 finding 5: output that opens a traceback under a new process prefix on every line (a
// container prints anything) keeps the scanner's table and its keys at their bounds.
func TestScannerProcessTableIsBounded(t *testing.T) {
	var s Scanner
	for i := 0; i < 4*maxProcs; i++ {
		s.Scan(fmt.Sprintf("(RayWorkerWrapper pid=%d, ip=10.0.0.1) Traceback (most recent call last):", i))
	}
	if len(s.procs) > maxProcs {
		t.Fatalf("%d process states kept, bound %d", len(s.procs), maxProcs)
	}
	// A prefix as long as a line is kept under a bounded key.
	long := strings.Repeat("x", 64<<10)
	for i := 0; i < 8; i++ {
		s.Scan(fmt.Sprintf("(RayWorkerWrapper pid=%d%s, ip=10.0.0.1) Traceback (most recent call last):", i, long))
	}
	for k := range s.procs {
		if len(k) > 256 {
			t.Fatalf("a state kept under a %d-byte key", len(k))
		}
	}
}
