package activities

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
)

// vLLM's driver runs inside the Ray head's container: a Ray driver attaches to its node's
// raylet through Unix sockets in the session directory of the container that runs Ray, and
// finds its node by the IP `ray start --node-ip-address` recorded there (upstream.md §7;
// vLLM's run_cluster.sh and docs do the same with `docker exec`). What a container of its
// own gave is kept by a fixed wrapper in the head's container: vLLM's output goes to a file
// that outlives the agent and is read by byte offset; a pid file (with the process's start
// time, so a reused pid is not mistaken for vLLM) and a lock keep a retried launch from
// starting a second vLLM; the exit code is written when vLLM ends; a stop is SIGTERM, then
// SIGKILL after a grace period. No spec value is ever part of a script: vLLM's argument
// vector is passed as "$@", and the only other arguments are numbers.

// vllmDir is where the wrapper keeps vLLM's pid, exit code, lock and output in the head's
// container.
const vllmDir = "/tmp/tpdeploy/vllm"

// vllmConfigRoot is the driver's VLLM_CONFIG_ROOT when the plan stops vLLM's copy of some
// variables (its ray_non_carry_over_env_vars.json lives there).
const vllmConfigRoot = "/tmp/tpdeploy/vllm-config"

// vllmPrelude defines alive, which sets pid and says whether the recorded vLLM runs, and
// status, which prints "running PID", "exited CODE", "gone" (recorded but neither running
// nor finished: killed with its wrapper) or "none".
const vllmPrelude = `d=` + vllmDir + `
alive() {
  [ -s "$d/pid" ] || return 1
  read -r pid start <"$d/pid" || return 1
  # The process may exit between any two reads: a vanished stat is "not alive", not output.
  # A zombie has ended too; only its wrapper has not reaped it yet.
  stat=$(cut -d' ' -f3,22 "/proc/$pid/stat" 2>/dev/null)
  [ "${stat#* }" = "$start" ] && [ "${stat%% *}" != Z ]
}
status() {
  if alive; then echo "running $pid $(cat "$d/hash" 2>/dev/null)"
  # Read once: a launch may remove the file between a test and a read.
  elif code=$(cat "$d/exit" 2>/dev/null); then echo "exited $code"
  elif [ -f "$d/pid" ]; then echo gone
  else echo none; fi
}
# wrapper_alive says whether the wrapper that holds the lock still runs (its pid and start
# time in lock/owner, as vLLM's in pid).
wrapper_alive() {
  read -r wpid wstart <"$d/lock/owner" 2>/dev/null || return 1
  [ "$(cut -d' ' -f22 "/proc/$wpid/stat" 2>/dev/null)" = "$wstart" ]
}
`

// vllmLaunchScript starts "$@" after its first argument (vllm serve ...) once: a live vLLM
// is left alone. The first argument is the launch's hash, recorded so that a later launch
// can tell whether the running vLLM is the one it wants.
const vllmLaunchScript = vllmPrelude + `h=$1
shift
me="$$ $(cut -d' ' -f22 "/proc/$$/stat")"
mkdir -p "$d" || exit 1
if ! mkdir "$d/lock" 2>/dev/null; then
  # The lock's wrapper may be one whose vLLM just ended, still recording the exit: wait
  # for it to free the lock, else its exit code lands over this launch's state (bounded:
  # a wrapper frozen, or killed with its container, never frees it).
  i=0
  while ! alive && wrapper_alive && [ "$i" -lt 50 ]; do i=$((i + 1)); sleep 0.1; done
  if alive; then exit 0; fi
  if ! mkdir "$d/lock" 2>/dev/null; then
    rm -rf "$d/lock"
    mkdir "$d/lock" 2>/dev/null || exit 0
  fi
fi
echo "$me" >"$d/lock/owner"
rm -f "$d/exit" "$d/pid"
echo "$h" >"$d/hash"
[ -f "$d/log" ] && mv "$d/log" "$d/log.prev"
: >"$d/log"
"$@" </dev/null >>"$d/log" 2>&1 &
pid=$!
echo "$pid $(cut -d' ' -f22 "/proc/$pid/stat")" >"$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid"
wait "$pid"
code=$?
# Only while the lock is still this wrapper's (a launch that waited past the bound took it
# over); the code written whole, so a reader never sees an empty one, before the lock is
# freed.
if [ "$(cat "$d/lock/owner" 2>/dev/null)" = "$me" ]; then
  echo "$code" >"$d/exit.tmp" && mv "$d/exit.tmp" "$d/exit"
  rm -rf "$d/lock"
fi
`

// vllmStatusScript prints vLLM's status.
const vllmStatusScript = vllmPrelude + "status\n"

// vllmReadScript prints up to $2 bytes of vLLM's output from byte offset $1 on stdout and
// vLLM's status on stderr (status first, so no output written before it is missed).
const vllmReadScript = vllmPrelude + `status >&2
[ -f "$d/log" ] && tail -c +"$(($1 + 1))" "$d/log" | head -c "$2"
exit 0
`

