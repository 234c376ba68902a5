package activities

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/labtest"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// Issue #23: anyone who can start a workflow in the namespace can call a node's
// activities directly, with requests of their own making. The agent must refuse, by its
// own policy, everything a tpdeploy deploy would never ask of it.

// foreignWorkflow is not tpdeploy's: it calls one of the agent's activities by name with
// a request it made itself, once, and reports the error type and message it got.
func foreignWorkflow(ctx workflow.Context, activity string, req any) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	err := workflow.ExecuteActivity(ctx, activity, req).Get(ctx, nil)
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Type() + ": " + app.Error(), nil
	}
	if err != nil {
		return "", err
	}
	return "done", nil
}

// ownIPv4 is an address of this machine other than loopback, with its prefix.
func ownIPv4(t *testing.T) netip.Prefix {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if p, ok := netip.AddrFromSlice(n.IP); ok && p.Unmap().Is4() && !p.IsLoopback() {
				bits, _ := n.Mask.Size()
				return netip.PrefixFrom(p.Unmap(), bits)
			}
		}
	}
	t.Skip("no non-loopback IPv4 address on this machine")
	return netip.Prefix{}
}

// guardedNode is an agent with an operator's policy: its allowed mount is a temporary
// directory (the "cache"), the lab's images are allowed.
func guardedNode(t *testing.T, cache string) *Agent {
	t.Helper()
	yaml := "allowed_images: [\"tpdeploy/*:*\"]\nallowed_mounts: [" + cache + "]\n"
	pol, err := policy.Parse([]byte(yaml), "/etc/tpdeploy/policy.yaml", policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Name: "node-a", Policy: &pol, Containers: ContainerOptions{Network: "none", StopTimeout: time.Second}})
}

