//go:build !lab

package main

import (
	"os"

	"go.temporal.io/sdk/interceptor"
	"go.uber.org/zap"
)

// labHooks is what a lab build adds to the agent's workers (lab_hooks.go); a production
// build has none. The lab's barriers (internal/barrier) hold an activity while a file of its
// name exists — a debugging and fault-injection hook no operator should be able to switch
// on in a real agent. An environment variable or a flag alone could be (a drop-in unit
// file, a container's env), so the hook is not compiled in at all: only `go build -tags
// lab ./worker` (the lab's node image, lab.BuildImages) has it, and this binary does not
// link internal/barrier (internal/barrier's TestProductionAgentHasNoBarriers).
func labHooks(z *zap.Logger) []interceptor.WorkerInterceptor {
	if os.Getenv(envBarrierDir) != "" {
		z.Warn(envBarrierDir + " is set but this agent is not a lab build (go build -tags lab): no barriers")
	}
	return nil
}

// envBarrierDir is barrier.EnvDir, named here so that this build need not link the package.
const envBarrierDir = "TPDEPLOY_LAB_BARRIER_DIR"
