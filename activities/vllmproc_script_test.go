package activities

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// wrapperScript is the wrapper's scripts with their directory in dir, run by this
// machine's /bin/sh as the container's would be.
func wrapperScript(t *testing.T, dir, script string, args ...string) *exec.Cmd {
	t.Helper()
	argv := shScript(strings.ReplaceAll(script, vllmDir, dir), args...)
	return exec.Command(argv[0], argv[1:]...)
}

func readStatus(t *testing.T, dir string) vllmStatus {
	t.Helper()
	out, err := wrapperScript(t, dir, vllmStatusScript).Output()
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseVLLMStatus(string(out))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// vLLM ends on its own and a launch follows while the old wrapper has not yet recorded the
// exit (here: it is stopped). The launch waits for it; the old wrapper's exit code and
// lock release land before the new vLLM starts, not over its state: the new vLLM holds
// the lock, so another launch leaves it alone instead of starting a second one.
func TestALaunchWaitsForTheWrapperOfAVLLMThatJustEnded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vllm")
	// The first "vLLM" stops its wrapper, then exits 7: the wrapper sits between wait and
	// its exit record.
	first := wrapperScript(t, dir, vllmLaunchScript, "h1", "/bin/sh", "-c", "sleep 0.5; kill -STOP $PPID; exit 7")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Process.Kill(); _, _ = first.Process.Wait() })
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not so after 10s: %s", what)
			}
		}
	}
	eventually("the first wrapper stopped with its vLLM gone", func() bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(first.Process.Pid), "stat"))
		return err == nil && strings.Fields(string(b))[2] == "T" && readStatus(t, dir).State == "gone"
	})

	second := wrapperScript(t, dir, vllmLaunchScript, "h2", "/bin/sh", "-c", "exec sleep 30")
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Process.Kill(); _, _ = second.Process.Wait() })
	time.Sleep(time.Second)
	if st := readStatus(t, dir); st.State == "running" {
		t.Fatalf("the second launch started while the first wrapper still held the lock: %+v", st)
	}
	if err := first.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("the first wrapper: %v", err)
	}
	eventually("the second vLLM running", func() bool { return readStatus(t, dir).State == "running" })
	st := readStatus(t, dir)
	if st.Hash != "h2" {
		t.Fatalf("running %+v, want the second launch's", st)
	}
	if _, err := os.Stat(filepath.Join(dir, "exit")); err == nil {
		t.Errorf("an exit code is recorded while the second vLLM runs")
	}
	// A third launch of another hash finds the lock held by a live vLLM and starts nothing.
	if out, err := wrapperScript(t, dir, vllmLaunchScript, "h3", "/bin/sh", "-c", "exit 0").CombinedOutput(); err != nil {
		t.Fatalf("third launch: %v %s", err, out)
	}
	if after := readStatus(t, dir); after != st {
		t.Errorf("after a third launch: %+v, want the second vLLM still running alone", st)
	}

	// The stop returns once the wrapper has recorded vLLM's exit: SIGTERM's 143.
	if out, err := wrapperScript(t, dir, vllmStopScript, "5").CombinedOutput(); err != nil {
		t.Fatalf("stop: %v %s", err, out)
	}
	if st := readStatus(t, dir); st.State != "exited" || st.ExitCode != 143 {
		t.Errorf("after the stop: %+v, want exited 143", st)
	}
}
