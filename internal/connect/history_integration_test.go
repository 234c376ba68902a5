//go:build integration

package connect_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tpdeploy/tpdeploy/internal/codec"
	"github.com/tpdeploy/tpdeploy/internal/connect"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/devserver"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// secretSpec is a cluster whose fields are easy to find in bytes: none may appear in clear
// in an encrypted history's payloads.
func secretSpec(name string) spec.Cluster {
	s := fakeagents.SeedSpec()
	s.Name = name
	s.Image = "registry.tpdeploy.test/private-vllm:v9.9"
	s.Model = spec.Model{Path: "/models/private-model-xyz", ServedName: "private-served-name"}
	s.Nodes[0].Name, s.Nodes[1].Name = name+"-headnode", name+"-workernode"
	s.Timeouts.NodeAgent = spec.Duration(3 * time.Second)
	return s
}

// TestHistoryHoldsOnlyCiphertext runs real deploys (fake node agents) on the dev server
// with a client holding a codec key, then reads their histories with a client that holds
// none: no payload is readable, no spec value or failure message appears in clear. With
// the key, the codec server decodes them for the Temporal CLI (as for the UI).
func TestHistoryHoldsOnlyCiphertext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keyFile := filepath.Join(t.TempDir(), "codec.key")
	key := make([]byte, codec.KeySize)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyed, err := connect.Options{Address: devAddress, CodecKeyFile: keyFile}.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer keyed.Close()

	ok, failing := secretSpec("codec-ok"), secretSpec("codec-fail")
	agents := fakeagents.New()
	agents.Probes = map[string]netplan.NodeProbe{}
	for _, s := range []spec.Cluster{ok, failing} {
		agents.Probes[s.Nodes[0].Name] = fakeagents.SeedProbe(s.Nodes[0].Name, true)
		agents.Probes[s.Nodes[1].Name] = fakeagents.SeedProbe(s.Nodes[1].Name, false)
	}
	fakeagents.SetFailure(agents, "StartRayWorker "+failing.Nodes[1].Name,
		temporal.NewNonRetryableApplicationError("ray start refused on "+failing.Nodes[1].Name+" for "+failing.Image, "ContainerExited", nil))
	startWorker(t, keyed, contract.WorkflowQueue, func(w worker.Worker) {
		w.RegisterWorkflow(workflows.DeployCluster)
		w.RegisterActivity(&control.Checks{Controller: control.Controller{Client: keyed}})
	})
	for _, s := range []spec.Cluster{ok, failing} {
		for _, n := range s.Nodes {
			startWorker(t, keyed, contract.NodeQueue(n.Name), func(w worker.Worker) { w.RegisterActivity(agents) })
		}
	}

	opts, err := connect.Options{Address: devAddress, CodecKeyFile: keyFile}.ClientOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctl := control.Controller{Client: keyed, DataConverter: opts.DataConverter}
	okRun, err := ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: ok, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.DeployResult
	if err := okRun.Get(ctx, &res); err != nil {
		t.Fatalf("deploy with encrypted payloads: %v", err)
	}
	failRun, err := ctl.StartDeploy(ctx, workflows.DeployRequest{Spec: failing, Trigger: "test"})
	if err != nil {
		t.Fatal(err)
	}
	failErr := failRun.Get(ctx, nil)
	if failErr == nil || !strings.Contains(control.Reason(failErr).Error(), "ray start refused") {
		t.Fatalf("the failing deploy: want its message decoded with the key, got %v", failErr)
	}
	// The deploy started the cluster's supervisor (not registered here): stop it.
	for _, s := range []spec.Cluster{ok, failing} {
		_ = keyed.TerminateWorkflow(ctx, contract.SuperviseWorkflowID(s.Name), "", "test over")
	}
	// Queries are encrypted too; the keyed client reads them.
	st, err := ctl.Status(ctx, ok.Name)
	if err != nil || st.State.Phase != workflows.PhaseServed {
		t.Fatalf("status with the key: phase %q, %v", st.State.Phase, err)
	}
	// The spec read back from history (what `starter teardown CLUSTER` uses) decodes too.
	if st.Spec == nil || st.Spec.Image != ok.Image {
		t.Fatalf("spec from the encrypted history: %+v", st.Spec)
	}

	plain, err := client.Dial(client.Options{HostPort: devAddress, Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	runs := map[string]client.WorkflowRun{"ok": okRun, "fail": failRun}
	clearAnywhere := []string{ok.Image, ok.Model.Path, ok.Model.ServedName, "ray start refused", "join ray worker"}
	for what, run := range runs {
		events := history(t, ctx, plain, run.GetID(), run.GetRunID())
		payloads := 0
		for _, ev := range events {
			raw, err := proto.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range clearAnywhere {
				if bytes.Contains(raw, []byte(s)) {
					t.Errorf("%s deploy: event %d (%s) holds %q in clear", what, ev.EventId, ev.EventType, s)
				}
			}
			forEachPayload(ev.ProtoReflect(), func(p *commonpb.Payload) {
				payloads++
				if enc := string(p.Metadata[converter.MetadataEncoding]); enc != codec.Encoding {
					t.Errorf("%s deploy: event %d (%s) has a %q payload: %s", what, ev.EventId, ev.EventType, enc, p.Data)
				}
				// Node names are in task queue names, which are not payloads; in payloads
				// they must not be readable.
				for _, n := range append(ok.Nodes, failing.Nodes...) {
					if bytes.Contains(p.Data, []byte(n.Name)) {
						t.Errorf("%s deploy: event %d payload holds node %q in clear", what, ev.EventId, n.Name)
					}
				}
			})
		}
		if payloads < 5 {
			t.Errorf("%s deploy: only %d payloads in %d events", what, payloads, len(events))
		}
	}
	var noKey workflows.DeployResult
	if err := plain.GetWorkflow(ctx, okRun.GetID(), okRun.GetRunID()).Get(ctx, &noKey); err == nil {
		t.Errorf("a client without the key decoded the result: %+v", noKey)
	}

	// The codec server lets the Temporal CLI (and the UI, pointed at it) read the history.
	codecSrv := httptest.NewServer(codec.NewHTTPHandler(mustCodec(t, keyFile), codec.HandlerOptions{Origins: []string{codec.DefaultUIOrigin}}))
	defer codecSrv.Close()
	without := payloadData(t, showWorkflow(t, ctx, okRun.GetID()))
	with := payloadData(t, showWorkflow(t, ctx, okRun.GetID(), "--codec-endpoint", codecSrv.URL))
	if strings.Contains(without, ok.Image) {
		t.Errorf("temporal workflow show without the codec server shows the image:\n%s", without)
	}
	if !strings.Contains(with, ok.Image) || !strings.Contains(with, ok.Nodes[1].Name) {
		t.Errorf("temporal workflow show --codec-endpoint does not show the decoded spec:\n%.3000s", with)
	}
}

func startWorker(t *testing.T, c client.Client, queue string, register func(worker.Worker)) {
	t.Helper()
	w := worker.New(c, queue, worker.Options{})
	register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
}

func mustCodec(t *testing.T, file string) *codec.Codec {
	t.Helper()
	c, err := codec.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func history(t *testing.T, ctx context.Context, c client.Client, id, runID string) []*historypb.HistoryEvent {
	t.Helper()
	var events []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(ctx, id, runID, false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	return events
}

// forEachPayload calls fn for every Payload inside m, except search attributes, which
// Temporal indexes and never passes through a codec.
func forEachPayload(m protoreflect.Message, fn func(*commonpb.Payload)) {
	switch m.Descriptor().FullName() {
	case "temporal.api.common.v1.Payload":
		fn(m.Interface().(*commonpb.Payload))
		return
	case "temporal.api.common.v1.SearchAttributes":
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				forEachPayload(v.List().Get(i).Message(), fn)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				forEachPayload(mv.Message(), fn)
				return true
			})
		case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			forEachPayload(v.Message(), fn)
		}
		return true
	})
}

// showWorkflow runs the real Temporal CLI's `workflow show` against the dev server.
func showWorkflow(t *testing.T, ctx context.Context, id string, extra ...string) string {
	t.Helper()
	bin, err := devserver.Binary()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"workflow", "show", "--workflow-id", id, "--address", devAddress, "--output", "json"}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "TEMPORAL_CONFIG_FILE="+filepath.Join(t.TempDir(), "none.toml"))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("temporal %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// payloadData is the data of every payload in `temporal workflow show --output json`
// (base64 there), decoded and joined.
func payloadData(t *testing.T, out string) string {
	t.Helper()
	var tree any
	if err := json.Unmarshal([]byte(out), &tree); err != nil {
		t.Fatalf("temporal workflow show output: %v\n%.2000s", err, out)
	}
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, isPayload := v["metadata"]; isPayload {
				if d, ok := v["data"].(string); ok {
					raw, err := base64.StdEncoding.DecodeString(d)
					if err == nil {
						b.Write(raw)
						b.WriteByte('\n')
					}
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(tree)
	return b.String()
}

type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}
