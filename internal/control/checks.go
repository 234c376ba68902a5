package control

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/readiness"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// Checks are the operations activities the node agents serve on the workflow queue (they
// need a Temporal client, which the agents have). Registered as a struct, its method names
// are the activity names (contract.ActivityCheckDeployment).
type Checks struct {
	Controller Controller
	// APIKey resolves vLLM's API key (secrets.api_key) for a check of endpoint, on this
	// agent and within its policy (activities.EndpointKey); nil sends no key. Deploys with
	// an API key run their checks on the head's agent, which holds the key.
	// The deploy's signed intent goes with it: an agent with trusted_keys resolves the key
	// only for a signed spec.
	APIKey func(c spec.Cluster, in *contract.Intent, endpoint string) (string, error)
}

// CheckDeployment reports the cluster's latest deploy and, when it completed, whether its
// endpoint serves the model: /health answers 200 and /v1/models lists the served name.
func (c *Checks) CheckDeployment(ctx context.Context, req contract.CheckDeploymentRequest) (contract.DeploymentCheck, error) {
	st, err := c.Controller.latest(ctx, req.Cluster)
	if err != nil {
		// Never deployed is an answer, not a failure.
		return contract.DeploymentCheck{Detail: err.Error()}, nil
	}
	return c.check(ctx, st), nil
}

// CheckTarget is CheckDeployment of a run the controller read (DeployTarget): on the
// head's agent of a keyed cluster, with no Temporal call.
func (c *Checks) CheckTarget(ctx context.Context, t contract.CheckTarget) (contract.DeploymentCheck, error) {
	if !t.Exists {
		return t.DeploymentCheck, nil
	}
	return c.check(ctx, targetStatus(t)), nil
}

// DeployTarget reads what a readiness check of the cluster checks (contract.TargetRequest),
// for the head's agent to check (CheckTarget, WatchTarget): the agent then needs no
// Temporal call to know which run serves.
func (c *Checks) DeployTarget(ctx context.Context, req contract.TargetRequest) (contract.CheckTarget, error) {
	end := time.Now().Add(req.WaitDeploy)
	var cache watchCache
	for {
		st, beside, err := c.watched(ctx, req.Cluster, &cache)
		if err != nil {
			if req.MustExist {
				return contract.CheckTarget{}, err
			}
			return contract.CheckTarget{DeploymentCheck: contract.DeploymentCheck{Detail: err.Error()}}, nil
		}
		if !st.Running || !time.Now().Before(end) {
			return checkTarget(st, beside), nil
		}
		activity.RecordHeartbeat(ctx, "deploy "+st.RunID+" is running")
		select {
		case <-ctx.Done():
			return contract.CheckTarget{}, ctx.Err()
		case <-time.After(max(req.Every, time.Second)):
		}
	}
}

// watchCache is what repeated looks at a cluster's runs (watched) keep between looks: a
// closed run's status, and the serving run's while one is staged beside it.
type watchCache struct {
	runID   string
	st      Status
	serving Status
}

// watched is the run a watch checks: the latest deploy, or, while a deploy staged beside
// the serving one has not swapped, the serving one (beside then says so); cached by run.
func (c *Checks) watched(ctx context.Context, cluster string, cache *watchCache) (Status, string, error) {
	st, err := c.Controller.latestCached(ctx, cluster, &cache.runID, &cache.st)
	if err != nil || !st.Running {
		return st, "", err
	}
	// A deploy staged beside the serving one: that one still serves until the swap, and
	// is watched (and canaried) as before.
	if srv, ok := c.stagedBeside(ctx, cluster, st, &cache.serving); ok {
		return srv, " (a deploy of another spec is staged beside it)", nil
	}
	return st, "", nil
}

// checkTarget is st as a CheckTarget (the check not made yet).
func checkTarget(st Status, beside string) contract.CheckTarget {
	t := contract.CheckTarget{DeploymentCheck: contract.DeploymentCheck{Exists: true, Running: st.Running, RunID: st.RunID, Closed: st.Closed},
		Spec: st.Spec, Intent: st.Intent, Beside: beside}
	if st.Spec != nil {
		t.SpecHash = st.Spec.Hash()
	}
	if st.Result != nil {
		plan := st.Result.Plan
		t.Endpoint, t.Plan = st.Result.Endpoint, &plan
	} else if st.Err != nil {
		t.Detail = st.Err.Error()
	}
	return t
}

// targetStatus is the Status a CheckTarget describes: what check, serves and
// servingEndpoint read of it.
func targetStatus(t contract.CheckTarget) Status {
	st := Status{WorkflowID: contract.DeployWorkflowID(""), RunID: t.RunID, Running: t.Running, Closed: t.Closed, Spec: t.Spec, Intent: t.Intent}
	if t.Spec != nil {
		st.WorkflowID = contract.DeployWorkflowID(t.Spec.Name)
	}
	if t.Plan != nil {
		st.Result = &workflows.DeployResult{Endpoint: t.Endpoint, Plan: *t.Plan}
	}
	return st
}

