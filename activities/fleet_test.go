package activities

import (
	"context"
	"errors"
	"fmt"
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
	indexed := func(vllm int, ids ...int) spec.Cluster {
		c := mine(0, vllm)
		c.Nodes[0].GPUIndices = ids
		return c.WithDefaults()
	}
	otherIndexed := other
	otherIndexed.Nodes = []spec.Node{{Name: "node-a", Role: spec.RoleHead, GPUIndices: []int{1}}}
	heldIndexed := container.Summary{Names: []string{"/tpd_a_node-a_ray-head"}, Labels: fleetLabels(otherIndexed.WithDefaults(), "node-a", "host", map[string]string{LabelCluster: "a", LabelNode: "node-a"})}
	held := container.Summary{Names: []string{"/tpd_a_node-a_ray-head"}, Labels: fleetLabels(other, "node-a", "host", map[string]string{LabelCluster: "a", LabelNode: "node-a"})}
	// Another lab's node-a on the same Docker engine: its containers live in that node's
	// network namespace, not this one's.
	elsewhere := container.Summary{Names: []string{"/tpd_c_node-a_ray-head"}, Labels: fleetLabels(other, "node-a", "container:tpd-lab2-node-a", map[string]string{LabelCluster: "c", LabelNode: "node-a"})}
	// The fleet's router, labelled like everything the agent starts (its node, its network
	// mode), holds no GPU and no cluster's port: never a holder.
	router := container.Summary{Names: []string{"/" + contract.RouterContainer("node-a", "host")}, Labels: map[string]string{LabelRole: contract.RoleRouter, LabelNode: "node-a", LabelNetwork: "host"}}
	own := container.Summary{Names: []string{"/tpd_b_node-a_ray-head"}, Labels: fleetLabels(mine(2, 8000), "node-a", "host", map[string]string{LabelCluster: "b", LabelNode: "node-a"})}
	for _, tt := range []struct {
		name  string
		items []container.Summary
		spec  spec.Cluster
		want  string
	}{
		{"two GPUs, one held", []container.Summary{held, router}, mine(2, 8001), "GPUsInUse: node-a has 2 GPUs, and cluster a holds GPU 0 (tpd_a_node-a_ray-head), which cluster b needs (GPUs 0, 1): place it on other nodes, or give each cluster its own GPUs by index (nodes[].gpus: [1] is free)"},
		// A count of one is GPU 0 to Docker's NVIDIA driver, for either cluster.
		{"a count on a count", []container.Summary{held, router}, mine(1, 8001), "GPUsInUse: node-a has 2 GPUs, and cluster a holds GPU 0 (tpd_a_node-a_ray-head), which cluster b needs (GPUs 0)"},
		{"its own GPU by index", []container.Summary{held, router}, indexed(8001, 1), ""},
		{"an index another holds", []container.Summary{heldIndexed, router}, indexed(8001, 0, 1), "GPUsInUse: node-a has 2 GPUs, and cluster a holds GPU 1 (tpd_a_node-a_ray-head), which cluster b needs (GPUs 0, 1)"},
		{"indices apart", []container.Summary{heldIndexed, router}, indexed(8001, 0), ""},
		{"the same port", []container.Summary{held}, indexed(8000, 1), "PortInUse: port 8000 (ports.vllm) on node-a is cluster a's ports.vllm (tpd_a_node-a_ray-head)"},
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

// A node whose spec lists GPU indices gets exactly those on its containers (a Docker device
// request by ID), where the agent gives containers GPUs at all; a count stays a count.
func TestGPUIndicesAreTheDeviceRequest(t *testing.T) {
	c := spec.Cluster{Name: "b", Image: "img", Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead, GPUIndices: []int{1, 3}}}}
	c = c.WithDefaults()
	for _, tt := range []struct {
		agent string
		want  []container.DeviceRequest
	}{
		{"all", []container.DeviceRequest{{DeviceIDs: []string{"1", "3"}, Capabilities: [][]string{{"gpu"}}}}},
		{"none", nil},
	} {
		s := roleSpec(c, contract.Deployment{Cluster: "b", ID: "d"}, "node-a", contract.RoleRayHead, ContainerOptions{GPUs: tt.agent})
		opts, err := s.createOptions()
		if err != nil {
			t.Fatal(err)
		}
		if got := opts.HostConfig.DeviceRequests; fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("agent gpus %s: device requests %+v, want %+v", tt.agent, got, tt.want)
		}
		if got := opts.Config.Labels[LabelGPUIndices]; got != "1,3" {
			t.Errorf("label %s = %q", LabelGPUIndices, got)
		}
	}
	c.Nodes[0].GPUIndices, c.Nodes[0].GPUs = nil, 2
	s := roleSpec(c, contract.Deployment{Cluster: "b", ID: "d"}, "node-a", contract.RoleRayHead, ContainerOptions{GPUs: "2"})
	if opts, _ := s.createOptions(); len(opts.HostConfig.DeviceRequests) != 1 || opts.HostConfig.DeviceRequests[0].Count != 2 {
		t.Errorf("a count: %+v", opts.HostConfig.DeviceRequests)
	}
}