// vllmStopScript stops vLLM: SIGTERM, then SIGKILL after $1 seconds.
const vllmStopScript = vllmPrelude + `alive || exit 0
kill -TERM "$pid" 2>/dev/null
i=0
while alive; do
  i=$((i + 1))
  if [ "$i" -gt "$1" ]; then kill -KILL "$pid" 2>/dev/null; sleep 1; break; fi
  sleep 1
done
# The wrapper records the exit just after vLLM ends: a stop returns once it has, so the
# status a caller reads next is the exit (bounded, as a launch's wait).
i=0
while wrapper_alive && [ "$i" -lt 50 ]; do i=$((i + 1)); sleep 0.1; done
exit 0
`

// vllmStatus is what the status script said.
type vllmStatus struct {
	State    string // running, exited, gone, none
	PID      int
	Hash     string // of the running vLLM's launch
	ExitCode int
}

func parseVLLMStatus(s string) (vllmStatus, error) {
	f := strings.Fields(strings.TrimSpace(s))
	if len(f) == 0 {
		return vllmStatus{}, fmt.Errorf("vllm status: no answer")
	}
	st := vllmStatus{State: f[0]}
	switch {
	case f[0] == "running" && (len(f) == 2 || len(f) == 3):
		st.PID, _ = strconv.Atoi(f[1])
		if len(f) == 3 {
			st.Hash = f[2]
		}
	case f[0] == "exited" && len(f) == 2:
		st.ExitCode, _ = strconv.Atoi(f[1])
	case f[0] == "gone", f[0] == "none":
	default:
		return st, fmt.Errorf("vllm status: unexpected %q", s)
	}
	return st, nil
}

