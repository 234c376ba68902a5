package control

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/readiness"
)

// Checks are the operations activities the node agents serve on the workflow queue (they
// need a Temporal client, which the agents have). Registered as a struct, its method names
// are the activity names (contract.ActivityCheckDeployment).
type Checks struct {
	Controller Controller
}

// CheckDeployment reports the cluster's latest deploy and, when it completed, whether its
// endpoint serves the model: /health answers 200 and /v1/models lists the served name.
func (c *Checks) CheckDeployment(ctx context.Context, req contract.CheckDeploymentRequest) (contract.DeploymentCheck, error) {
	st, err := c.Controller.latest(ctx, req.Cluster)
	if err != nil {
		// Never deployed is an answer, not a failure.
		return contract.DeploymentCheck{Detail: err.Error()}, nil
	}
	chk := contract.DeploymentCheck{Exists: true, Running: st.Running, RunID: st.RunID, Closed: st.Closed}
	if st.Spec != nil {
		chk.SpecHash = st.Spec.Hash()
	}
	if st.Result == nil {
		chk.Detail = fmt.Sprintf("latest deploy %s", map[bool]string{true: "is running", false: "ended " + st.Closed}[st.Running])
		return chk, nil
	}
	chk.Endpoint = st.Result.Endpoint
	chk.Plan = &st.Result.Plan
	served := ""
	if st.Spec != nil {
		served = st.Spec.Model.ServedName
	}
	if err := readiness.Check(ctx, fetchOK, chk.Endpoint, served); err != nil {
		chk.Detail = err.Error()
		return chk, nil
	}
	chk.Healthy = true
	return chk, nil
}

// CheckEndpoint is the readiness check from this process: /health 200 and /v1/models
// listing served.
func CheckEndpoint(ctx context.Context, endpoint, served string) error {
	return readiness.Check(ctx, fetchOK, endpoint, served)
}

// fetchOK GETs url and returns the body of a 200 answer.
func fetchOK(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 3 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}
