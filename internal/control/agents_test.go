//go:build integration

package control

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/labnet"
	"github.com/tpdeploy/tpdeploy/internal/labtest"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// TestPlanWithRealAgentsInNamespaces runs the real worker binary once per simulated node,
// each in its own network namespace of the seed topology, and plans through the real
// dev server: probe, all-pairs reachability and the choice all happen for real.
func TestPlanWithRealAgentsInNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root for network namespaces (CI runs as root)")
	}
	bin := filepath.Join(t.TempDir(), "worker")
	if out, err := exec.Command("go", "build", "-o", bin, "../../worker").CombinedOutput(); err != nil {
		t.Fatalf("build worker: %v\n%s", err, out)
	}
	prefix := fmt.Sprintf("tpd-it%d", os.Getpid()%100000)
	topo, err := labnet.Seed(prefix, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topo.Close() })

	// The plan's first step reads the image on every node: the lab's default release, on
	// this machine's engine, allowed by each agent's policy as an operator would allow it.
	eng, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := labtest.BuildImages(context.Background(), eng); err != nil {
		t.Fatal(err)
	}
	s := spec.Cluster{Name: "it-real", Image: labtest.SimImage, Model: spec.Model{Path: "/m"}, Parallel: spec.Parallel{Tensor: 2}}
	for i, n := range topo.Nodes {
		role := spec.RoleWorker
		if i == 0 {
			role = spec.RoleHead
		}
		// Unique node names keep these agents' queues apart from other tests'.
		name := "real-" + n.Name
		s.Nodes = append(s.Nodes, spec.Node{Name: name, Role: role, GPUs: 1})
		cmd := exec.Command(bin, "--node", name, "--netns", n.NetNS, "--address", serverAddress, "--log-level", "warn", "--allow-image", labtest.SimImage)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("worker %s did not shut down cleanly on SIGTERM: %v\n%s", name, err, out.String())
				}
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				t.Errorf("worker %s ignored SIGTERM for 15s", name)
			}
		})
	}
	s = s.WithDefaults()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Controller{Client: temporalClient}.Plan(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Plan == nil {
		t.Fatalf("no plan: %s", rep.Error)
	}
	if rep.Engine == nil || rep.Engine.Executor != spec.ExecutorRay || len(rep.Images) != 2 || rep.Images[1].VLLM == "" || !rep.Images[1].HasRay() {
		t.Errorf("engine %+v, images %+v: want the lab image read on both nodes, Ray picked", rep.Engine, rep.Images)
	}
	if rep.Plan.Subnet != labnet.FastNet || rep.Plan.RayAddress != "192.168.77.12:6379" {
		t.Errorf("plan subnet %s ray %s, want the fast subnet", rep.Plan.Subnet, rep.Plan.RayAddress)
	}
	if len(rep.Matrix) != 2 || !rep.Matrix[0].OK || !rep.Matrix[1].OK {
		t.Errorf("matrix = %+v", rep.Matrix)
	}
	head := rep.Probes[0]
	if head.DefaultRoute == nil || head.DefaultRoute.Source.String() != "10.77.230.180" {
		t.Errorf("head default route = %+v", head.DefaultRoute)
	}
	var decision []string
	for _, d := range rep.Plan.Decision {
		decision = append(decision, d.Subnet.String()+" "+d.Reason)
	}
	if !strings.Contains(strings.Join(decision, "\n"), "10.77.230.0/24 rejected: real-node-b has no address in it") {
		t.Errorf("decision:\n%s", strings.Join(decision, "\n"))
	}
}
