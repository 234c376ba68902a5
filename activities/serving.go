package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/dataplane"
	"github.com/tpdeploy/tpdeploy/internal/logscan"
	"github.com/tpdeploy/tpdeploy/internal/raygcs"
	"github.com/tpdeploy/tpdeploy/internal/readiness"
)

func (v *VLLM) fetch(ctx context.Context, hc *http.Client, url, apiKey string) ([]byte, error) {
	var body []byte
	err := v.net.inNetNS(func() error {
		var err error
		body, err = readiness.Get(ctx, hc, url, apiKey, 8<<20)
		return err
	})
	return body, err
}

// WatchServing follows vLLM's output in the Ray head's container from the cursor, and its
// endpoint, until it serves, a fatal line appears, vLLM exits, a planned node is dead in
// Ray, or ReportWithin passes (then it returns the progress so far, and the workflow calls
// again from there). It heartbeats its progress; a retried attempt (the agent restarted)
// resumes from the last heartbeat.
func (v *VLLM) WatchServing(ctx context.Context, req contract.WatchRequest) (contract.ServingProgress, error) {
	if err := v.checkNode(req.Node); err != nil {
		return contract.ServingProgress{}, err
	}
	p := req.Cursor
	if activity.HasHeartbeatDetails(ctx) {
		var hb contract.ServingProgress
		if activity.GetHeartbeatDetails(ctx, &hb) == nil && hb.Offset >= p.Offset {
			p = hb
		}
	}
	var apiKey string
	if !req.Headless {
		if err := v.net.checkEndpoint(req.Endpoint); err != nil {
			return p, err
		}
		key, err := v.endpointKey(req.Spec, req.Endpoint)
		if err != nil {
			return p, err
		}
		apiKey = key
	}
	if req.Plan != nil && req.Plan.RayAddress != "" {
		if err := v.net.checkDialString(req.Plan.RayAddress); err != nil {
			return p, err
		}
	}
	n, _ := req.Spec.Node(req.Node)
	eng, addr, err := v.docker.engine(n.DockerHost)
	if err != nil {
		return p, err
	}
	w := &watch{v: v, req: req, eng: eng, addr: addr, p: p, out: vllmOutput{eng: eng, container: req.Container.Name}, apiKey: apiKey}
	if err := w.containerRunning(ctx); err != nil {
		return p, err
	}
	started := time.Now()
	report := time.After(max(req.ReportWithin, 2*time.Second))
	hb := time.NewTicker(2 * time.Second)
	defer hb.Stop()
	for {
		err := w.step(ctx)
		if err != nil || w.p.Serving {
			w.p.Elapsed = time.Since(started)
			return w.p, err
		}
		wait := stepEvery
		if w.more {
			wait = 0
		}
		select {
		case <-ctx.Done():
			return w.p, ctx.Err()
		case <-report:
			w.p.Elapsed = time.Since(started)
			w.p.Memory = w.v.guard.sample()
			return w.p, nil
		case <-hb.C:
			w.p.Memory = w.v.guard.sample()
			activity.RecordHeartbeat(ctx, w.p)
		case <-time.After(wait):
		}
	}
}

// watch is one WatchServing call's state.
type watch struct {
	v    *VLLM
	req  contract.WatchRequest
	eng  containerEngine
	addr string
	out  vllmOutput
	p    contract.ServingProgress
	scan logscan.Scanner
	tail []string
	// lastNew is when the last output arrived; lastRayCheck when Ray was last asked;
	// lastRead when the output was last read; more: that read filled its buffer.
	lastNew, lastRayCheck, lastReady, lastRead time.Time
	more                                       bool
	pending                                    *logscan.Finding
	// apiKey is vLLM's API key (secrets.api_key), resolved on this node; "" without one.
	apiKey string
}

// stallAfter is how long without new output before the watch asks Ray whether a planned
// node died: NCCL over sockets hangs on a cut link rather than failing (upstream.md §6),
// so silence plus a dead node is the signal.
const stallAfter = 5 * time.Second

