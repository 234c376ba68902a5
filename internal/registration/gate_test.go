package registration

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// requests is a worker.ActivityRegistry that keeps each activity's request type: the
// second parameter of a method or function after the context.
type requests map[string]reflect.Type

func (r requests) RegisterActivity(a any) {
	r.RegisterActivityWithOptions(a, activity.RegisterOptions{})
}

func (r requests) RegisterActivityWithOptions(a any, o activity.RegisterOptions) {
	v := reflect.ValueOf(a)
	if v.Kind() == reflect.Func {
		r[o.Name] = v.Type().In(1)
		return
	}
	for i := range v.NumMethod() {
		if m := v.Type().Method(i); m.IsExported() {
			r[o.Name+m.Name] = v.Method(i).Type().In(1)
		}
	}
}

func (requests) RegisterDynamicActivity(any, activity.DynamicRegisterOptions) {}

// tripwire stands where the activity would run: it records that a request got past the
// interceptors before it and runs nothing, so no side effect can happen here.
type tripwire struct {
	interceptor.WorkerInterceptorBase
	reached map[string]bool
}

var errReached = errors.New("reached the activity")

func (w *tripwire) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &tripwireInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, w: w}
}

type tripwireInbound struct {
	interceptor.ActivityInboundInterceptorBase
	w *tripwire
}

func (i *tripwireInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	i.w.reached[activity.GetInfo(ctx).ActivityType.Name] = true
	return nil, temporal.NewNonRetryableApplicationError(errReached.Error(), "Reached", nil)
}

// trustingNode is node-a's agent with trusted_keys, on a test environment registered as
// the worker registers it, with opts' interceptors and then the tripwire; and the node
// queue's activities with their request types.
func trustingNode(t *testing.T, opts func(worker.Options, *activities.Agent) worker.Options) (*testsuite.TestActivityEnvironment, *tripwire, requests) {
	t.Helper()
	pub, _, _ := intent.GenerateKey()
	pol, err := policy.Parse([]byte("trusted_keys: [{id: ops, ed25519: \""+intent.PublicKeyString(pub)+"\"}]\n"), "/etc/tpdeploy/policy.yaml", policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	agent := activities.New(activities.Config{Name: "node-a", Policy: &pol})
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler))) // every call here fails by design
	env := suite.NewTestActivityEnvironment()
	wire := &tripwire{reached: map[string]bool{}}
	o := opts(worker.Options{}, agent)
	o.Interceptors = append(o.Interceptors, wire)
	env.SetWorkerOptions(o)
	checks := &control.Checks{}
	Agent(requests{}, env, agent, checks)
	reqs := requests{}
	Agent(requests{}, reqs, agent, checks)
	return env, wire, reqs
}

// unsignedRequest is a zero request of type typ for node-a.
func unsignedRequest(typ reflect.Type) any {
	v := reflect.New(typ).Elem()
	if f := v.FieldByName("Node"); f.IsValid() && f.Kind() == reflect.String {
		f.SetString("node-a")
	}
	return v.Interface()
}

var signedType = reflect.TypeFor[contract.Signed]()

// Every activity on the node's queue is classified in package contract, once: its request
// is contract.Signed, or the activity is one of contract.Unsigned, never both.
func TestContractClassifiesEveryNodeActivity(t *testing.T) {
	_, _, reqs := trustingNode(t, NodeOptions)
	for name, typ := range reqs {
		_, unsigned := contract.Unsigned[name]
		switch signed := typ.Implements(signedType); {
		case signed && unsigned:
			t.Errorf("%s: its request %s is contract.Signed and the activity is in contract.Unsigned", name, typ)
		case !signed && !unsigned:
			t.Errorf("%s: its request %s is not contract.Signed and the activity is not in contract.Unsigned: decide in contract/signed.go", name, typ)
		}
	}
	for name := range contract.Unsigned {
		if _, ok := reqs[name]; !ok {
			t.Errorf("contract.Unsigned names %s, which the node's queue does not serve", name)
		}
	}
}

// With trusted_keys, the worker's gate refuses an unsigned request to every acting activity
// (package contract says which) before any of the activity's code runs, PolicyDenied naming
// the node; the reads and probes go through unsigned. The activities' own code is never
// reached here, so no check written in it can make this pass or fail.
func TestGateRefusesEveryUnsignedActingRequest(t *testing.T) {
	env, wire, reqs := trustingNode(t, NodeOptions)
	acting := 0
	for name, typ := range reqs {
		_, err := env.ExecuteActivity(name, unsignedRequest(typ))
		var app *temporal.ApplicationError
		errors.As(err, &app)
		if typ.Implements(signedType) {
			acting++
			if app == nil || app.Type() != contract.ErrPolicyDenied || !app.NonRetryable() || !strings.HasPrefix(app.Message(), "node-a: the request is unsigned") {
				t.Errorf("%s unsigned: %v; want non-retryable %s, node-a: the request is unsigned", name, err, contract.ErrPolicyDenied)
			}
			if wire.reached[name] {
				t.Errorf("%s unsigned reached the activity", name)
			}
			continue
		}
		if !wire.reached[name] || app == nil || app.Type() != "Reached" {
			t.Errorf("%s (not contract.Signed) unsigned: %v; want it past the gate, as one of contract.Unsigned", name, err)
		}
	}
	if acting == 0 {
		t.Fatal("no acting activity on the node's queue")
	}
	t.Logf("%d acting activities, %d reads and probes", acting, len(reqs)-acting)
}

// The test above fails without the gate: the same worker options without it let every
// unsigned acting request reach the activity.
func TestWithoutTheGateUnsignedRequestsReachTheActivity(t *testing.T) {
	env, wire, reqs := trustingNode(t, func(o worker.Options, _ *activities.Agent) worker.Options { return o })
	for name, typ := range reqs {
		if !typ.Implements(signedType) {
			continue
		}
		if _, err := env.ExecuteActivity(name, unsignedRequest(typ)); !wire.reached[name] {
			t.Errorf("%s without the gate: %v, not the activity reached", name, err)
		}
	}
}

// An activity that package contract does not classify is refused with trusted_keys:
// the gate is closed to what no one decided on.
func TestGateRefusesAnUnclassifiedActivity(t *testing.T) {
	env, wire, _ := trustingNode(t, NodeOptions)
	type unclassifiedRequest struct{ Node string }
	env.RegisterActivityWithOptions(func(context.Context, unclassifiedRequest) error { return nil }, activity.RegisterOptions{Name: "Unclassified"})
	_, err := env.ExecuteActivity("Unclassified", unclassifiedRequest{Node: "node-a"})
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != contract.ErrPolicyDenied || !strings.Contains(app.Message(), "activity Unclassified is neither a signed request nor one of contract.Unsigned") {
		t.Errorf("an unclassified activity: %v; want %s", err, contract.ErrPolicyDenied)
	}
	if wire.reached["Unclassified"] {
		t.Error("the unclassified activity ran")
	}
}