// launchHash identifies a vLLM launch: its argument vector, its environment and what vLLM
// must not copy to its workers. A running vLLM with the same hash is adopted; one with
// another is replaced.
func launchHash(argv, env, noCarryOver []string) string {
	b, _ := json.Marshal([][]string{argv, env, noCarryOver})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// execResult is what a command run in a container printed and how it ended.
type execResult struct {
	Stdout, Stderr string
	ExitCode       int
}

// execIn runs cmd in a running container, waits for it and returns its output.
func execIn(ctx context.Context, eng containerEngine, container string, cmd, env []string) (execResult, error) {
	// The output is read to its end: an engine that hangs mid-stream must not hold the step.
	ctx, cancel := context.WithTimeout(ctx, 2*engineCallTimeout)
	defer cancel()
	ex, err := eng.ExecCreate(ctx, container, client.ExecCreateOptions{Cmd: cmd, Env: env, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return execResult{}, err
	}
	att, err := eng.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return execResult{}, err
	}
	out, errOut, err := readExecOutput(ctx, att)
	if err != nil {
		return execResult{}, err
	}
	res := execResult{Stdout: out, Stderr: errOut}
	// The output ended: the process is ending; its exit code follows at once.
	for i := 0; i < 50; i++ {
		in, err := eng.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		if err != nil {
			return res, err
		}
		if !in.Running {
			res.ExitCode = in.ExitCode
			return res, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return res, fmt.Errorf("exec %s: still running after its output ended", cmd[0])
}

// maxExecOutput bounds what the agent keeps of one exec's stdout and of its stderr: the
// read script prints at most maxRead bytes, ray status a few kilobytes. A process in the
// container (which runs whatever the model brings) can print without end; the agent
// stops reading at the bound and fails the exec.
const maxExecOutput = maxRead + 64<<10

// errExecOutput is an exec that printed more than maxExecOutput.
var errExecOutput = fmt.Errorf("exec output over %d bytes: refused", maxExecOutput)

// cappedBuffer keeps at most max bytes and fails the write that would pass them.
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.buf.Len()+len(p) > c.max {
		n, _ := c.buf.Write(p[:c.max-c.buf.Len()])
		return n, errExecOutput
	}
	return c.buf.Write(p)
}

// readExecOutput reads an attached exec's stdout and stderr to their end, each at most
// maxExecOutput, and closes it. The read ends with ctx: closing the connection is what
// unblocks a read an engine (or a container) never answers.
func readExecOutput(ctx context.Context, att client.ExecAttachResult) (string, string, error) {
	defer att.Close()
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()
	out, errOut := &cappedBuffer{max: maxExecOutput}, &cappedBuffer{max: maxExecOutput}
	if _, err := stdcopy.StdCopy(out, errOut, att.Reader); err != nil {
		if ctx.Err() != nil {
			return "", "", fmt.Errorf("exec output: %w", context.Cause(ctx))
		}
		return "", "", err
	}
	return out.buf.String(), errOut.buf.String(), nil
}

// execDetached starts cmd in a running container and returns without waiting.
func execDetached(ctx context.Context, eng containerEngine, container string, cmd, env []string) error {
	ex, err := eng.ExecCreate(ctx, container, client.ExecCreateOptions{Cmd: cmd, Env: env})
	if err != nil {
		return err
	}
	_, err = eng.ExecStart(ctx, ex.ID, client.ExecStartOptions{Detach: true})
	return err
}

func shScript(script string, args ...string) []string {
	return append([]string{"/bin/sh", "-c", script, "tpdeploy"}, args...)
}

// vllmProcStatus asks the head's container whether vLLM runs.
func vllmProcStatus(ctx context.Context, eng containerEngine, container string) (vllmStatus, error) {
	r, err := execIn(ctx, eng, container, shScript(vllmStatusScript), nil)
	if err != nil {
		return vllmStatus{}, err
	}
	if r.ExitCode != 0 {
		return vllmStatus{}, fmt.Errorf("vllm status in %s: exit %d: %s", container, r.ExitCode, strings.TrimSpace(r.Stderr))
	}
	return parseVLLMStatus(r.Stdout)
}

// nonCarryOverArchive is a tar holding vLLM's ray_non_carry_over_env_vars.json (a JSON
// list of names), to be extracted at /.
func nonCarryOverArchive(names []string) ([]byte, error) {
	body, err := json.Marshal(names)
	if err != nil {
		return nil, err
	}
	return fileArchive(vllmConfigRoot+"/ray_non_carry_over_env_vars.json", body)
}

// vllmOutput reads vLLM's output in the head's container from a byte offset, in bounded
// chunks, with vLLM's status as of before the read.
type vllmOutput struct {
	eng       containerEngine
	container string
}

// maxRead bounds one read of vLLM's output; maxLine bounds one delivered line. A longer
// line is delivered once, as its first maxLine bytes followed by truncationMark (which
// says so and how long the line was, or that it was longer than a read), never cut
// silently nor split into two lines: the read after one that ended inside a line drops the
// rest of it.
const (
	maxRead = 1 << 20
	maxLine = 256 << 10
)

// truncationMark ends a delivered line that was longer than maxLine.
const truncationMark = " …[tpdeploy: line truncated at %d of its %s bytes]"

// read returns the complete lines from offset (and the offset after them) and the status.
// A partial last line is left for the next read. A read from offset > 0 starts one byte
// earlier: that byte says whether offset starts a line or lies inside one a previous read
// delivered truncated.
func (o vllmOutput) read(ctx context.Context, offset int64) ([]string, int64, vllmStatus, error) {
	from, n := offset, maxRead
	if offset > 0 {
		from, n = offset-1, maxRead+1
	}
	r, err := execIn(ctx, o.eng, o.container, shScript(vllmReadScript, strconv.FormatInt(from, 10), strconv.Itoa(n)), nil)
	if err != nil {
		return nil, offset, vllmStatus{}, err
	}
	st, err := parseVLLMStatus(r.Stderr)
	if err != nil {
		return nil, offset, st, fmt.Errorf("%v (exit %d)", err, r.ExitCode)
	}
	data, lineStart := r.Stdout, true
	if offset > 0 {
		if data == "" {
			return nil, offset, st, nil
		}
		data, lineStart = data[1:], data[0] == '\n'
	}
	lines, next := splitOutput(data, offset, lineStart)
	return lines, next, st, nil
}

// splitOutput splits data, read from offset (at most maxRead bytes), into complete lines
// and the offset after them. lineStart says offset starts a line; when it does not, the
// bytes up to the next newline are the rest of a line delivered truncated, and are dropped.
func splitOutput(data string, offset int64, lineStart bool) ([]string, int64) {
	if !lineStart {
		i := strings.IndexByte(data, '\n')
		if i < 0 {
			return nil, offset + int64(len(data))
		}
		data, offset = data[i+1:], offset+int64(i+1)
	}
	end := strings.LastIndexByte(data, '\n')
	if end < 0 {
		if len(data) < maxRead {
			return nil, offset
		}
		// One line longer than a read: its head now, the rest dropped by the next reads.
		return []string{cutLine(data, fmt.Sprintf("more than %d", maxRead))}, offset + int64(len(data))
	}
	lines := strings.Split(data[:end], "\n")
	for i, l := range lines {
		if len(l) > maxLine {
			lines[i] = cutLine(l, strconv.Itoa(len(l)))
		}
	}
	return lines, offset + int64(end) + 1
}

// cutLine is l's first maxLine bytes (back to a UTF-8 character's start) and the mark.
func cutLine(l, length string) string {
	n := maxLine
	for n > 0 && !utf8.RuneStart(l[n]) {
		n--
	}
	return l[:n] + fmt.Sprintf(truncationMark, maxLine, length)
}

// launchLocks serialise launches per container within one agent; the wrapper's lock
// covers launches from different processes.
var launchLocks sync.Map

func launchLock(container string) *sync.Mutex {
	m, _ := launchLocks.LoadOrStore(container, &sync.Mutex{})
	return m.(*sync.Mutex)
}
