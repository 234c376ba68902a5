package activities

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/labtest"
	"github.com/tpdeploy/tpdeploy/internal/router"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// A cluster's route replaces only its own replica: another cluster's model, and another
// cluster's replica of the same model, are kept; a cluster that changes its served model
// leaves the old one; a removal drops a model left with no replica.
func TestRouteMergeKeepsOtherClusters(t *testing.T) {
	c := spec.Cluster{Name: "a", Model: spec.Model{ServedName: "m1"}}
	start := router.Routes{Models: []router.Model{
		{ID: "m1", Replicas: []router.Replica{{Name: "a", URL: "http://10.0.0.1:8000", Key: "sk-old"}, {Name: "b", URL: "http://10.0.0.2:8000", Key: "sk-b"}}},
		{ID: "m2", Replicas: []router.Replica{{Name: "c", URL: "http://10.0.0.3:8000", Key: "sk-c"}}},
	}}
	// Each cluster's key stays on its own replica; a's is the one given now.
	got := merge(start, contract.RouteRequest{Spec: c, Endpoint: "http://10.0.0.9:8000", Draining: true}, "sk-a")
	want := router.Routes{Models: []router.Model{
		{ID: "m1", Replicas: []router.Replica{{Name: "b", URL: "http://10.0.0.2:8000", Key: "sk-b"}, {Name: "a", URL: "http://10.0.0.9:8000", Draining: true, Key: "sk-a"}}},
		{ID: "m2", Replicas: []router.Replica{{Name: "c", URL: "http://10.0.0.3:8000", Key: "sk-c"}}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merge:\n got %+v\nwant %+v", got, want)
	}
	c.Name, c.Model.ServedName = "c", "m3"
	got = merge(start, contract.RouteRequest{Spec: c, Endpoint: "http://10.0.0.3:8000"}, "")
	if ids := got.IDs(); !reflect.DeepEqual(ids, []string{"m1", "m3"}) {
		t.Errorf("cluster c moved from m2 to m3: models %v", ids)
	}
	c.Name, c.Model.ServedName = "a", "m1"
	got = merge(merge(start, contract.RouteRequest{Spec: c, Remove: true}, ""), contract.RouteRequest{Spec: spec.Cluster{Name: "b", Model: spec.Model{ServedName: "m1"}}, Remove: true}, "")
	if ids := got.IDs(); !reflect.DeepEqual(ids, []string{"m2"}) {
		t.Errorf("a and b removed: models %v, want m2 alone", ids)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
}

// The router's container: no GPU, its state in the agent's own directory, restarted by
// Docker, no API key of its own (each route carries its cluster's).
func TestRouterContainerSpec(t *testing.T) {
	r := &Router{nodeBase: &nodeBase{name: "n1"}, docker: &docker{opts: ContainerOptions{Network: "container:lab-n1", GPUs: "all", HostRoot: "/lab/n1", ShmSize: 1 << 30}}}
	s := r.routerSpec(spec.Router{Node: "n1"})
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
	for _, a := range opts.Config.Cmd {
		if strings.Contains(a, "key") {
			t.Errorf("the router is given a fleet-wide key: %v", opts.Config.Cmd)
		}
	}
	if len(s.Files) != 0 || opts.Config.Labels[LabelCluster] != "" || opts.Config.Labels[LabelRole] != contract.RoleRouter ||
		opts.Config.Labels[LabelNetwork] != "container:lab-n1" {
		t.Errorf("files %v labels %v", s.Files, opts.Config.Labels)
	}
	// Named after the node's container, unique on the engine; a real node's keeps its name.
	if s.Name != "tpd_router_n1.lab-n1" {
		t.Errorf("name %s", s.Name)
	}
	if n := contract.RouterContainer("n1", "host"); n != "tpd_router_n1" {
		t.Errorf("a real node's router: %s", n)
	}
}

// The swap as the agent drives it, against a router on its admin socket: DrainRoute waits
// for the request in flight on the old engine, a request sent meanwhile is held, and the
// new engine's SetRoute releases it there. No request fails.
func TestDrainThenRouteHoldsAndReleases(t *testing.T) {
	root := t.TempDir()
	r := &Router{nodeBase: &nodeBase{name: "node-a", log: zap.NewNop()}, docker: &docker{opts: ContainerOptions{HostRoot: root}}}
	if err := os.MkdirAll(r.dir(), 0o700); err != nil {
		t.Fatal(err)
	}
	table := router.NewTable(8)
	ln, err := net.Listen("unix", r.socket())
	if err != nil {
		t.Fatal(err)
	}
	adm := &http.Server{Handler: &router.Admin{Table: table}}
	go func() { _ = adm.Serve(ln) }()
	t.Cleanup(func() { adm.Close() })
	api := httptest.NewServer(router.NewHandler(table, router.Options{Hold: 30 * time.Second}))
	t.Cleanup(api.Close)

	release := make(chan struct{})
	engine := func(name string, slow bool) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if slow {
				<-release
			}
			fmt.Fprintf(w, `{"engine": %q}`, name)
		}))
		t.Cleanup(s.Close)
		return s
	}
	old, next := engine("old", true), engine("new", false)
	c := spec.Cluster{Name: "swap", Image: labtest.SimImage, Model: spec.Model{Path: "/models/m", ServedName: "m"}, Parallel: spec.Parallel{Tensor: 1},
		Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead}}, Router: &spec.Router{Node: "node-a"}}.WithDefaults()
	port := func(s *httptest.Server) spec.Cluster {
		u, _ := url.Parse(s.URL)
		p, _ := strconv.Atoi(u.Port())
		cc := c
		cc.Ports.VLLM = p
		return cc
	}
	ctx := context.Background()
	// A cluster with a key: its route carries it (and the router asks clients for it).
	t.Setenv("TPD_TEST_ROUTE_KEY", "sk-swap")
	keyed := port(old)
	keyed.Secrets.APIKey = &spec.SecretRef{Env: "TPD_TEST_ROUTE_KEY"}
	if _, err := r.SetRoute(ctx, contract.RouteRequest{Node: "node-a", Spec: keyed, Endpoint: old.URL}); err != nil {
		t.Fatal(err)
	}
	if got := table.Routes().Models[0].Replicas[0].Key; got != "sk-swap" {
		t.Fatalf("the route carries key %q, want the cluster's secrets.api_key", got)
	}
	if res, err := r.SetRoute(ctx, contract.RouteRequest{Node: "node-a", Spec: port(old), Endpoint: old.URL}); err != nil || len(res.Models) != 1 {
		t.Fatalf("route the old engine: %+v %v", res, err)
	}
	complete := func(out chan<- string) {
		resp, err := http.Post(api.URL+"/v1/completions", "application/json", strings.NewReader(`{"model": "m", "prompt": "x"}`))
		if err != nil {
			out <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	inFlight, held := make(chan string, 1), make(chan string, 1)
	go complete(inFlight)
	for table.State()[0].Replicas[0].Outstanding == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	drained := make(chan error, 1)
	go func() {
		_, err := r.DrainRoute(ctx, contract.RouteRequest{Node: "node-a", Spec: port(old), Endpoint: old.URL, Timeout: spec.Duration(20 * time.Second)})
		drained <- err
	}()
	for !table.State()[0].Replicas[0].Draining {
		time.Sleep(10 * time.Millisecond)
	}
	go complete(held)
	select {
	case err := <-drained:
		t.Fatalf("the drain ended with a request in flight: %v", err)
	case got := <-held:
		t.Fatalf("a request sent while draining was answered: %s", got)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if got := <-inFlight; got != `200 {"engine": "old"}` {
		t.Errorf("the request in flight: %s", got)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetRoute(ctx, contract.RouteRequest{Node: "node-a", Spec: port(next), Endpoint: next.URL}); err != nil {
		t.Fatal(err)
	}
	if got := <-held; got != `200 {"engine": "new"}` {
		t.Errorf("the held request: %s", got)
	}
}

// inspecting answers ContainerInspect with the given start times by name.
type inspecting struct {
	containerEngine
	started map[string]string
}

func (i inspecting) ContainerInspect(_ context.Context, name string, _ client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	return client.ContainerInspectResult{Container: container.InspectResponse{State: &container.State{StartedAt: i.started[name]}}}, nil
}

// A lab router whose node container started after it (the node "rebooted") sits in a gone
// network namespace and is replaced; one started after its node is kept, and so is any
// router on the host's network.
func TestRouterInARebootedNodesNamespaceIsReplaced(t *testing.T) {
	r := &Router{nodeBase: &nodeBase{name: "node-a"}, docker: &docker{opts: ContainerOptions{Network: "container:lab-node-a"}}}
	eng := inspecting{started: map[string]string{"lab-node-a": "2026-12-02T03:00:10.5Z"}}
	if !r.staleNetwork(context.Background(), eng, &container.State{StartedAt: "2026-12-02T02:00:00Z"}) {
		t.Error("a router older than its node's container was kept")
	}
	if r.staleNetwork(context.Background(), eng, &container.State{StartedAt: "2026-12-02T03:00:11Z"}) {
		t.Error("a router started after its node's container was replaced")
	}
	r.docker.opts.Network = "host"
	if r.staleNetwork(context.Background(), eng, &container.State{StartedAt: "2026-12-02T02:00:00Z"}) {
		t.Error("a router on the host's network was replaced")
	}
}