func TestForeignWorkflowGetsPolicyDeniedForEveryPrimitive(t *testing.T) {
	cache := t.TempDir()
	if err := os.Symlink("/", filepath.Join(cache, "root-link")); err != nil {
		t.Fatal(err)
	}
	a := guardedNode(t, cache)
	own := ownIPv4(t)
	c := spec.Cluster{Name: "tpdtest-foreign", Image: labtest.SimImage, Model: spec.Model{Path: "/models/m"}, Parallel: spec.Parallel{Tensor: 1},
		Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead}}, HFCache: cache}.WithDefaults()
	withEnv := func(env map[string]string) spec.Cluster {
		s := c
		s.Nodes = []spec.Node{{Name: "node-a", Role: spec.RoleHead, Env: env, DockerHost: spec.DefaultDockerHost}}
		return s
	}
	withSecret := func(ref spec.SecretRef) spec.Cluster {
		s := c
		s.Secrets.HFToken = &ref
		return s
	}
	linked := c
	linked.HFCache = filepath.Join(cache, "root-link")
	plan := netplan.NodePlan{Name: "node-a", Role: spec.RoleHead, Address: own.Addr()}
	d := contract.Deployment{Cluster: c.Name, ID: "foreign"}
	t.Setenv("TEMPORAL_API_KEY", "the-agent's-own-credential")
	for _, tc := range []struct {
		name, activity string
		req            any
		want           []string
	}{
		{"serve /etc/shadow", contract.ActivityOpenModelServer,
			contract.OpenModelServerRequest{Node: "node-a", Addr: own.Addr(), Root: "/etc", Files: []string{"shadow"},
				Keys: []string{strings.Repeat("0", 64)}, Peers: []netip.Addr{own.Addr()}}, []string{"/etc", "allowed_mounts"}},
		{"serve to a stranger's address", contract.ActivityOpenModelServer,
			contract.OpenModelServerRequest{Node: "node-a", Addr: own.Addr(), Root: cache, Files: []string{"config.json"},
				Keys: []string{strings.Repeat("0", 64)}, Peers: []netip.Addr{netip.MustParseAddr("203.0.113.9")}}, []string{"203.0.113.9", "no subnet"}},
		{"copy from a stranger's address", contract.ActivitySyncModel,
			contract.SyncModelRequest{Node: "node-a", From: netip.AddrPortFrom(own.Addr(), 8000), Key: strings.Repeat("0", 64), Addr: netip.MustParseAddr("203.0.113.9"), Root: cache,
				Files: []weights.File{{Name: "config.json", Size: 2}}}, []string{"203.0.113.9", "not an address of this node"}},
		{"write /root/.ssh/authorized_keys", contract.ActivitySyncModel,
			contract.SyncModelRequest{Node: "node-a", From: netip.AddrPortFrom(own.Addr(), 8000), Key: strings.Repeat("0", 64), Addr: own.Addr(), Root: "/root/.ssh",
				Files: []weights.File{{Name: "authorized_keys", Size: 100}}}, []string{"/root/.ssh", "allowed_mounts"}},
		{"scan /etc", contract.ActivityModelManifest,
			contract.ModelManifestRequest{Node: "node-a", Dir: "/etc", Checksums: true}, []string{"/etc", "allowed_mounts"}},
		{"remove under /etc", contract.ActivityRemovePartialModel,
			contract.RemovePartialModelRequest{Node: "node-a", Root: "/etc"}, []string{"/etc", "allowed_mounts"}},
		{"an env that runs code", contract.ActivityStartRayHead,
			contract.StartRayRequest{Node: "node-a", Deployment: d, Spec: withEnv(map[string]string{"PYTHONWARNINGS": "all:0:antigravity.x:0:0", "BROWSER": "sh -c id"}), Plan: plan},
			[]string{"PYTHONWARNINGS", "BROWSER"}},
		{"a plan env that preloads", contract.ActivityStartRayHead,
			contract.StartRayRequest{Node: "node-a", Deployment: d, Spec: c, Plan: netplan.NodePlan{Name: "node-a", Address: own.Addr(), Env: map[string]string{"LD_PRELOAD": "/tmp/x.so"}}},
			[]string{"LD_PRELOAD"}},
		{"an hf_cache under the allowed mount that links to /", contract.ActivityStartRayHead,
			contract.StartRayRequest{Node: "node-a", Deployment: d, Spec: linked, Plan: plan}, []string{"root-link", "may mount read-write"}},
		{"the model scan through that link", contract.ActivityModelManifest,
			contract.ModelManifestRequest{Node: "node-a", HFCache: filepath.Join(cache, "root-link"), Repo: "etc/x"}, []string{"root-link", "symbolic link"}},
		{"a secret file outside secret_dirs", contract.ActivityLaunchVLLM,
			contract.LaunchRequest{Node: "node-a", Deployment: d, Spec: withSecret(spec.SecretRef{File: "/etc/shadow"})}, []string{"/etc/shadow", "secret_dirs"}},
		{"/dev/zero as the secret", contract.ActivityLaunchVLLM,
			contract.LaunchRequest{Node: "node-a", Deployment: d, Spec: withSecret(spec.SecretRef{File: "/dev/zero"})}, []string{"/dev/zero", "secret_dirs"}},
		{"the agent's own credential as the secret", contract.ActivityLaunchVLLM,
			contract.LaunchRequest{Node: "node-a", Deployment: d, Spec: withSecret(spec.SecretRef{Env: "TEMPORAL_API_KEY"})}, []string{"TEMPORAL_API_KEY", "secret_env"}},
		{"a listener on someone else's address", contract.ActivityOpenProbeListeners,
			contract.ListenRequest{Node: "node-a", Addrs: []netip.Prefix{netip.MustParsePrefix("8.8.8.8/32")}}, []string{"8.8.8.8", "not an address of this node"}},
		{"a listener on a privileged port", contract.ActivityOpenProbeListeners,
			contract.ListenRequest{Node: "node-a", Addrs: []netip.Prefix{own}, Port: 22}, []string{"22", "privileged"}},
		{"a dial to the node's own sshd", contract.ActivityDialPeers,
			contract.DialRequest{Node: "node-a", Targets: []netplan.Target{{Node: "x", Addr: netip.MustParseAddrPort("127.0.0.1:22")}}}, []string{"127.0.0.1:22"}},
		{"a dial to the cloud's metadata service", contract.ActivityDialPeers,
			contract.DialRequest{Node: "node-a", Targets: []netplan.Target{{Node: "x", Addr: netip.MustParseAddrPort("169.254.169.254:80")}}}, []string{"169.254.169.254:80"}},
		{"a scan of another network", contract.ActivityDialPeers,
			contract.DialRequest{Node: "node-a", Targets: []netplan.Target{{Node: "x", Addr: netip.MustParseAddrPort("203.0.113.9:8080")}}}, []string{"203.0.113.9:8080", "no subnet"}},
		{"a GCS that is no peer", contract.ActivityRayNodesAlive,
			contract.PlacementRequest{Node: "node-a", Plan: netplan.Plan{RayAddress: "203.0.113.9:6379"}}, []string{"203.0.113.9:6379"}},
		{"a health check of the metadata service", contract.ActivityWatchServing,
			contract.WatchRequest{Node: "node-a", Spec: c, Endpoint: "http://169.254.169.254:80", Container: contract.ContainerRef{Name: "x"}}, []string{"169.254.169.254"}},
		{"an engine of someone else's", contract.ActivityRemoveContainers,
			contract.RemoveRequest{Node: "node-a", DockerHost: "tcp://203.0.113.9:2375", Cluster: c.Name}, []string{"allowed_docker_hosts"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			registerAgent(env, a)
			env.RegisterWorkflowWithOptions(foreignWorkflow, workflow.RegisterOptions{Name: "NotTpdeploys"})
			env.ExecuteWorkflow("NotTpdeploys", tc.activity, tc.req)
			var got string
			if err := env.GetWorkflowResult(&got); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got, contract.ErrPolicyDenied+": ") {
				t.Fatalf("%s answered %q, want %s", tc.activity, got, contract.ErrPolicyDenied)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
		})
	}
}

// runForeign runs foreignWorkflow against a, calling activity with req once.
func runForeign(t *testing.T, a *Agent, activity string, req any) string {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	registerAgent(env, a)
	env.RegisterWorkflowWithOptions(foreignWorkflow, workflow.RegisterOptions{Name: "NotTpdeploys"})
	env.ExecuteWorkflow("NotTpdeploys", activity, req)
	var got string
	if err := env.GetWorkflowResult(&got); err != nil {
		t.Fatal(err)
	}
	return got
}
