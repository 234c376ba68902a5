package activities

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/labtest"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// The container activities' tests that need no Docker engine (an unreachable one, a
// refusal before any engine call); containers_integration_test.go has the rest.

func TestUnreachableEngineIsRetryableAndNamed(t *testing.T) {
	ctx := context.Background()
	b := testNode("node-b")
	for _, host := range []string{"unix://" + filepath.Join(t.TempDir(), "docker.sock"), "tcp://127.0.0.1:1"} {
		_, err := b.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-b", DockerHost: host, Image: labtest.SimImage})
		app := appError(t, err)
		if app.Type() != contract.ErrDockerUnreachable || app.NonRetryable() || !strings.Contains(app.Message(), host) {
			t.Errorf("%s: type %s non-retryable %v: %s", host, app.Type(), app.NonRetryable(), app.Message())
		}
	}
}

// TestPolicyRefusesWhatTheOperatorDidNotAllow: a node with the default policy refuses an
// image, a host path, an engine and a port it does not allow, before touching the engine,
// naming the node and the setting to change.
func TestPolicyRefusesWhatTheOperatorDidNotAllow(t *testing.T) {
	ctx := context.Background()
	pol := policy.Default()
	a := New(Config{Name: "node-a", Policy: &pol, Containers: ContainerOptions{Network: "none", StopTimeout: time.Second}})
	c := spec.Cluster{Name: "tpdtest-policy", Image: "evil/miner:1", Model: spec.Model{Path: "m"}, Parallel: spec.Parallel{Tensor: 1},
		Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead}}, HFCache: "/etc"}.WithDefaults()
	for _, tc := range []struct {
		name string
		call func() error
		want []string
	}{
		{"preflight checks the whole spec", func() error {
			_, err := a.Containers.PreflightNode(ctx, contract.PreflightRequest{Node: "node-a", Image: c.Image, Spec: &c})
			return err
		}, []string{"node-a: ", `image "evil/miner:1"`, "allowed_images", "--allow-image", "host path", "/etc", "allowed_mounts"}},
		{"a container with a mount outside the policy", func() error {
			ok := c
			ok.Image = "vllm/vllm-openai:v0.17.0"
			_, err := a.Ray.StartRayHead(ctx, headRequest(ok, "run-1", nil))
			return err
		}, []string{"host path", "/etc", "allowed_mounts"}},
		{"an engine other than the local socket", func() error {
			_, err := a.Containers.RemoveContainers(ctx, contract.RemoveRequest{Node: "node-a", DockerHost: "tcp://10.9.9.9:2375", Cluster: c.Name})
			return err
		}, []string{"docker_host", "tcp://10.9.9.9:2375", "allowed_docker_hosts"}},
		{"a privileged port", func() error {
			low := c
			low.Ports.VLLM = 80
			_, err := a.VLLM.LaunchVLLM(ctx, contract.LaunchRequest{Node: "node-a", Spec: low})
			return err
		}, []string{"port", "80", "allowed_ports"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := appError(t, tc.call())
			if app.Type() != contract.ErrPolicyDenied || !app.NonRetryable() {
				t.Fatalf("type %s non-retryable %v: %s", app.Type(), app.NonRetryable(), app.Message())
			}
			for _, w := range tc.want {
				if !strings.Contains(app.Message(), w) {
					t.Errorf("message %q lacks %q", app.Message(), w)
				}
			}
		})
	}
}

func appError(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) {
		t.Fatalf("error %v (%T) is not an application error", err, err)
	}
	return app
}

// testConfig is an agent whose containers have no network; testNode is its agent.
func testConfig(name string) Config {
	return Config{Name: name, Containers: ContainerOptions{Network: "none", StopTimeout: 2 * time.Second}, unrestricted: true}
}

func testNode(name string) *Agent { return New(testConfig(name)) }

func headRequest(c spec.Cluster, deployment string, env map[string]string) contract.StartRayRequest {
	return contract.StartRayRequest{
		Node: "node-a", Deployment: contract.Deployment{Cluster: c.Name, ID: deployment}, Spec: c,
		Plan: netplan.NodePlan{Name: "node-a", Role: spec.RoleHead, Address: netip.MustParseAddr("127.0.0.1"), Env: env},
	}
}
