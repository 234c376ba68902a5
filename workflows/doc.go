// Package workflows holds tpdeploy's Temporal workflows. Workflow code is deterministic:
// every side effect is an activity, every decision is recorded in history.
//
// The story of a deploy, file by file: DeployCluster (deploy.go) claims the cluster
// (claim.go), plans its network (plan.go: probe, reachability, the subnet), checks the
// model (model.go), then runs the executor's steps — over Ray (ray.go) or vLLM's own
// multi-node mode (mp.go) — and waits until vLLM serves (serving.go). A failure runs the
// saga's compensations (saga.go); a node that reboots or whose network changes starts the
// deploy over (restart.go); a node that goes down is named as the cause (nodedown.go).
// A deploy that serves hands the cluster to its supervisor (supervise.go: one carried
// state; incident.go: the causes and outcomes; recover.go: the redeploys and the circuit
// breaker); a changed spec deployed onto a serving cluster is staged beside it (stage.go);
// schedules start RedeployCluster (redeploy.go), and TeardownCluster (teardown.go) removes
// it all. How each kind of step is run (timeouts, retries, heartbeats, local decisions) is
// options.go; the workflow IDs, signals, queries and error types are package contract's.
//
// # Versioning the next change
//
// Every workflow has one path today: no release has shipped, and no cluster runs a history
// recorded by older code, so no workflow.GetVersion call is left. Versioning starts to
// bind at the first real release: from then on, a change that alters the commands a
// running workflow issues (adds, removes or reorders an activity, a timer, a child, a
// signal sent, a search-attribute upsert) must let histories recorded before it replay.
// To make such a change:
//
//  1. Record a history of the path as it is, before the change, and commit it (control's
//     TestHistoriesOfEveryWorkflowType and TestDeployCompletesOnDevServer write
//     workflows/testdata with TPDEPLOY_UPDATE_HISTORY=1; add a case there if the path is
//     not covered): TestReplayCommittedHistories then guards the old path.
//  2. Wrap the change point in workflow.GetVersion with a new change ID, named for the
//     change and declared as a constant beside it, with a comment saying what it guards
//     (the example below; never reuse a retired ID). A second change at the same point raises the maximum to 2 and
//     keeps every branch that a running history can still take.
//  3. Record a history of the new path too, so that both replay.
//
// The change point, versioned:
//
//	// canaryVersion: from here on, a deploy sends the canary requests before it serves.
//	const canaryVersion = "canary"
//
//	if workflow.GetVersion(ctx, canaryVersion, workflow.DefaultVersion, 1) == 1 {
//		// the new commands
//	} else {
//		// the old ones, exactly as they were
//	}
//
// Retire a version once no running workflow can be on the old path (every run started
// before the release that added it has closed; supervisors continue as new, so they move
// to the new path at their next run): raise the minimum supported version
// (workflow.GetVersion(ctx, id, 1, 1)), delete the old branch, and drop the histories that
// only the old path recorded. Once the minimum equals the maximum for every deploy still
// running, the call itself can go with a re-recording of the histories.
package workflows
