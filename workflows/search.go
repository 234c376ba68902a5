package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/searchattr"
)

// upsertSearch records the cluster and phase on a deploy's run (a plan records none).
func (d *deployment) upsertSearch(ctx workflow.Context, phase string) {
	if d.dryRun || phase == d.searchPhase {
		return
	}
	d.searchPhase = phase
	err := workflow.UpsertTypedSearchAttributes(ctx, searchattr.ClusterName.ValueSet(d.spec.Name), searchattr.DeployPhase.ValueSet(phase))
	if err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}
