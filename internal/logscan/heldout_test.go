package logscan

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// heldOutFloor is the least number of held-out failure lines that must classify right: the
// figure measured after issue 38's families (45/45; its last line, NCCL's proxy.cc warning,
// was fixed after it was seen missed, so this set no longer measures that family unseen).
const heldOutFloor = 45

// heldOut2Floor is the same for testdata/heldout2_lines.json, a second set gathered (issue 38)
// before the format-string families were written and measured once after.
const heldOut2Floor = 44

// heldOut3Floor and heldOut3NewestFloor are testdata/heldout3_lines.json's figures (issue 38's
// larger corpus), measured once on the classifier as it was when the set was gathered: 66 of
// its 70 fatal lines right, and 15 of the 16 in threads dated from newestSince on. Its threads
// are disjoint from every other set's; rules written after that measurement are measured on
// testdata/heldout4_lines.json.
const (
	heldOut3Floor       = 66
	heldOut3NewestFloor = 15
	newestSince         = "2025-03-01"
)

// TestHeldOut3 measures the third held-out set two ways: whole threads never seen (every
// row), and the newest threads by date (rows whose thread is dated from newestSince on).
func TestHeldOut3(t *testing.T) {
	measureHeldOutSet(t, 3, heldOut3Floor, 60, 100, heldOut3NewestFloor, 15, 50)
}

// heldOut4Floor and heldOut4NewestFloor are testdata/heldout4_lines.json's figures: a fresh set
// gathered after heldout3's misses were fixed, measured once before any rule was written from
// it: 22 of its 37 fatal lines right (15 missed, none wrong), 6 of the 12 dated from
// newestSince on, 0 false alarms on 68 ordinary lines. Rules written after that measurement
// do not count as measured here (docs/diagnosis.md).
const (
	heldOut4Floor       = 22
	heldOut4NewestFloor = 6
)

// TestHeldOut4 measures the fourth held-out set by thread and by date, like TestHeldOut3.
func TestHeldOut4(t *testing.T) {
	measureHeldOutSet(t, 4, heldOut4Floor, 30, 60, heldOut4NewestFloor, 10, 25)
}

// heldOut5Floor and heldOut5NewestFloor are testdata/heldout5_lines.json's figures: a fresh set
// gathered after heldout4's misses were fixed, measured once before any rule was written from
// it: 28 of its 31 fatal lines right (3 missed, none wrong), 10 of the 12 dated from
// newestSince on, 0 false alarms on 31 ordinary lines.
const (
	heldOut5Floor       = 28
	heldOut5NewestFloor = 10
)

// TestHeldOut5 measures the fifth held-out set by thread and by date, like TestHeldOut3.
func TestHeldOut5(t *testing.T) {
	measureHeldOutSet(t, 5, heldOut5Floor, 30, 30, heldOut5NewestFloor, 10, 15)
}

// heldOut6Floor and heldOut6NewestFloor are testdata/heldout6_lines.json's figures, a small
// fresh set gathered after heldout5's fixes, measured once: 11 of 13 fatal lines right (the
// two misses have the right type but read as a warning), 3 of 3 dated from newestSince on,
// 0 false alarms on 19 ordinary lines.
const (
	heldOut6Floor       = 11
	heldOut6NewestFloor = 3
)

// TestHeldOut6 measures the sixth held-out set by thread and by date, like TestHeldOut3.
func TestHeldOut6(t *testing.T) {
	measureHeldOutSet(t, 6, heldOut6Floor, 13, 19, heldOut6NewestFloor, 3, 6)
}

// TestHeldOut measures how the classifier generalizes: testdata/heldout_lines.json holds
// real lines from threads that testdata/real_lines.json never draws on (checked here), so
// no rule was written for them. A failure line is right when it gets its type and fatal
// verdict; an ordinary line classified at all is a false alarm.
func TestHeldOut(t *testing.T) {
	measureHeldOut(t, "testdata/heldout_lines.json", heldOutFloor, 40, 20)
}

