package activities

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// listing is an engine that lists the given containers and does nothing else.
type listing struct {
	containerEngine
	items []container.Summary
}

func (l listing) ContainerList(context.Context, client.ContainerListOptions) (client.ContainerListResult, error) {
	return client.ContainerListResult{Items: l.items}, nil
}

// A deploy onto a node where another cluster's containers hold the GPUs, or the head's
// fixed port, is refused naming that cluster; the cluster's own containers (a redeploy),
// the router's, containers without the fleet's labels and those in another network mode
// (another lab's node of the same name) are not counted.
func TestFleetRefusesAColliderNamingTheCluster(t *testing.T) {
	cs := &Containers{nodeBase: &nodeBase{name: "node-a"}, docker: &docker{opts: ContainerOptions{Network: "host"}}}
	mine := func(gpus, vllm int) spec.Cluster {
		return spec.Cluster{Name: "b", Executor: spec.ExecutorRay, Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead, GPUs: gpus}},
			Ports: spec.Ports{VLLM: vllm, Ray: 6380}}
	}
	other := spec.Cluster{Name: "a", Executor: spec.ExecutorRay, Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead, GPUs: 1}}, Ports: spec.Ports{VLLM: 8000, Ray: 6379}}
	held := container.Summary{Names: []string{"/tpd_a_node-a_ray-head"}, Labels: fleetLabels(other, "node-a", "host", map[string]string{LabelCluster: "a", LabelNode: "node-a"})}
	// Another lab's node-a on the same Docker engine: its containers live in that node's
	// network namespace, not this one's.
	elsewhere := container.Summary{Names: []string{"/tpd_c_node-a_ray-head"}, Labels: fleetLabels(other, "node-a", "container:tpd-lab2-node-a", map[string]string{LabelCluster: "c", LabelNode: "node-a"})}
	router := container.Summary{Names: []string{"/" + contract.RouterContainer("node-a")}, Labels: map[string]string{LabelRole: contract.RoleRouter, LabelNode: "node-a"}}
	own := container.Summary{Names: []string{"/tpd_b_node-a_ray-head"}, Labels: fleetLabels(mine(2, 8000), "node-a", "host", map[string]string{LabelCluster: "b", LabelNode: "node-a"})}
	for _, tt := range []struct {
		name  string
		items []container.Summary
		spec  spec.Cluster
		want  string
	}{
		{"two GPUs, one held", []container.Summary{held, router}, mine(2, 8001), "GPUsInUse: node-a has 2 GPUs, and cluster a holds 1 GPU (tpd_a_node-a_ray-head): cluster b needs 2 more"},
		{"its share", []container.Summary{held, router}, mine(1, 8001), ""},
		{"the same port", []container.Summary{held}, mine(1, 8000), "PortInUse: port 8000 (ports.vllm) on node-a is cluster a's ports.vllm (tpd_a_node-a_ray-head)"},
		{"its own containers", []container.Summary{own, router}, mine(2, 8000), ""},
		{"another node of the same name", []container.Summary{elsewhere}, mine(2, 6379), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The node has two GPUs, as the driver lists them.
			proc := t.TempDir()
			for _, g := range []string{"0000:01:00.0", "0000:02:00.0"} {
				if err := os.MkdirAll(filepath.Join(proc, "driver/nvidia/gpus", g), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cs.docker.sys = sysfs{procRoot: proc}
			err := cs.checkFleet(context.Background(), listing{items: tt.items}, "unix:///x", tt.spec)
			got := ""
			var app *temporal.ApplicationError
			if errors.As(err, &app) {
				got = app.Type() + ": " + app.Message()
			} else if err != nil {
				got = err.Error()
			}
			if tt.want == "" && err != nil || tt.want != "" && !strings.HasPrefix(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
