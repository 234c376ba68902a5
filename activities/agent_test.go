package activities

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// registerAgent registers every activity of a on env behind a's gate, as the worker does
// (registration.NodeOptions). An env given worker options later must keep gated's.
func registerAgent(env interface{ RegisterActivity(any) }, a *Agent) {
	switch e := env.(type) {
	case *testsuite.TestWorkflowEnvironment:
		e.SetWorkerOptions(gated(a, worker.Options{}))
	case *testsuite.TestActivityEnvironment:
		e.SetWorkerOptions(gated(a, worker.Options{}))
	}
	for _, concern := range a.Activities() {
		env.RegisterActivity(concern)
	}
}

// actingActivities are a's activities whose request is contract.Signed.
func actingActivities(a *Agent) []string {
	signed := reflect.TypeFor[contract.Signed]()
	var out []string
	for _, concern := range a.Activities() {
		typ := reflect.TypeOf(concern)
		for i := range typ.NumMethod() {
			if m := typ.Method(i); m.Type.NumIn() > 2 && m.Type.In(2).Implements(signed) {
				out = append(out, m.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// gated is o with a's gate among its interceptors.
func gated(a *Agent, o worker.Options) worker.Options {
	o.Interceptors = append(append([]interceptor.WorkerInterceptor{}, o.Interceptors...), a.Gate())
	return o
}

// Every exported method of an activity struct is an activity, so no activity name may
// be served by two structs (the SDK would refuse the second registration) and nothing a
// struct shares with the others may be exported.
func TestNoActivityIsServedTwice(t *testing.T) {
	owner := map[string]string{}
	for _, concern := range New(Config{Name: "node-a"}).Activities() {
		typ := reflect.TypeOf(concern)
		if typ.NumMethod() == 0 {
			t.Errorf("%s has no activity", typ)
		}
		for i := range typ.NumMethod() {
			name := typ.Method(i).Name
			if prev, ok := owner[name]; ok {
				t.Errorf("activity %s is a method of both %s and %s", name, prev, typ)
			}
			owner[name] = typ.String()
		}
	}
	var names []string
	for name := range owner {
		names = append(names, name)
	}
	slices.Sort(names)
	t.Logf("%d activities: %s", len(names), strings.Join(names, ", "))
}
