package registration

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"

	"github.com/tpdeploy/tpdeploy/activities"
	tpcontract "github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
)

// recorder is a worker.ActivityRegistry that keeps the names the SDK would register: a
// struct pointer's exported methods by method name (prefixed by RegisterOptions.Name), a
// function by its own name or RegisterOptions.Name.
type recorder struct{ names []string }

func (r *recorder) RegisterActivity(a any) {
	r.RegisterActivityWithOptions(a, activity.RegisterOptions{})
}

func (r *recorder) RegisterActivityWithOptions(a any, o activity.RegisterOptions) {
	v := reflect.ValueOf(a)
	if v.Kind() == reflect.Func {
		name := o.Name
		if name == "" {
			full := runtime.FuncForPC(v.Pointer()).Name()
			name = strings.TrimSuffix(full[strings.LastIndex(full, ".")+1:], "-fm")
		}
		r.names = append(r.names, name)
		return
	}
	for i := range v.Type().NumMethod() {
		if m := v.Type().Method(i); m.IsExported() {
			r.names = append(r.names, o.Name+m.Name)
		}
	}
}

func (r *recorder) RegisterDynamicActivity(any, activity.DynamicRegisterOptions) {}

// registered is what Agent puts on each queue.
func registered(t *testing.T) (workflowQueue, nodeQueue []string) {
	t.Helper()
	var wf, node recorder
	Agent(&wf, &node, activities.New(activities.Config{}), &control.Checks{})
	if len(wf.names) == 0 || len(node.names) == 0 {
		t.Fatalf("Agent registered %d activities on the workflow queue and %d on the node queue", len(wf.names), len(node.names))
	}
	return wf.names, node.names
}

// contractNames reads package contract's Activity* constants (name → value) from its source.
func contractNames(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range parseDir(t, "../contract") {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Activity") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("contract.%s is not a string literal", id.Name)
					}
					out[id.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	return out
}

// calledNames is every activity name the workflows pass to workflow.ExecuteActivity, with
// where; a name that is neither a contract constant nor a string literal fails the test.
func calledNames(t *testing.T, contract map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range parseDirWith(t, fset, "../../workflows") {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "ExecuteActivity" {
				return true
			}
			at := fset.Position(call.Pos()).String()
			switch arg := call.Args[1].(type) {
			case *ast.SelectorExpr:
				if x, ok := arg.X.(*ast.Ident); ok && x.Name == "contract" {
					name, ok := contract[arg.Sel.Name]
					if !ok {
						t.Errorf("%s: contract.%s is not an activity name of the contract", at, arg.Sel.Name)
					}
					out[name] = at
					return true
				}
			case *ast.BasicLit:
				if name, err := strconv.Unquote(arg.Value); err == nil {
					out[name] = at
					return true
				}
			}
			t.Errorf("%s: the activity is not named by a contract constant", at)
			return true
		})
	}
	if len(out) == 0 {
		t.Fatal("found no workflow.ExecuteActivity call in workflows/")
	}
	return out
}

func parseDir(t *testing.T, dir string) []*ast.File {
	return parseDirWith(t, token.NewFileSet(), dir)
}

// parseDirWith parses a package's non-test Go files.
func parseDirWith(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: %v (%d files)", dir, err, len(files))
	}
	var out []*ast.File
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// TestWorkflowsCallOnlyRegisteredActivities: every activity a workflow executes is one the
// agent registers, so a rename or a new activity cannot leave a workflow calling a name no
// agent serves.
func TestWorkflowsCallOnlyRegisteredActivities(t *testing.T) {
	wf, node := registered(t)
	for name, at := range calledNames(t, contractNames(t)) {
		if !slices.Contains(wf, name) && !slices.Contains(node, name) {
			t.Errorf("%s: the workflow executes activity %q, which the agent does not register", at, name)
		}
	}
}

// TestContractNamesWhatIsRegistered: the contract's activity names and the agent's
// registrations are the same set, each name on one queue only.
func TestContractNamesWhatIsRegistered(t *testing.T) {
	wf, node := registered(t)
	contract := contractNames(t)
	var values []string
	for _, v := range contract {
		values = append(values, v)
		if !slices.Contains(wf, v) && !slices.Contains(node, v) {
			t.Errorf("the contract names activity %q, which the agent does not register", v)
		}
	}
	for _, name := range append(slices.Clone(wf), node...) {
		if !slices.Contains(values, name) {
			t.Errorf("the agent registers activity %q, which the contract does not name", name)
		}
	}
	for _, name := range wf {
		if slices.Contains(node, name) && !slices.Contains(tpcontract.HeadChecks, name) {
			t.Errorf("activity %q is registered on both the workflow queue and the node queue", name)
		}
	}
	t.Logf("%d activities on the node queue, %d on the workflow queue", len(node), len(wf))
}

// TestHeadChecksOnTheNodeQueue: the checks a cluster with vLLM's API key runs on its head's
// agent are served there, by the same methods as on the workflow queue.
func TestHeadChecksOnTheNodeQueue(t *testing.T) {
	wf, node := registered(t)
	for _, name := range tpcontract.HeadChecks {
		if !slices.Contains(wf, name) || !slices.Contains(node, name) {
			t.Errorf("%s: on the workflow queue %v, on the node queue %v; want both", name, slices.Contains(wf, name), slices.Contains(node, name))
		}
	}
}
