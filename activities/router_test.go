package activities

import (
	"reflect"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/router"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// A cluster's route replaces only its own replica: another cluster's model, and another
// cluster's replica of the same model, are kept; a cluster that changes its served model
// leaves the old one; a removal drops a model left with no replica.
func TestRouteMergeKeepsOtherClusters(t *testing.T) {
	c := spec.Cluster{Name: "a", Model: spec.Model{ServedName: "m1"}}
	start := router.Routes{Models: []router.Model{
		{ID: "m1", Replicas: []router.Replica{{Name: "a", URL: "http://10.0.0.1:8000"}, {Name: "b", URL: "http://10.0.0.2:8000"}}},
		{ID: "m2", Replicas: []router.Replica{{Name: "c", URL: "http://10.0.0.3:8000"}}},
	}}
	got := merge(start, contract.RouteRequest{Spec: c, Endpoint: "http://10.0.0.9:8000", Draining: true})
	want := router.Routes{Models: []router.Model{
		{ID: "m1", Replicas: []router.Replica{{Name: "b", URL: "http://10.0.0.2:8000"}, {Name: "a", URL: "http://10.0.0.9:8000", Draining: true}}},
		{ID: "m2", Replicas: []router.Replica{{Name: "c", URL: "http://10.0.0.3:8000"}}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merge:\n got %+v\nwant %+v", got, want)
	}
	c.Name, c.Model.ServedName = "c", "m3"
	got = merge(start, contract.RouteRequest{Spec: c, Endpoint: "http://10.0.0.3:8000"})
	if ids := got.IDs(); !reflect.DeepEqual(ids, []string{"m1", "m3"}) {
		t.Errorf("cluster c moved from m2 to m3: models %v", ids)
	}
	c.Name, c.Model.ServedName = "a", "m1"
	got = merge(merge(start, contract.RouteRequest{Spec: c, Remove: true}), contract.RouteRequest{Spec: spec.Cluster{Name: "b", Model: spec.Model{ServedName: "m1"}}, Remove: true})
	if ids := got.IDs(); !reflect.DeepEqual(ids, []string{"m2"}) {
		t.Errorf("a and b removed: models %v, want m2 alone", ids)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
}

// The router's container: no GPU, its state in the agent's own directory, restarted by
// Docker, the key as a copied file named by flags, never in its configuration.
func TestRouterContainerSpec(t *testing.T) {
	r := &Router{nodeBase: &nodeBase{name: "n1"}, docker: &docker{opts: ContainerOptions{Network: "container:lab-n1", GPUs: "all", HostRoot: "/lab/n1", ShmSize: 1 << 30}}}
	s := r.routerSpec(spec.Router{Node: "n1"}, "sk-1")
	opts, err := s.createOptions()
	if err != nil {
		t.Fatal(err)
	}
	hc := opts.HostConfig
	if len(hc.DeviceRequests) != 0 || hc.RestartPolicy.Name != "unless-stopped" || string(hc.NetworkMode) != "container:lab-n1" {
		t.Errorf("host config: gpus %v restart %v network %s", hc.DeviceRequests, hc.RestartPolicy, hc.NetworkMode)
	}
	if !reflect.DeepEqual(hc.Binds, []string{"/lab/n1" + RouterDir + ":" + routerMount}) {
		t.Errorf("binds %v", hc.Binds)
	}
	for _, a := range append(opts.Config.Cmd, opts.Config.Env...) {
		if a == "sk-1" {
			t.Errorf("the key is in the container's configuration: %v", opts.Config.Cmd)
		}
	}
	if s.Files[routerKeyFile] != "sk-1\n" || opts.Config.Labels[LabelCluster] != "" || opts.Config.Labels[LabelRole] != contract.RoleRouter {
		t.Errorf("files %v labels %v", s.Files, opts.Config.Labels)
	}
}