// check is CheckDeployment's answer for the deploy run st.
func (c *Checks) check(ctx context.Context, st Status) contract.DeploymentCheck {
	chk := contract.DeploymentCheck{Exists: true, Running: st.Running, RunID: st.RunID, Closed: st.Closed}
	if st.Spec != nil {
		chk.SpecHash = st.Spec.Hash()
	}
	if st.Result == nil {
		chk.Detail = fmt.Sprintf("latest deploy %s", map[bool]string{true: "is running", false: "ended " + st.Closed}[st.Running])
		return chk
	}
	chk.Endpoint = st.Result.Endpoint
	chk.Plan = &st.Result.Plan
	endpoint, err := servingEndpoint(st)
	if err != nil {
		chk.Detail = err.Error()
		return chk
	}
	if err := c.ready(ctx, st, endpoint); err != nil {
		chk.Detail = err.Error()
		return chk
	}
	chk.Healthy = true
	return chk
}

// ready is the readiness check of a deploy's endpoint from this agent, with vLLM's API key
// when the deploy's spec has one.
func (c *Checks) ready(ctx context.Context, st Status, endpoint string) error {
	served, key := "", ""
	if st.Spec != nil {
		served = st.Spec.Model.ServedName
		k, err := c.apiKey(st, endpoint)
		if err != nil {
			return fmt.Errorf("vLLM's API key: %w", err)
		}
		key = k
	}
	return readiness.Check(ctx, fetcher(key), endpoint, served)
}

// apiKey resolves vLLM's API key for a check of the deploy's endpoint ("" when its spec
// has none, or this agent cannot resolve keys).
func (c *Checks) apiKey(st Status, endpoint string) (string, error) {
	if st.Spec == nil || st.Spec.Secrets.APIKey == nil || c.APIKey == nil {
		return "", nil
	}
	return c.APIKey(*st.Spec, st.Intent, endpoint)
}

// endpointKey is apiKey for the canary: a key that cannot be resolved sends none, and the
// endpoint's 401 is then the canary's error answer (never EngineWedged); the readiness
// check beside it reports why.
func (c *Checks) endpointKey(st Status, endpoint string) string {
	k, _ := c.apiKey(st, endpoint)
	return k
}

// CheckEndpoint is the readiness check from this process: /health 200 and /v1/models
// listing served, with apiKey when it is set.
func CheckEndpoint(ctx context.Context, endpoint, served, apiKey string) error {
	return readiness.Check(ctx, fetcher(apiKey), endpoint, served)
}

// fetcher GETs a URL, with apiKey when set, following no redirect, and returns the body
// of a 200 answer.
func fetcher(apiKey string) func(ctx context.Context, url string) ([]byte, error) {
	hc := readiness.Client(3 * time.Second)
	return func(ctx context.Context, url string) ([]byte, error) {
		return readiness.Get(ctx, hc, url, apiKey, 1<<20)
	}
}

// servingEndpoint is where a deploy serves, derived from its spec and plan: the head's
// planned address (the spec's nodes[].address when it pins one, inside network.subnet when
// that is pinned) at the spec's ports.vllm. The deploy's result must name exactly that,
// and its Ray address the head's at ports.ray: the checks and the canary dial nothing else.
// (Anyone who can start a workflow under the deploy's ID can make a result of their own;
// a result naming another endpoint would have every agent's checks dial it.)
func servingEndpoint(st Status) (string, error) {
	if st.Spec == nil || st.Result == nil {
		return "", errors.New("no spec or no result to derive the endpoint from")
	}
	d := st.Spec.WithDefaults()
	head := d.Head()
	np, ok := st.Result.Plan.Node(head.Name)
	if !ok || !np.Address.IsValid() {
		return "", fmt.Errorf("the deploy's plan has no address for the head %s", head.Name)
	}
	if pin := head.PinnedAddress(); pin.IsValid() && pin != np.Address {
		return "", fmt.Errorf("the deploy's plan puts the head %s at %s, not the spec's nodes[].address %s", head.Name, np.Address, pin)
	}
	if sub := d.Network.PinnedSubnet(); sub.IsValid() && !sub.Contains(np.Address) {
		return "", fmt.Errorf("the deploy's plan puts the head %s at %s, outside the spec's network.subnet %s", head.Name, np.Address, sub)
	}
	want := fmt.Sprintf("http://%s:%d", np.Address, d.Ports.VLLM)
	if st.Result.Endpoint != want {
		return "", fmt.Errorf("the deploy's result names the endpoint %q, not %s (the head %s's planned address at ports.vllm): not checked", st.Result.Endpoint, want, head.Name)
	}
	if ra := st.Result.Plan.RayAddress; ra != "" && ra != netip.AddrPortFrom(np.Address, uint16(d.Ports.Ray)).String() {
		return "", fmt.Errorf("the deploy's plan names Ray's address %s, not the head %s's at ports.ray: not checked", ra, head.Name)
	}
	return want, nil
}