// TestHeldOut2 measures the second held-out set the same way; its threads are also disjoint
// from the first held-out set's.
func TestHeldOut2(t *testing.T) {
	measureHeldOut(t, "testdata/heldout2_lines.json", heldOut2Floor, 40, 20, "testdata/heldout_lines.json")
}

// measureHeldOut classifies every row of file, logs each miss and false alarm, and fails
// below floor right, on any false alarm, or with fewer rows than asked. Threads of
// real_lines.json and of each file in disjoint must not occur in file.
func measureHeldOut(t *testing.T, file string, floor, minFailures, minOrdinary int, disjoint ...string) {
	t.Helper()
	measureRows(t, file, loadRows(t, file), floor, minFailures, minOrdinary, disjoint...)
}

// measureRows is measureHeldOut on rows already loaded (a file, or the part of one dated
// after a day), named name in its messages.
func measureRows(t *testing.T, file string, rows []realLine, floor, minFailures, minOrdinary int, disjoint ...string) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range loadRealLines(t) {
		seen[threadOf(r.Source)] = true
	}
	for _, d := range disjoint {
		for _, r := range loadRows(t, d) {
			seen[threadOf(r.Source)] = true
		}
	}
	right, failures, ordinary, alarms := 0, 0, 0, 0
	for i, r := range rows {
		if !r.Real || !strings.HasPrefix(r.Source, "https://github.com/") {
			t.Errorf("%s row %d: not a real line with a thread URL: %q", file, i, r.Source)
		}
		if seen[threadOf(r.Source)] {
			t.Errorf("%s row %d: thread %s is also in a set rules were written from", file, i, r.Source)
		}
		f := Classify(Parse(r.Line))
		if g := scanAlone(r.Line); (g == nil) != (f == nil) || g != nil && (g.Type != f.Type || g.Fatal != f.Fatal) {
			t.Errorf("%s row %d: a Scanner says %+v, Classify %+v: %q", file, i, g, f, r.Line)
		}
		if r.Type == "" {
			ordinary++
			if f != nil {
				alarms++
				t.Logf("false alarm: %s fatal=%v for %q (%s)", f.Type, f.Fatal, r.Line, r.Source)
			}
			continue
		}
		failures++
		switch {
		case f == nil:
			t.Logf("miss: want %s, got nothing: %q (%s)", r.Type, r.Line, r.Source)
		case f.Type != r.Type || f.Fatal != r.Fatal:
			t.Logf("miss: want %s fatal=%v, got %s fatal=%v: %q (%s)", r.Type, r.Fatal, f.Type, f.Fatal, r.Line, r.Source)
		default:
			right++
		}
	}
	if failures < minFailures || ordinary < minOrdinary {
		t.Errorf("%s too small: %d failure lines (want %d), %d ordinary (want %d)", file, failures, minFailures, ordinary, minOrdinary)
	}
	t.Logf("%s: %d/%d right, %d false alarms (%d ordinary lines)", file, right, failures, alarms, ordinary)
	if right < floor {
		t.Errorf("%s: %d/%d right, below the floor %d", file, right, failures, floor)
	}
	if alarms > knownAlarms[file] {
		t.Errorf("%s: %d false alarms, want at most %d", file, alarms, knownAlarms[file])
	}
}

// scanAlone is a fresh Scanner's verdict on one line, flushed.
func scanAlone(line string) *Finding {
	var s Scanner
	if _, f := s.Scan(line); f != nil {
		return f
	}
	return s.Flush()
}

