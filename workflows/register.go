package workflows

import (
	"fmt"
	"os"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Registry is where workflows are registered: a worker, or a replayer.
type Registry interface {
	RegisterWorkflow(w any)
}

// RegisterAll registers every tpdeploy workflow: the controller runs them all, and the replay
// tests replay every type.
func RegisterAll(r Registry) {
	r.RegisterWorkflow(DeployCluster)
	r.RegisterWorkflow(PlanCluster)
	r.RegisterWorkflow(TeardownCluster)
	r.RegisterWorkflow(RedeployCluster)
	r.RegisterWorkflow(SuperviseCluster)
	r.RegisterWorkflow(NodeStarted) // contract.NodeStartedWorkflow
}

// ReplayHistoryFile replays a history exported as JSON against the workflows as built,
// under the workflow ID it ran with (the deploy and teardown check their own IDs).
func ReplayHistoryFile(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if len(hist.Events) == 0 {
		return fmt.Errorf("%s: no events", file)
	}
	started := hist.Events[0].GetWorkflowExecutionStartedEventAttributes()
	r := worker.NewWorkflowReplayer()
	RegisterAll(r)
	return r.ReplayWorkflowHistoryWithOptions(nil, hist, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: started.GetWorkflowId(), RunID: started.GetOriginalExecutionRunId()},
	})
}
