//go:build integration

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	enumspb "go.temporal.io/api/enums/v1"
	tclient "go.temporal.io/sdk/client"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/internal/release"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/lab"
)

var (
	theLab  *lab.Lab
	eng     *client.Client
	tc      tclient.Client
	starter string
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	ctx := context.Background()
	root, err := images.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	temporal := filepath.Join(root, "bin", "temporal")
	if _, err := os.Stat(temporal); err != nil {
		// No skip: `make test` builds it; its absence is a failure to be seen.
		fmt.Fprintln(os.Stderr, "FAIL: e2e needs the pinned Temporal CLI at bin/temporal (make bin/temporal):", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "tpd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if starter, err = images.GoBinary(ctx, "./starter", dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if eng, err = client.New(client.FromEnv); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	prefix := "tpd-e2e-" + hex.EncodeToString(b)
	theLab, err = labUp(ctx, temporal, lab.Config{Prefix: prefix, FaultProxies: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: lab up (Docker engine and root required):", err)
		return 1
	}
	defer func() {
		theLab.Close()
		if err := lab.Down(context.Background(), eng, prefix); err != nil {
			fmt.Fprintln(os.Stderr, "lab down:", err)
		}
	}()
	if tc, err = tclient.Dial(tclient.Options{HostPort: theLab.Temporal}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer tc.Close()
	return m.Run()
}

// labSpec is examples/lab.yaml under a cluster name of the test's own.
func labSpec(t *testing.T, name string) spec.Cluster {
	t.Helper()
	root, _ := images.ModuleRoot()
	b, err := os.ReadFile(filepath.Join(root, "examples", "lab.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := spec.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	s.Name = name
	since := time.Now()
	t.Cleanup(func() { finishCluster(t, name, since) })
	return s
}

func writeSpec(t *testing.T, s spec.Cluster) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), s.Name+".json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runStarter(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, starter, args...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+theLab.Temporal, "TPDEPLOY_SIGN_KEY_FILE="+theLab.SignKeyFile)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		t.Fatalf("starter %v: %v\n%s", args, err, out)
	}
	return string(out), 0
}

func containersOf(t testing.TB, cluster string) []string {
	t.Helper()
	f := client.Filters{}
	f.Add("label", activities.LabelCluster+"="+cluster)
	list, err := eng.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list.Items {
		names = append(names, strings.TrimPrefix(c.Names[0], "/"))
	}
	return names
}

// ourLabs are the prefixes of the labs this process brought up. `make test` runs the e2e
// tests in several processes at once on one engine (scripts/integration), so a check for
// what a test left behind looks only at containers its own labs' agents made.
var ourLabs sync.Map

// labUp is lab.Up for a lab of this process's.
func labUp(ctx context.Context, temporal string, cfg lab.Config) (*lab.Lab, error) {
	ourLabs.Store(cfg.Prefix, true)
	return lab.Up(ctx, eng, temporal, cfg)
}

// ofOurLabs says whether a container's network mode (activities.LabelNetwork) is one a
// node of this process's labs gave it: "container:PREFIX-node-…". A container without the
// label is counted as ours, so nothing unlabelled escapes the check.
func ofOurLabs(network string) bool {
	peer, ok := strings.CutPrefix(network, "container:")
	if network == "" {
		return true
	}
	if !ok {
		return false
	}
	mine := false
	ourLabs.Range(func(prefix, _ any) bool {
		mine = strings.HasPrefix(peer, prefix.(string)+"-")
		return !mine
	})
	return mine
}

// strays are the containers tpdeploy labelled (any tpdeploy. label but the image's) and no cluster label
// finds, made since since: an image read, or whatever else outlived its activity. The
// lab's own containers are not strays. A leak check counts them beside its cluster's
// containers, which a short-lived container need not carry. A read in flight (another
// run's, on the same engine) is a stray for a moment, so only those that outlive the
// longest read are returned.
func strays(t *testing.T, since time.Time) []string {
	t.Helper()
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(time.Second) {
		list, err := eng.ContainerList(context.Background(), client.ContainerListOptions{All: true})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range list.Items {
			// Every container an agent starts (the router too) carries its network mode:
			// another shard's lab's are not this test's.
			if time.Unix(c.Created, 0).Before(since.Add(-time.Second)) || c.Labels[lab.LabelLab] != "" || c.Labels[activities.LabelCluster] != "" ||
				!ofOurLabs(c.Labels[activities.LabelNetwork]) {
				continue
			}
			for k := range c.Labels {
				// The source hash is the image's own label, which every container made
				// from a tpdeploy image inherits (another package's test's too): only a
				// label set on the container says tpdeploy made it.
				if strings.HasPrefix(k, "tpdeploy.") && k != images.LabelSourceHash {
					names = append(names, fmt.Sprintf("%s (%s, node %s)", strings.TrimPrefix(c.Names[0], "/"), c.State, c.Labels[activities.LabelNode]))
					break
				}
			}
		}
		if len(names) == 0 || time.Now().After(deadline) {
			return names
		}
	}
}

// finishCluster ends whatever a test left of its cluster. A test that passed must have left
// no container: none of its cluster's, and none of tpdeploy's short-lived ones (strays)
// made since it began. Whatever still runs for the cluster (a deploy, or its supervisor,
// which would bring removed containers back) is stopped by a teardown, so nothing of one
// test outlives it to hold the ports of the next (the lab's nodes are shared).
func finishCluster(t *testing.T, cluster string, since time.Time) {
	t.Helper()
	if s := strays(t, since); len(s) > 0 {
		if t.Failed() {
			t.Logf("containers of no cluster left after the failure: %v", s)
		} else {
			t.Errorf("containers of no cluster left: %v", s)
		}
	}
	left := containersOf(t, cluster)
	switch {
	case len(left) > 0 && !t.Failed():
		t.Errorf("containers left for %s: %v", cluster, left)
	case len(left) > 0:
		t.Logf("containers left for %s after the failure: %v", cluster, left)
	}
	if len(left) > 0 || clusterActive(cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := (control.Controller{Client: tc, SignKey: theLab.SignKey}).Teardown(ctx, cluster, nil); err != nil {
			t.Logf("teardown of %s after the test: %v", cluster, err)
		}
	}
	for _, c := range containersOf(t, cluster) {
		_, _ = eng.ContainerRemove(context.Background(), c, client.ContainerRemoveOptions{Force: true})
	}
}

// clusterActive says whether a deploy or the supervisor of cluster runs.
func clusterActive(cluster string) bool {
	for _, id := range []string{contract.DeployWorkflowID(cluster), contract.SuperviseWorkflowID(cluster)} {
		//lint:ignore SA1019 DescribeWorkflow goes through the client interceptors and answers nil on error where these callers use nil-safe getters: its own change, not this no-behaviour-change one
		d, err := tc.DescribeWorkflowExecution(context.Background(), id, "")
		if err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return true
		}
	}
	return false
}

// (a) The asymmetric two-node lab deploys with no network settings; the plan finds the
// shared fast subnet and the endpoint serves.
func TestDeployServesOnTheSharedFastSubnet(t *testing.T) {
	s := labSpec(t, "e2e-serve")
	out, code := runStarter(t, "deploy", "-f", writeSpec(t, s), "--watch")
	if code != 0 {
		t.Fatalf("deploy exit %d:\n%s", code, out)
	}
	a := theLab.Nodes[0]
	endpoint := fmt.Sprintf("http://%s:8000", a.Fast)
	if !strings.Contains(out, "serving: "+endpoint) || !strings.Contains(out, "subnet:  "+theLab.Fast.String()) {
		t.Fatalf("deploy output lacks the endpoint %s on subnet %s:\n%s", endpoint, theLab.Fast, out)
	}
	resp, err := http.Get(endpoint + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != s.Model.ServedName {
		t.Fatalf("/v1/models: %+v %v", models, err)
	}
	got := containersOf(t, s.Name)
	if len(got) != 2 {
		t.Errorf("containers %v, want the ray head (vllm runs in it) and the ray worker", got)
	}
	if out, code := runStarter(t, "teardown", s.Name); code != 0 {
		t.Fatalf("teardown exit %d:\n%s", code, out)
	}
	// The status is then the teardown's: not the deploy's record of what served.
	out, code = runStarter(t, "status", s.Name)
	if code == 0 || !strings.Contains(out, "torn down at ") || !strings.Contains(out, "teardown workflow "+contract.TeardownWorkflowID(s.Name)+" run ") {
		t.Errorf("status after the teardown (exit %d) does not say torn down, when and by which run:\n%s", code, out)
	}
	for _, stale := range append([]string{"phase:", "supervisor", "serving"}, got...) {
		if strings.Contains(out, stale) {
			t.Errorf("status after the teardown says %q:\n%s", stale, out)
		}
	}
}

// (b) A spec that leaves only the external subnet is refused at planning, with the reason.
func TestExternalOnlySubnetRefusedAtPlanning(t *testing.T) {
	s := labSpec(t, "e2e-external")
	s.Network.ExcludeCIDRs = []string{theLab.Fast.String(), theLab.Mgmt.String()}
	out, code := runStarter(t, "deploy", "-f", writeSpec(t, s), "--watch")
	if code == 0 {
		t.Fatalf("deploy succeeded:\n%s", out)
	}
	for _, want := range []string{"NoViableSubnet", theLab.Ext.String() + " rejected: node-b has no address in it"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// (c) A Ray image that ignores --node-ip-address registers the head under its default
// route's address: CheckPlacement names the mismatch before vLLM starts.
func TestWrongRayRegistrationFailsAtPlacement(t *testing.T) {
	s := labSpec(t, "e2e-mismatch")
	s.Nodes[0].Env = map[string]string{"TPDEPLOY_SIM_IGNORE_NODE_IP": "1"}
	start := time.Now()
	f, _ := failure(t, deployFor(t, s))
	a := theLab.Nodes[0]
	want := fmt.Sprintf("node-a registered with Ray as %s, planned %s", a.Ext, a.Fast)
	if f.Type != contract.ErrPlacementMismatch || !strings.Contains(f.Message, want) {
		t.Fatalf("failure %s: %s\nwant %s naming %q", f.Type, f.Message, contract.ErrPlacementMismatch, want)
	}
	t.Logf("classified %s %.1fs after start (vLLM alone would wait ~42 minutes)", f.Type, time.Since(start).Seconds())
}

// (f) A cancel during shard loading tears everything down: Ray's head and worker, or
// under executor mp every rank.
func TestCancelDuringLoadingTearsDown(t *testing.T) {
	for _, c := range []struct{ name, cluster, executor string }{
		{"ray", "e2e-cancel", ""}, // the lab spec's own executor: Ray
		{"mp", "e2e-mp-cancel", spec.ExecutorMP},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := labSpec(t, c.cluster)
			if c.executor != "" {
				s.Executor = c.executor
			}
			slowLoading(&s)
			run := deployFor(t, s)
			waitPhase(t, run, "loading")
			if err := tc.CancelWorkflow(context.Background(), run.GetID(), run.GetRunID()); err != nil {
				t.Fatal(err)
			}
			if err := result(run, 2*time.Minute, nil); err == nil {
				t.Fatal("canceled deploy succeeded")
			}
			if left := containersOf(t, s.Name); len(left) != 0 {
				t.Fatalf("containers left after cancel: %v", left)
			}
		})
	}
}

// (d) node-b loses the fast network during shard loading: the failure is classified and
// compensated, and no container is left.
func TestFastLinkCutDuringLoading(t *testing.T) {
	s := labSpec(t, "e2e-cut")
	slowLoading(&s)
	// Loading must outlast Ray's health checks (~20 s to mark node-b dead) by a margin, or
	// a busy machine's late view of "loading" cuts the link after the weights are in.
	s.Nodes[0].Env["TPDEPLOY_SIM_SHARDS"] = "90"
	run := deployFor(t, s)
	waitPhase(t, run, "loading")
	if err := theLab.Cut(context.Background(), "node-b", "fast"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := theLab.Restore(context.Background(), "node-b", "fast"); err != nil {
			t.Errorf("restore node-b's fast link: %v", err)
		}
	})
	f, took := failure(t, run)
	// NCCL over sockets hangs on a cut link; Ray marks node-b dead when its health checks
	// fail, and the watch or vLLM's driver says so. node-b's planned address is then gone,
	// so the deploy starts over from probing, on the fast subnet only (never moving to the
	// management network on its own), and fails there naming what node-b lacks.
	switch {
	case f.Type == contract.ErrRayNodeDead, f.Type == contract.ErrEngineDead, f.Type == contract.ErrNCCL:
	case f.Type == contract.ErrNoViableSubnet && strings.Contains(f.Message, theLab.Fast.String()+" rejected: node-b has no address in it"):
	default:
		t.Fatalf("failure %s: %s; want the lost node classified (RayNodeDead, EngineDead, NCCLError, or NoViableSubnet on %s after starting over)", f.Type, f.Message, theLab.Fast)
	}
	t.Logf("cut classified as %s in %.1fs: %s", f.Type, took.Seconds(), f.Message)
	if left := containersOf(t, s.Name); len(left) != 0 {
		t.Fatalf("containers left: %v", left)
	}
}

// (e) The head node's agent is killed during loading and restarted by the node's init:
// the deploy completes, with no duplicated container.
func TestAgentRestartDuringLoading(t *testing.T) {
	s := labSpec(t, "e2e-restart")
	slowLoading(&s)
	s.Nodes[0].Env["TPDEPLOY_SIM_SHARDS"] = "16"
	run := deployFor(t, s)
	waitPhase(t, run, "loading")
	killWorker(t, theLab.Nodes[0].Container)
	if err := result(run, 90*time.Second, nil); err != nil {
		st, _ := control.Controller{Client: tc, SignKey: theLab.SignKey}.Status(context.Background(), s.Name)
		t.Fatalf("deploy after agent restart: %v (state: %+v)", err, st.State)
	}
	if got := containersOf(t, s.Name); len(got) != 2 {
		t.Errorf("containers %v, want exactly the ray head and worker", got)
	}
	if _, err := (control.Controller{Client: tc, SignKey: theLab.SignKey}).Teardown(context.Background(), s.Name, nil); err != nil {
		t.Fatal(err)
	}
}

// killWorker kills the worker process inside a node container (a child of its init), as
// a crash would; the init restarts it.
func killWorker(t *testing.T, node string) {
	t.Helper()
	info, err := eng.ContainerInspect(context.Background(), node, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Go forks from any of its threads, so the child may be listed under any task.
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", info.Container.State.Pid))
	var fields []string
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		fields = append(fields, strings.Fields(string(b))...)
	}
	if len(fields) == 0 {
		t.Fatalf("%s: init has no worker child", node)
	}
	child, _ := strconv.Atoi(fields[0])
	if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// (g) Every modelled release deploys to serving from the same spec, executor auto, with
// different interface names per node (node-a's fast NIC is not named like node-b's). The
// image decides: Ray where the image has it (0.11.0 and 0.17.1's legacy executor, 0.22.1
// with Ray added running V2), vLLM's own multi-node mode on today's stock image without
// Ray. The head's vLLM output shows the env rule that ran: 0.11.0 copies VLLM_* alone,
// 0.17.1 also NCCL_* (vLLM PR #34383), V2 copies nothing over a worker's own values.
func TestEveryModelledReleaseServesWithAuto(t *testing.T) {
	a, _ := theLab.Iface(context.Background(), "node-a", "fast")
	b, _ := theLab.Iface(context.Background(), "node-b", "fast")
	if a == "" || a == b {
		t.Fatalf("fast interfaces node-a %q, node-b %q: the lab should name them differently", a, b)
	}
	want := map[string]struct {
		executor, ray string
		copiesNCCL    bool
	}{
		"vllm-0.11.0":     {"ray", release.RayLegacy, false},
		"vllm-0.17.1":     {"ray", release.RayLegacy, true},
		"vllm-0.22.1":     {"mp", "", false},
		"vllm-0.22.1-ray": {"ray", release.RayV2, false},
		// Ray 2.59 without a token in the image: token authentication stays off.
		"vllm-0.22.1-ray2.59": {"ray", release.RayV2, false},
		// The newest modelled release: stock (mp) and with Ray (V2 by default).
		"vllm-0.32.0":     {"mp", "", false},
		"vllm-0.32.0-ray": {"ray", release.RayV2, false},
	}
	if len(lab.Releases) != len(want) {
		t.Fatalf("the lab models %d releases, this test knows %d", len(lab.Releases), len(want))
	}
	for _, rel := range lab.Releases {
		w := want[rel.Name]
		t.Run(rel.Name, func(t *testing.T) {
			s := labSpec(t, "e2e-rel-"+strings.NewReplacer(".", "", "vllm-", "").Replace(rel.Name))
			s.Image = rel.Image()
			s.Executor = "" // auto
			out, code := runStarter(t, "deploy", "-f", writeSpec(t, s), "--watch")
			defer teardown(t, s.Name)
			if code != 0 {
				t.Fatalf("deploy exit %d:\n%s", code, out)
			}
			for _, line := range []string{
				fmt.Sprintf("engine:  vLLM %s, executor %s (auto: ", rel.VLLM, w.executor),
				fmt.Sprintf("image:   node-b: vllm %s, ray %s, torch %s", rel.VLLM, orNone(rel.Ray), rel.Torch),
			} {
				if !strings.Contains(out, line) {
					t.Errorf("deploy output lacks %q:\n%s", line, out)
				}
			}
			if err := endpointServes(t, s); err != nil {
				t.Fatal(err)
			}
			status, _ := runStarter(t, "status", s.Name)
			if !strings.Contains(status, "executor "+w.executor) || !strings.Contains(status, "vllm "+rel.VLLM) {
				t.Errorf("status lacks the executor and versions:\n%s", status)
			}
			if w.executor == "mp" {
				for _, c := range containersOf(t, s.Name) {
					if !strings.HasSuffix(c, "_"+contract.RoleVLLM) {
						t.Errorf("container %s under mp", c)
					}
				}
				return
			}
			log, err := execOut(contract.ContainerName(s.Name, "node-a", contract.RoleRayHead), "cat", "/tmp/tpdeploy/vllm/log")
			if err != nil {
				t.Fatal(err)
			}
			prefixes := strings.Contains(log, "Env var prefixes to copy: [") && strings.Contains(log, "'NCCL_'")
			if prefixes != w.copiesNCCL {
				t.Fatalf("%s: copies NCCL_* %v, want %v:\n%s", rel.Name, prefixes, w.copiesNCCL, log)
			}
			if w.ray == release.RayV2 && (strings.Contains(log, "Overwriting environment variable") || strings.Contains(log, "Copying the following environment variables")) {
				t.Fatalf("V2 applies the driver's env with setdefault, yet the log shows the legacy copy:\n%s", log)
			}
			t.Logf("%s: served with executor %s %s", rel.Name, w.executor, w.ray)
		})
	}
}

func orNone(v string) string {
	if v == "" {
		return "none"
	}
	return v
}

// executor: ray on today's stock image (no Ray) fails at the first step, in seconds,
// before any container starts, naming the node, the image and the ways out.
func TestRayOnAnImageWithoutRayFailsFirst(t *testing.T) {
	s := labSpec(t, "e2e-noray")
	rel, _ := lab.ReleaseNamed("vllm-0.22.1")
	s.Image, s.Executor = rel.Image(), spec.ExecutorRay
	f, took := failure(t, deployFor(t, s))
	if f.Type != contract.ErrImageLacksRay {
		t.Fatalf("failure %s: %s", f.Type, f.Message)
	}
	for _, w := range []string{"node-a", rel.Image(), "0.22.1", "executor: mp", "pip install ray", "0.17.1 or earlier"} {
		if !strings.Contains(f.Message, w) {
			t.Errorf("message lacks %q: %s", w, f.Message)
		}
	}
	if left := containersOf(t, s.Name); len(left) != 0 {
		t.Errorf("containers left: %v", left)
	}
	t.Logf("%s after %.1fs", f.Type, took.Seconds())
}