// How often the watch looks. Reading vLLM's output is a docker exec: the runtime starts a
// process in the container, which on a small node costs more CPU than anything else the
// agent does, taken from vLLM's own start-up on the same cores (measured on the lab's two
// shared cores: 0.4 s of wall time an exec under load; polling at 4 Hz, and at once again
// after any new line, made the mp executor's deploy 1.37x its hand script, docs/benchmarks.md).
// So the output is read once a second (at once again only after a read that filled its
// buffer), and readiness, an HTTP request from the agent, is asked twice a second: a
// server that comes up is seen as soon as before, a line or an exit at most a second
// later.
const (
	stepEvery   = 250 * time.Millisecond
	readEvery   = time.Second
	readyEvery  = 500 * time.Millisecond
	fullReadMin = maxRead / 2
)

// step reads what vLLM wrote since the last read, when a read is due, and acts on it; it
// asks for readiness when that is due.
func (w *watch) step(ctx context.Context) error {
	now := time.Now()
	if w.more || w.lastRead.IsZero() || now.Sub(w.lastRead) >= readEvery {
		w.lastRead = now
		if err := w.readOutput(ctx, now); err != nil {
			return err
		}
	}
	// Readiness: at once when vLLM says its server is up, else twice a second. A headless
	// node serves nothing itself: its vLLM only has to stay up.
	if !w.req.Headless && (w.p.Phase == "ready" || now.Sub(w.lastReady) >= readyEvery) {
		w.lastReady = now
		if w.v.serving(ctx, w.req, w.apiKey) {
			w.p.Serving, w.p.Phase = true, "serving"
			return nil
		}
	}
	return w.askRay(ctx, now)
}

// readOutput reads what vLLM wrote since the last read and acts on it: its lines, and its
// end when it has ended.
func (w *watch) readOutput(ctx context.Context, now time.Time) error {
	lines, next, st, err := w.out.read(ctx, w.p.Offset)
	if err != nil {
		if cerr := w.containerRunning(ctx); cerr != nil {
			return cerr
		}
		return engineError(w.addr, "read vllm output in "+w.req.Container.Name, err)
	}
	for _, text := range lines {
		if err := w.line(text); err != nil {
			return err
		}
	}
	w.more = next-w.p.Offset >= fullReadMin
	w.p.Offset = next
	if len(lines) > 0 {
		w.lastNew = now
	}
	switch st.State {
	case "exited", "gone", "none":
		// Whatever vLLM wrote before it ended is read before its end is reported.
		if len(lines) > 0 {
			w.more = true
			return nil
		}
		if err := w.guardStopped(); err != nil {
			return err
		}
		if f := w.scan.Flush(); f != nil && f.Fatal {
			return findingError(f)
		}
		what := fmt.Sprintf("exited with code %d", st.ExitCode)
		switch st.State {
		case "gone":
			what = "is gone without an exit code (killed with its wrapper: the container restarted or the process was killed)"
		case "none":
			what = "was never started in this container (it was recreated?)"
		}
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("vllm in %s %s; last lines: %s", w.req.Container.Name, what, strings.Join(w.tail, " | ")), contract.ErrVLLMExited, nil)
	}
	return nil
}

// line classifies one line of vLLM's output and updates the progress.
func (w *watch) line(text string) error {
	line, f := w.scan.Scan(text)
	f = w.forRelease(f)
	w.tail = append(w.tail, clipLine(line.Text))
	if len(w.tail) > 5 {
		w.tail = w.tail[1:]
	}
	if ph := logscan.Phase(line.Text); ph != "" {
		w.p.Phase = ph
	}
	if !waitingNotice(line.Text) && strings.TrimSpace(line.Text) != "" {
		w.p.Lines++
		w.p.LastLine = clipLine(line.Text)
	}
	if sp, ok := logscan.ParseProgress(line.Text); ok {
		w.p.ShardsLoaded, w.p.ShardsTotal, w.p.Percent, w.p.ETA = sp.Loaded, sp.Total, sp.Percent, sp.Remaining
	}
	if v := w.req.DataPlane; v != nil {
		node := w.req.Node
		if ip := line.Node(); ip != "" {
			node = ip
		}
		if warn := v.Contradicts(node, dataplane.ServingTransport(line.Text)); warn != "" && !slices.Contains(w.p.Warnings, warn) {
			w.p.Warnings = append(w.p.Warnings, warn)
		}
	}
	switch {
	case f == nil:
	case f.Type == contract.ErrPlacementPending && !f.Fatal:
		// Whether to keep waiting is decided from Ray's node table, not from the line.
		w.pending = f
		w.lastRayCheck = time.Time{}
	case f.Fatal:
		return findingError(f)
	case !slices.Contains(w.p.Warnings, f.Message()):
		w.p.Warnings = append(w.p.Warnings, f.Message())
	}
	return nil
}

