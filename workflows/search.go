package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/searchattr"
)

// searchAttributesVersion guards the upserts: histories recorded before they existed
// replay without them.
const searchAttributesVersion = "search-attributes"

// upsertSearch records the cluster and phase on the run, when this run uses them.
func (d *deployment) upsertSearch(ctx workflow.Context, phase string) {
	if !d.searchAttrs || phase == d.searchPhase {
		return
	}
	d.searchPhase = phase
	err := workflow.UpsertTypedSearchAttributes(ctx, searchattr.ClusterName.ValueSet(d.spec.Name), searchattr.DeployPhase.ValueSet(phase))
	if err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}