// loadRows reads a file of realLine rows.
func loadRows(t testing.TB, file string) []realLine {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rows []realLine
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

// threadOf is a source without a "#..." anchor, so two rows of one thread compare equal.
func threadOf(src string) string {
	if i := strings.IndexByte(src, '#'); i >= 0 {
		src = src[:i]
	}
	return strings.TrimSuffix(src, "/")
}

// heldOut7Floor and heldOut7NewestFloor are testdata/heldout7_lines.json's figures, a fresh set
// gathered after heldout6 (threads disjoint from every other set), measured once before any
// rule was written from it: 30 of its 30 failure lines right (28 fatal, 2 warnings), 5 of the
// 5 dated from newestSince on, 0 false alarms on 45 ordinary lines (one of them vLLM's
// misleading `Error retrieving file list: Repo id must use ...` retry, vllm PR 13266).
const (
	heldOut7Floor       = 30
	heldOut7NewestFloor = 5
)

// TestHeldOut7 measures the seventh held-out set by thread and by date, like TestHeldOut3.
func TestHeldOut7(t *testing.T) {
	measureHeldOutSet(t, 7, heldOut7Floor, 25, 25, heldOut7NewestFloor, 5, 10)
}

// measureHeldOutSet measures testdata/heldoutN_lines.json two ways, each against its floor
// and its least counts of fatal and ordinary lines: by thread (every row; no thread may be in
// an earlier set) and by date (the rows newestOf keeps).
func measureHeldOutSet(t *testing.T, n, floor, fatal, benign, newestFloor, newestFatal, newestBenign int) {
	t.Helper()
	file := heldOutFile(n)
	rows := loadRows(t, file)
	earlier := []string{"testdata/heldout_lines.json"}
	for i := 2; i < n; i++ {
		earlier = append(earlier, heldOutFile(i))
	}
	t.Run("ByThread", func(t *testing.T) {
		measureRows(t, file, rows, floor, fatal, benign, earlier...)
	})
	t.Run("ByDate", func(t *testing.T) {
		measureRows(t, file+" (threads from "+newestSince+")", newestOf(rows), newestFloor, newestFatal, newestBenign)
	})
}

// heldOutFile is the Nth held-out set's file (the first is heldout_lines.json).
func heldOutFile(n int) string { return fmt.Sprintf("testdata/heldout%d_lines.json", n) }

// newestOf is the rows whose thread is dated from newestSince on: the by-date measure.
func newestOf(rows []realLine) []realLine {
	var newest []realLine
	for _, r := range rows {
		if r.Date >= newestSince {
			newest = append(newest, r)
		}
	}
	return newest
}

// heldOut8Floor and heldOut8NewestFloor are testdata/heldout8_lines.json's figures, a fresh set
// gathered after heldout7 (threads disjoint from every other set), measured once before any
// rule was written from it: 39 of its 56 fatal lines right (16 missed, 1 wrong type: NCCL's
// `Cuda failure 'out of memory'` read as NCCLError), 16 of the 20 dated from newestSince on,
// 0 false alarms on 123 ordinary lines. A thread's date is its page's where the search showed
// one, else the log's own date where the vLLM issue number places the thread in that month.
const (
	heldOut8Floor       = 39
	heldOut8NewestFloor = 16
)

// TestHeldOut8 measures the eighth held-out set by thread and by date, like TestHeldOut3.
func TestHeldOut8(t *testing.T) {
	measureHeldOutSet(t, 8, heldOut8Floor, 50, 100, heldOut8NewestFloor, 15, 20)
}

// heldOut9Floor and heldOut9NewestFloor are testdata/heldout9_lines.json's figures, a fresh set
// gathered after heldout8's fixes (threads disjoint from every other set), measured once
// before any rule was written from it: 30 of its 38 fatal lines right (8 missed, none wrong:
// Docker's `unknown or invalid runtime name: nvidia` in four threads, NVML's driver/library
// mismatch, a CUDA sample's `only 0 Devices available`, a c10d store waiting for workers, a
// requests ConnectionError to huggingface.co), 13 of the 16 dated from newestSince on, 0 false
// alarms on 57 ordinary lines.
const (
	heldOut9Floor       = 30
	heldOut9NewestFloor = 13
)

// TestHeldOut9 measures the ninth held-out set by thread and by date, like TestHeldOut3.
func TestHeldOut9(t *testing.T) {
	measureHeldOutSet(t, 9, heldOut9Floor, 35, 50, heldOut9NewestFloor, 15, 20)
}

// heldOut10Floor and heldOut10NewestFloor are testdata/heldout10_lines.json's figures, a fresh
// set gathered after heldout9's fixes (threads disjoint from every other set), measured once
// before any rule was written from it: 20 of its 22 fatal lines right (2 missed, none wrong:
// Docker's old `could not select device driver with capabilities` without a driver name, and
// a raylet's `Workers (tasks / actors) killed due to memory pressure (OOM)`, a type logscan
// does not read), 10 of the 11 dated from newestSince on, 0 false alarms on 26 ordinary lines.
// Dates are the page's; gpustack#1800 has its vLLM log's date (04-17, the issue number placing
// it in 2025). Lines a terminal wrapped (VLM-R1#257) are joined back into the one line printed.
const (
	heldOut10Floor       = 20
	heldOut10NewestFloor = 10
)

// TestHeldOut10 measures the tenth held-out set by thread and by date, like TestHeldOut3.
func TestHeldOut10(t *testing.T) {
	measureHeldOutSet(t, 10, heldOut10Floor, 20, 20, heldOut10NewestFloor, 10, 10)
}

// heldOut11Floor and heldOut11NewestFloor are testdata/heldout11_lines.json's figures, a fresh
// set gathered after the families for moby's unquoted device-driver error, Ray's OOM kill and
// cuda-samples' device count (threads disjoint from every other set and from every thread cited
// in the rules), labelled by the operator's fix before the classifier ran on it, and measured once:
// 45 of its 61 failure lines right (16 missed, none wrong: vLLM's `WorkerProc initialization failed`
// in three threads, NCCL WARNs in wordings no family reads (`Failed to CUDA calloc`, `Got async
// event : port error`, `Bootstrap Root : rank … has already checked in`, `communicator encountered a
// fatal error`, `async fatal event on QP`, a bare `socketPollConnect: connect to … returned`, two
// ACCL `init.cc:1815 -> 5` lines), Ray's autoscaler `No available node types can fulfill resource
// request`, Ray 2.5x's `Task failed because the node it was running on is dead`, a hub 403 from a
// mirror, transformers' `Incorrect path_or_model_id`, and a negative `Available KV cache memory`),
// 15 of the 22 dated from newestSince on, 0 false alarms on 148 ordinary lines.
const (
	heldOut11Floor       = 45
	heldOut11NewestFloor = 15
)

// TestHeldOut11 measures the eleventh held-out set by thread and by date, like TestHeldOut3.
func TestHeldOut11(t *testing.T) {
	measureHeldOutSet(t, 11, heldOut11Floor, 60, 140, heldOut11NewestFloor, 20, 45)
}

// heldOut12Floor and heldOut12NewestFloor are testdata/heldout12_lines.json's figures (session
// 12): a fresh set gathered after the families for heldout11's last misses, from threads in no
// earlier set, none cited in the rules or docs (checked before a thread's lines were read),
// labelled by the operator's fix before the classifier ran on it, and measured once: 35 of its 39
// failure lines right (4 missed, none wrong: Portainer's rendering of moby's device-driver error
// with a space before its colons, a requests ConnectionError whose nested repr escapes the
// host's quotes, runc's failed NVIDIA prestart hook, and Ray's `ray.exceptions.OutOfMemoryError:
// Task was killed due to the node running low on memory` alone), 18 of the 20 dated from
// newestSince on, 0 false alarms on 61 ordinary lines. Lines cut where the search's excerpt
// ended are kept as cut (a prefix of the line printed).
const (
	heldOut12Floor       = 35
	heldOut12NewestFloor = 18
)

// TestHeldOut12: the twelfth held-out set, measured by thread and by date like TestHeldOut3.
func TestHeldOut12(t *testing.T) {
	measureHeldOutSet(t, 12, heldOut12Floor, 35, 55, heldOut12NewestFloor, 20, 20)
}

// heldOut13Floor and heldOut13NewestFloor are testdata/heldout13_lines.json's figures (session
// 12): a second fresh set, gathered after heldout12's fixes the same way (threads in no earlier
// set and cited nowhere, checked before their lines were read; labelled before the classifier
// ran), and measured once: 18 of its 21 failure lines right, 10 of the 10 dated from newestSince
// on, 0 false alarms on 45 ordinary lines. Its misses, left open (no rule was written from this
// set, so it still measures every family unseen): nvidia-docker's `no NVIDIA GPU device is
// present: /dev/nvidia0 does not exist` (an issue title), the hub's `User Access Token "…" is
// expired`, and one wrong type: a 401 for a repository that does not exist on the Hub (a
// ModelScope id, vllm#7986) read as ModelUnavailable, which the hub's 401 for an unauthenticated
// request cannot tell apart from a refused token. Session 13 then gave the three families from
// their source (huggingface_hub's hf_raise_for_status reads that 401 as RepositoryNotFoundError, so
// its rows are ModelNotFound now), after which this set scores 21/21 and 10/10 and no longer
// measures them; the floors stay the first measurement.
const (
	heldOut13Floor       = 18
	heldOut13NewestFloor = 10
)

// TestHeldOut13: the thirteenth held-out set, measured by thread and by date like TestHeldOut3.
func TestHeldOut13(t *testing.T) {
	measureHeldOutSet(t, 13, heldOut13Floor, 20, 40, heldOut13NewestFloor, 10, 15)
}

// heldOut14Floor and heldOut14NewestFloor are testdata/heldout14_lines.json's figures (session
// 13): a fresh set of 94 rows from 43 threads in no earlier set and cited nowhere (checked before
// their lines were read), gathered after heldout13's families, labelled by the operator's fix
// before the classifier ran on it, and measured once: 24 of its 29 failure lines right (5 missed,
// none wrong: libnvidia-container's `change root failed` in an issue title, runc's hook error cut
// after the toolkit's `Auto-detected mode as 'legacy'` in two threads (the cause is on the next
// line), TCPStore's bare `RuntimeError: Socket Timeout`, and moby's device-driver error cut after
// `with capabilities:` in an issue title), 6 of the 6 dated from newestSince on, 0 false alarms on
// 65 ordinary lines. One row (LLM-VM#423's bare 401) was labelled by session 13's own decision on
// that 401, so it does not measure that rule unseen.
// Families were then written for the first four misses from their format strings (runc's hook
// errors, libnvidia-container's warnx prefix, moby's text cut at the colon): 28/29 and 6/6 after,
// figures that no longer measure them; the floors stay the first measurement.
const (
	heldOut14Floor       = 24
	heldOut14NewestFloor = 6
)

// TestHeldOut14: the fourteenth held-out set, measured by thread and by date like TestHeldOut3.
func TestHeldOut14(t *testing.T) {
	measureHeldOutSet(t, 14, heldOut14Floor, 25, 60, heldOut14NewestFloor, 6, 14)
}

// heldOut15Floor and heldOut15NewestFloor are testdata/heldout15_lines.json's figures (session
// 14): 217 rows from 108 threads in no earlier set and cited nowhere in the tree (checked by URL
// and repo#N before a thread's lines were read), labelled by the operator's fix and committed
// before the classifier ran on them, then measured once: 40 of its 66 failure lines right (26
// missed, none wrong: Docker/podman's CDI `unresolvable CDI devices` in six threads, NVML's
// `Failed to initialize NVML: Unknown Error` after a daemon-reload in four, the toolkit's
// `requirement error: unsatisfied condition: cuda>=…` without its program's prefix in two, TCPStore's
// `Socket Timeout` (bare, and as store->get's error) in three, NCCL WARNs of proxy.cc, bootstrap.cc,
// shm and an old net_ib.cc wording, Ray's ActorDiedError, a cut watchdog line, vLLM's placement-group
// wait with the pin after GPU, a title without numbers, a runc hook error cut before its stderr, a
// requests ConnectionError pasted with its frame), 8 of the 17 dated from newestSince on, 0 false
// alarms on 151 ordinary lines. Rules written after this measurement do not count as measured here:
// families from the formats' upstream sources (families.go, heldout15Families) then bring it to 63/66
// and 17/17; the three left (proxy.cc's `[Service thread] Accept failed`, which NCCL's own code
// carries on from and 2.30 prints at INFO; a runc hook error cut before the hook's stderr; a requests
// ConnectionError pasted on one line with its traceback frame) are described in docs/diagnosis.md.
const (
	heldOut15Floor       = 40
	heldOut15NewestFloor = 8
)

// TestHeldOut15: the fifteenth held-out set, measured by thread and by date like TestHeldOut3.
func TestHeldOut15(t *testing.T) {
	measureHeldOutSet(t, 15, heldOut15Floor, 60, 140, heldOut15NewestFloor, 15, 45)
}

// heldOut16Floor and heldOut16NewestFloor are testdata/heldout16_lines.json's figures, a
// fresh set gathered after heldout15's fixes (session 17: 321 rows from 100 threads, 68
// fatal), committed (in 0525ad1) before the classifier ran on it and measured once: 39 of
// 68 fatal lines right, 15 of the 24 dated from newestSince on, 2 false alarms on 253
// ordinary lines (an IPython traceback header, and gpustack's logged-and-caught "Failed to
// derive max model length"). Rules written after this measurement do not count as measured
// here: families for c10d's listen failure, Docker's daemon and socket errors and moby's
// pull refusal, and the two lines above read as no failure, bring it to 55/68 and 20/24
// with no false alarm (docs/diagnosis.md).
const (
	heldOut16Floor       = 39
	heldOut16NewestFloor = 15
)

// TestHeldOut16: the sixteenth held-out set, measured by thread and by date like TestHeldOut3.
func TestHeldOut16(t *testing.T) {
	measureHeldOutSet(t, 16, heldOut16Floor, 60, 200, heldOut16NewestFloor, 20, 40)
}

// heldOut17Floor and heldOut17NewestFloor are testdata/heldout17_lines.json's figures, a
// fresh set gathered after heldout16's fixes (session 17: 288 rows from 99 threads, 80
// fatal), committed (4a918d5) before the classifier ran on it and measured once: 56 of 80
// fatal lines right, 21 of the 30 dated from newestSince on, 1 false alarm on 208 ordinary
// lines (knownAlarms). Rules written after (Kubernetes' and KAI's unschedulable GPU events,
// Gloo's recv timeout, Ray's OOM summary cut before its node) bring it to 62/80 and 24/30;
// session 18's (CPython's errno 28 and 98 OSErrors, asyncio's bind error, TensorRT-LLM's
// CUDA runtime OOM) to 70/80 and 26/30. Those no longer count as measured here.
const (
	heldOut17Floor       = 56
	heldOut17NewestFloor = 21
)

// knownAlarms are the false alarms a set had when first measured and that no rule was
// written against; every other set must have none. heldout17's: open-webui's "Cannot
// determine model snapshot path: … outgoing traffic has been disabled", labelled ordinary
// (open-webui logs it with log.exception and returns the name), read as ModelOffline; some
// open-webui releases re-raise it in offline mode (`if OFFLINE_MODE: raise`,
// open_webui/retrieval/utils.py get_model_path), so the line alone cannot tell which, and
// the measured label stands.
//
// heldout18's: the hub client's "Please make sure you specified the correct `repo_id` and
// `repo_type`. If you are trying to access a private or gated repo, make sure you are
// authenticated. Invalid username or password.", which the set labels ordinary (the
// continuation of the exception's message, whose own line carries the verdict) and the
// classifier reads as ModelGated; the label stands.
var knownAlarms = map[string]int{"testdata/heldout17_lines.json": 1, "testdata/heldout18_lines.json": 1}

// TestHeldOut17: the seventeenth held-out set, measured by thread and by date like TestHeldOut3.
func TestHeldOut17(t *testing.T) {
	measureHeldOutSet(t, 17, heldOut17Floor, 70, 180, heldOut17NewestFloor, 25, 40)
}

// TestHeldOut18: the eighteenth held-out set, measured by thread and by date like TestHeldOut3.
func TestHeldOut18(t *testing.T) {
	measureHeldOutSet(t, 18, heldOut18Floor, 70, 180, heldOut18NewestFloor, 20, 60)
}

// heldOut18Floor and heldOut18NewestFloor are testdata/heldout18_lines.json's figures, a
// fresh set gathered in session 18 after heldout17's fixes (258 rows from 104 threads, 72
// fatal), committed (6b30813) before the classifier ran on it and measured once: 56 of 72
// fatal lines right, 21 of the 24 dated from newestSince on, 1 false alarm on 186 ordinary
// lines (knownAlarms). The families written from its misses afterwards (session 19,
// heldout18Families and two engine headers) make it 66 and 23, figures that no longer
// measure those families.
const (
	heldOut18Floor       = 66
	heldOut18NewestFloor = 23
)

// TestHeldOut19: the nineteenth held-out set, measured by thread and by date like TestHeldOut3.
func TestHeldOut19(t *testing.T) {
	measureHeldOutSet(t, 19, heldOut19Floor, 39, 80, heldOut19NewestFloor, 12, 28)
}

// heldOut19Floor and heldOut19NewestFloor are testdata/heldout19_lines.json's figures, a
// fresh set gathered in session 19 after heldout18's fixes (119 rows from 63 threads, 39
// fatal), committed (4460d91) before the classifier ran on it and measured once: 36 of 39
// fatal lines right, 11 of the 12 dated from newestSince on, no false alarm on 80 ordinary
// lines (the same before and after heldout18's families). The V0 engine's death lines written
// from its misses afterwards make it 38 of 39, a figure that no longer measures them.
const (
	heldOut19Floor       = 38
	heldOut19NewestFloor = 11
)

// TestHeldOut20: the twentieth held-out set, measured by thread and by date like TestHeldOut3.
func TestHeldOut20(t *testing.T) {
	measureHeldOutSet(t, 20, heldOut20Floor, 29, 77, heldOut20NewestFloor, 8, 35)
}

// heldOut20Floor and heldOut20NewestFloor are testdata/heldout20_lines.json's figures, a
// fresh set gathered in session 19 after heldout19's fixes (106 rows from 59 threads, 29
// fatal), committed (7a3cea1) before the classifier ran on it and measured once: 19 of 29
// fatal lines right, 7 of the 8 dated from newestSince on, 1 false alarm on 77 ordinary lines,
// the classifier's own error (vLLM's local-GPU warning read as InsufficientGPUs), since fixed.
// The families written from its misses afterwards (the device plugin's NVML, the toolkit's
// hook, FasterTransformer's OOM, RaySystemError, transformers' AutoModel) make it 28 and 8,
// figures that no longer measure them.
const (
	heldOut20Floor       = 28
	heldOut20NewestFloor = 8
)

// TestHeldOut21: the twenty-first held-out set, measured by thread and by date like TestHeldOut3.
func TestHeldOut21(t *testing.T) {
	measureHeldOutSet(t, 21, heldOut21Floor, 52, 108, heldOut21NewestFloor, 26, 46)
}

// heldOut21Floor and heldOut21NewestFloor are testdata/heldout21_lines.json's figures, a
// fresh set gathered in session 19 after heldout20's fixes (160 rows from 91 threads, 52
// fatal), committed (f98e114) before the classifier ran on it and measured once: 34 of 52
// fatal lines right, 19 of the 26 dated from newestSince on, no false alarm on 108 ordinary
// lines. The families written from its misses afterwards (torch's watchdog dump, c10d's
// unresolved host, the hub's disk-space warning, urllib3's connect timeout to the Hub) make it
// 39 and 21, figures that no longer measure them.
const (
	heldOut21Floor       = 39
	heldOut21NewestFloor = 21
)