// forRelease drops a finding the release's code cannot print (a DuplicateAddress under
// vLLM's V2 Ray executor, which has no such check, is a line quoted from elsewhere) and
// gives a waiting placement group the fix its executor calls for.
func (w *watch) forRelease(f *logscan.Finding) *logscan.Finding {
	m := w.req.Engine
	if f == nil || m == nil {
		return f
	}
	if !m.CanPrint(f.Type) {
		w.v.logger().Info("finding ruled out by the release", zap.String("type", f.Type), zap.String("vllm", m.VLLM),
			zap.String("executor", m.Executor), zap.String("line", clipLine(f.Line)))
		return nil
	}
	if f.Type == contract.ErrPlacementPending && !m.PinsDriverNode {
		f.Fix = m.PendingFix()
	}
	return f
}

// askRay reads Ray's node table when vLLM waits for its placement group or has been
// silent for a while: a group pinned to an address no Ray node has fails at once, one
// pinned to a live node fails after timeouts.placement with what Ray reports, and a
// planned node Ray marked dead ends the watch.
func (w *watch) askRay(ctx context.Context, now time.Time) error {
	if w.req.Plan == nil || w.req.Plan.RayAddress == "" {
		return nil
	}
	stalled := !w.lastNew.IsZero() && now.Sub(w.lastNew) >= stallAfter
	if w.pending == nil && !stalled {
		return nil
	}
	if now.Sub(w.lastRayCheck) < 2*time.Second {
		return nil
	}
	w.lastRayCheck = now
	token, err := w.v.rayToken(w.req.Spec.Secrets.RayToken)
	if err != nil {
		return nil // the launch resolved it; vLLM's own output will say more
	}
	nodes, err := w.v.net.registeredNodes(ctx, w.req.Plan.RayAddress, token)
	if err != nil {
		// The GCS not answering is no verdict; vLLM's own output will say more.
		return nil
	}
	if err := raygcs.DeadPlanned(*w.req.Plan, nodes); err != nil {
		return err
	}
	if w.pending == nil {
		return nil
	}
	var alive []string
	for _, n := range nodes {
		if n.Alive {
			alive = append(alive, n.IP.String())
		}
	}
	f := w.pending.ResolvePending(alive, w.req.Spec.Timeouts.Placement.D())
	if f == nil || !f.Fatal {
		return nil
	}
	if f.Type == contract.ErrResourcesBusy {
		f.Diagnosis += w.v.docker.rayStatusSummary(ctx, contract.PlacementRequest{DockerHost: w.req.Spec.Head().DockerHost, RayHead: w.req.Container.Name})
	}
	return findingError(f)
}

// findingError is a fatal finding as the activity's non-retryable error.
func findingError(f *logscan.Finding) error {
	return temporal.NewNonRetryableApplicationError(f.Message()+" [line: "+clipLine(f.Line)+"]", f.Type, nil)
}

// containerRunning fails when the container vLLM runs in (the Ray head's, or the node's
// own in mp mode) is gone or stopped.
func (w *watch) containerRunning(ctx context.Context) error {
	err := w.containerStillRunning(ctx)
	if err != nil {
		if gerr := w.guardStopped(); gerr != nil {
			return gerr
		}
	}
	return err
}

