package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/router"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Router runs the fleet's OpenAI router on this node (router/, internal/router) and is
// the one caller of its admin API: it starts the router's container, and merges each
// cluster's route into the router's routes. The router's container belongs to no cluster
// (no cluster label: no cluster's teardown or reconcile removes it); Docker restarts it
// (unless-stopped), and its routes outlive it in its state file, in a directory of the
// agent's own choosing (RouterDir), never a path from a request.
type Router struct {
	*nodeBase
	docker *docker
	vllm   *VLLM
	net    *hostNet
	// mu serialises the read-modify-write of the routes: two clusters' deploys routing
	// through this node at once must not drop each other's entry.
	mu sync.Mutex
}

// RouterDir is the node's directory of the router's state file and admin socket. Not under
// /run: the routes must outlive a reboot.
const RouterDir = "/var/lib/tpdeploy/router"

// routerMount is where the router's container sees RouterDir.
const routerMount = "/state"

// routerHold is how long the router holds a request of a model with no replica to take it.
const routerHold = 5 * time.Minute

// dir is RouterDir as the agent sees it (the lab's nodes: under their host root).
func (r *Router) dir() string { return r.docker.opts.HostPath(RouterDir) }

func (r *Router) socket() string { return filepath.Join(r.dir(), "router.sock") }

// container is the name of this agent's router container: unique on the engine, whose
// other agents (a lab's other nodes, another lab's node of the same name) run their own.
func (r *Router) container() string { return contract.RouterContainer(r.name, r.docker.opts.Network) }

// checkRouter refuses a request for a router the signed spec does not put on this node.
func (r *Router) checkRouter(node string, c spec.Cluster) (spec.Router, error) {
	if err := r.checkNode(node); err != nil {
		return spec.Router{}, err
	}
	if err := r.checkSpec(c); err != nil {
		return spec.Router{}, err
	}
	if c.Router == nil || c.Router.Node != r.name {
		return spec.Router{}, r.deny("the spec of cluster %s puts no router on this node", c.Name)
	}
	return *c.Router, nil
}

// routerSpec is the router's container: the node's network, no GPU, no capability (but
// NET_BIND_SERVICE below 1024), its state directory, restarted by Docker. It has no API key
// of its own: each cluster's route carries that cluster's (SetRoute), so one cluster's key
// opens only its own model behind the shared endpoint.
func (r *Router) routerSpec(rt spec.Router) containerSpec {
	o := r.docker.opts
	o.GPUs, o.ShmSize, o.Ulimits, o.Sysfs, o.IPC = "none", 0, nil, "", IPCPrivate
	cmd := []string{"--listen", ":" + strconv.Itoa(rt.APIPort()),
		"--admin", "unix:" + routerMount + "/router.sock", "--state", routerMount + "/routes.json",
		// A swap holds a one-replica model's requests while the new engine starts: on the
		// lab seconds, on real nodes minutes (weights, compilation, graphs). Five minutes,
		// under the ten an OpenAI client waits by default.
		"--hold", routerHold.String()}
	s := containerSpec{
		Name: r.container(), Image: contract.RouterImage, Cmd: cmd,
		// The network mode, as on every container the agent starts (fleet.go): what tells
		// this agent's router from another lab's node of the same name on a shared engine.
		Labels:     map[string]string{LabelRole: contract.RoleRouter, LabelNode: r.name, LabelNetwork: r.docker.opts.Network},
		Options:    o,
		AgentBinds: []string{r.dir() + ":" + routerMount},
		Restart:    container.RestartPolicyUnlessStopped,
	}
	if rt.APIPort() < 1024 {
		s.CapAdd = []string{"NET_BIND_SERVICE"}
	}
	return s
}