// GuardTrip says whether this node's memory guard stopped the cluster's engines in the
// last ten minutes: the deploy asks every node after a failure a lost engine causes, since
// a Ray worker's node stopped by its guard is, at the head, only a Ray node that died.
func (v *VLLM) GuardTrip(_ context.Context, req contract.GuardTripRequest) (contract.GuardTrip, error) {
	t, ok := v.guard.trip(req.Cluster)
	if !ok {
		return contract.GuardTrip{}, nil
	}
	return contract.GuardTrip{Tripped: true, Message: t.Message(v.name)}, nil
}

// guardStopped is HostMemoryPressure when this node's memory guard stopped the cluster's
// engines: what ended vLLM then is the guard, whatever the container's exit says.
func (w *watch) guardStopped() error {
	if t, ok := w.v.guard.trip(w.req.Spec.Name); ok {
		return temporal.NewNonRetryableApplicationError(t.Message(w.v.name), contract.ErrHostMemoryPressure, nil, t)
	}
	return nil
}

func (w *watch) containerStillRunning(ctx context.Context) error {
	what := "the ray head container " + w.req.Container.Name + ", where vllm runs,"
	if strings.HasSuffix(w.req.Container.Name, "_"+contract.RoleVLLM) {
		what = "vllm's container " + w.req.Container.Name
	}
	info, err := w.eng.ContainerInspect(ctx, w.req.Container.Name, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return temporal.NewNonRetryableApplicationError(what+" is gone", contract.ErrContainerExited, nil)
	}
	if err != nil {
		return engineError(w.addr, "inspect "+w.req.Container.Name, err)
	}
	if err := w.v.docker.ownContainer(w.req.Container.Name, info.Container.Config, w.req.Spec.Name, contract.RoleRayHead, contract.RoleVLLM); err != nil {
		return err
	}
	if st := info.Container.State; st != nil && !st.Running {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s exited with code %d", what, st.ExitCode), contract.ErrContainerExited, nil)
	}
	return nil
}

// waitingNotices are lines a process prints again and again while it waits, which say
// nothing moved: vLLM's shared-memory broadcast queue while its readers do not read
// (vllm/distributed/device_communicators/shm_broadcast.py, "No available shared memory
// broadcast block found in 60 seconds"), and Ray's autoscaler's wait for resources.
var waitingNotices = []string{"No available shared memory broadcast block found", "Warning: The following resource request cannot be scheduled right now"}

func waitingNotice(text string) bool {
	for _, n := range waitingNotices {
		if strings.Contains(text, n) {
			return true
		}
	}
	return false
}

func clipLine(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// serving is vLLM's readiness: /health answers 200, /v1/models lists the served model,
// and, when the spec asks for a smoke test, one completion answers; with an API key, the
// /v1/* requests carry it.
func (v *VLLM) serving(ctx context.Context, req contract.WatchRequest, apiKey string) bool {
	hc := readiness.Client(3 * time.Second)
	fetch := func(ctx context.Context, url string) ([]byte, error) { return v.fetch(ctx, hc, url, apiKey) }
	if readiness.Check(ctx, fetch, req.Endpoint, req.Spec.Model.ServedName) != nil {
		return false
	}
	if req.Spec.SmokeTest {
		return v.smokeTest(ctx, req, apiKey) == nil
	}
	return true
}

// smokeTest asks for one completion; like the health checks it follows no redirect.
func (v *VLLM) smokeTest(ctx context.Context, req contract.WatchRequest, apiKey string) error {
	return v.net.inNetNS(func() error {
		b, _ := json.Marshal(map[string]any{"model": req.Spec.Model.ServedName, "prompt": "tpdeploy smoke test", "max_tokens": 4})
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, req.Endpoint+"/v1/completions", strings.NewReader(string(b)))
		if err != nil {
			return err
		}
		r.Header.Set("Content-Type", "application/json")
		readiness.Authorize(r, apiKey)
		resp, err := readiness.Client(30 * time.Second).Do(r)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var out struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out) != nil || len(out.Choices) == 0 {
			return fmt.Errorf("completion: %s", resp.Status)
		}
		return nil
	})
}