// EnsureRouter starts the router's container, or keeps the one running with the same
// configuration, and waits until its admin API answers.
func (r *Router) EnsureRouter(ctx context.Context, req contract.EnsureRouterRequest) (contract.RouterRef, error) {
	rt, err := r.checkRouter(req.Node, req.Spec)
	if err != nil {
		return contract.RouterRef{}, err
	}
	if err := r.allowed(func(p policy.Policy) error { return p.CheckPorts(rt.APIPort()) }); err != nil {
		return contract.RouterRef{}, err
	}
	if err := os.MkdirAll(r.dir(), 0o700); err != nil {
		return contract.RouterRef{}, temporal.NewApplicationError(fmt.Sprintf("%s: router directory: %v", r.name, err), contract.ErrDocker)
	}
	eng, addr, err := r.docker.engine(req.DockerHost)
	if err != nil {
		return contract.RouterRef{}, err
	}
	// Never adopt nor replace a container of that name that the agent did not start as
	// this node's router.
	replace := false
	switch got, err := eng.ContainerInspect(ctx, r.container(), client.ContainerInspectOptions{}); {
	case cerrdefs.IsNotFound(err):
	case err != nil:
		return contract.RouterRef{}, engineError(addr, "inspect "+r.container(), err)
	default:
		var l map[string]string
		if got.Container.Config != nil {
			l = got.Container.Config.Labels
		}
		if l[LabelRole] != contract.RoleRouter || l[LabelNode] != r.name || l[LabelCluster] != "" || !ownContainer(l, r.docker.opts.Network) {
			return contract.RouterRef{}, r.deny("a container named %s exists and is not this node's tpdeploy router: remove or rename it", r.container())
		}
		replace = r.staleNetwork(ctx, eng, got.Container.State)
	}
	ref, err := r.docker.ensureContainer(ctx, req.DockerHost, r.routerSpec(rt), replace)
	if err != nil {
		return contract.RouterRef{Container: ref}, err
	}
	// Its admin API answers once it serves the routes of its state file.
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := r.routes(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return contract.RouterRef{Container: ref}, temporal.NewApplicationError(fmt.Sprintf("%s: the router's admin API does not answer at %s: %v", r.name, r.socket(), err), contract.ErrContainerExited)
		}
		activity.RecordHeartbeat(ctx, "waiting for the router's admin API")
		time.Sleep(200 * time.Millisecond)
	}
	at := req.Address
	if !at.IsValid() {
		if at, err = r.defaultAddress(); err != nil {
			return contract.RouterRef{Container: ref}, err
		}
	}
	return contract.RouterRef{Container: ref, Endpoint: "http://" + netip.AddrPortFrom(at, uint16(rt.APIPort())).String()}, nil
}

// defaultAddress is the source address of the node's route to the internet, where a
// client of the node most likely reaches it.
func (r *Router) defaultAddress() (netip.Addr, error) {
	var addr netip.Addr
	err := r.net.inNetNS(func() error {
		h, err := r.net.netlinkHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		links, err := r.net.links(h)
		if err != nil {
			return err
		}
		if dr := defaultRoute(h, links); dr != nil {
			addr = dr.Source
		}
		return nil
	})
	if err == nil && !addr.IsValid() {
		err = errors.New("the node has no default route, so no address to give clients: put the router on a node of the cluster")
	}
	if err != nil {
		return addr, temporal.NewNonRetryableApplicationError(r.name+": router address: "+err.Error(), contract.ErrBadRequest, nil)
	}
	return addr, nil
}

// admin is an HTTP client of the router's admin socket.
func (r *Router) admin() *http.Client {
	sock := r.socket()
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// call sends one admin request and decodes its JSON answer into out.
func (r *Router) call(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://router"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	c := r.admin()
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.Unmarshal(b, &e)
		return &adminError{status: resp.StatusCode, msg: e.Error}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

type adminError struct {
	status int
	msg    string
}

func (e *adminError) Error() string { return fmt.Sprintf("router admin: %d %s", e.status, e.msg) }

func (r *Router) routes(ctx context.Context) (router.Routes, error) {
	var rs router.Routes
	err := r.call(ctx, http.MethodGet, "/routes", nil, &rs)
	return rs, err
}

// checkRoute refuses an endpoint that is not an engine's http://IP:PORT at the spec's vLLM
// port: the router sends the engines' API key to every replica it routes to.
func (r *Router) checkRoute(req contract.RouteRequest) error {
	if req.Remove {
		return nil
	}
	u, err := url.Parse(req.Endpoint)
	if err != nil || u.Scheme != "http" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return r.deny("route endpoint %q: not an http://ADDRESS:PORT URL", req.Endpoint)
	}
	if _, err := netip.ParseAddr(u.Hostname()); err != nil {
		return r.deny("route endpoint %q: not an IP address", req.Endpoint)
	}
	if p := req.Spec.WithDefaults().Ports.VLLM; u.Port() != strconv.Itoa(p) {
		return r.deny("route endpoint %q: not the spec's vLLM port %d", req.Endpoint, p)
	}
	return nil
}

// merge is routes with the cluster's replica replaced by req's: the cluster's replica
// (named after it) leaves every model, then joins its served model unless removed, with
// key (its secrets.api_key, resolved); a model left with no replica is dropped (a model
// with a draining replica stays, and is held).
func merge(rs router.Routes, req contract.RouteRequest, key string) router.Routes {
	cluster, model := req.Spec.Name, req.Spec.WithDefaults().Model.ServedName
	out := router.Routes{}
	found := false
	for _, m := range rs.Models {
		var reps []router.Replica
		for _, rep := range m.Replicas {
			if rep.Name != cluster {
				reps = append(reps, rep)
			}
		}
		if m.ID == model && !req.Remove {
			reps = append(reps, router.Replica{Name: cluster, URL: req.Endpoint, Down: req.Down, Draining: req.Draining, Key: key})
			found = true
		}
		if len(reps) > 0 {
			out.Models = append(out.Models, router.Model{ID: m.ID, Replicas: reps})
		}
	}
	if !found && !req.Remove {
		out.Models = append(out.Models, router.Model{ID: model, Replicas: []router.Replica{{Name: cluster, URL: req.Endpoint, Down: req.Down, Draining: req.Draining, Key: key}}})
	}
	return out
}

// SetRoute replaces the cluster's replica in the router's routes, keeping every other
// cluster's.
func (r *Router) SetRoute(ctx context.Context, req contract.RouteRequest) (contract.RouteResult, error) {
	if _, err := r.checkRouter(req.Node, req.Spec); err != nil {
		return contract.RouteResult{}, err
	}
	if err := r.checkRoute(req); err != nil {
		return contract.RouteResult{}, err
	}
	return r.setRoute(ctx, req)
}

func (r *Router) setRoute(ctx context.Context, req contract.RouteRequest) (contract.RouteResult, error) {
	// The cluster's own key, which clients must send for its model and which the router
	// sends its engines (vLLM's --api-key there).
	var key string
	if ref := req.Spec.Secrets.APIKey; ref != nil && !req.Remove {
		var err error
		if key, err = r.resolveSecret("secrets.api_key", *ref); err != nil {
			return contract.RouteResult{}, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rs, err := r.routes(ctx)
	if err != nil {
		return contract.RouteResult{}, r.adminFailed("read the routes", err)
	}
	next := merge(rs, req, key)
	b, err := json.Marshal(next)
	if err != nil {
		return contract.RouteResult{}, err
	}
	if err := r.call(ctx, http.MethodPut, "/routes", b, &rs); err != nil {
		return contract.RouteResult{}, r.adminFailed("set the routes", err)
	}
	return contract.RouteResult{Models: rs.IDs()}, nil
}

// DrainRoute marks the cluster's replica draining, so that the router sends it nothing new
// (a model with no other replica holds its requests), and answers when its requests in
// flight have ended: the old engine may then stop without failing one.
func (r *Router) DrainRoute(ctx context.Context, req contract.RouteRequest) (contract.RouteResult, error) {
	if _, err := r.checkRouter(req.Node, req.Spec); err != nil {
		return contract.RouteResult{}, err
	}
	if err := r.checkRoute(req); err != nil {
		return contract.RouteResult{}, err
	}
	req.Draining, req.Remove = true, false
	res, err := r.setRoute(ctx, req)
	if err != nil {
		return res, err
	}
	timeout := req.Timeout.D()
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	q := url.Values{"model": {req.Spec.WithDefaults().Model.ServedName}, "replica": {req.Spec.Name}, "timeout": {timeout.String()}}
	done := make(chan error, 1)
	go func() { done <- r.call(ctx, http.MethodPost, "/drain?"+q.Encode(), nil, nil) }()
	for {
		select {
		case err := <-done:
			var ae *adminError
			if errors.As(err, &ae) && ae.status == http.StatusGatewayTimeout {
				// Requests still in flight after the bound: the engine stops under them.
				return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: drain of %s: %s", r.name, req.Spec.Name, ae.msg), contract.ErrStepTimeout, nil)
			}
			if err != nil {
				return res, r.adminFailed("drain "+req.Spec.Name, err)
			}
			return res, nil
		case <-time.After(5 * time.Second):
			activity.RecordHeartbeat(ctx, "draining "+req.Spec.Name)
		}
	}
}

// adminFailed is a failure to talk to the router: retryable (its container may be
// restarting), a Docker-side failure for the step's classification.
func (r *Router) adminFailed(what string, err error) error {
	var ae *adminError
	if errors.As(err, &ae) && ae.status == http.StatusBadRequest {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %s: %v", r.name, what, err), contract.ErrBadRequest, nil)
	}
	return temporal.NewApplicationError(fmt.Sprintf("%s: %s: the router at %s: %v (EnsureRouter starts it)", r.name, what, r.socket(), err), contract.ErrContainerExited)
}

// staleNetwork says whether a router that joined another container's network namespace
// (a lab node's: Network container:NODE) started before that container did: the node
// "rebooted" under it, its namespace is gone, and Docker's restart policy does not bring
// it back. On a real node (host network) Docker restarts the router with the host.
func (r *Router) staleNetwork(ctx context.Context, eng containerEngine, st *container.State) bool {
	owner, ok := strings.CutPrefix(r.docker.opts.Network, "container:")
	if !ok || st == nil {
		return false
	}
	o, err := eng.ContainerInspect(ctx, owner, client.ContainerInspectOptions{})
	if err != nil || o.Container.State == nil {
		return false
	}
	mine, err1 := time.Parse(time.RFC3339Nano, st.StartedAt)
	theirs, err2 := time.Parse(time.RFC3339Nano, o.Container.State.StartedAt)
	return err1 == nil && err2 == nil && theirs.After(mine)
}
