//go:build lab

package main

import (
	"os"

	"go.temporal.io/sdk/interceptor"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/barrier"
)

// labHooks, in a lab build, holds activities at the lab's barrier files when the lab gives
// the agent a directory (lab.go sets barrier.EnvDir): the fault matrix injects a fault at
// an exact step. See hooks.go for why production builds lack it.
func labHooks(z *zap.Logger) []interceptor.WorkerInterceptor {
	dir := os.Getenv(barrier.EnvDir)
	if dir == "" {
		return nil
	}
	z.Warn("lab barriers on: activities named by files in the directory are held", zap.String("dir", dir))
	return []interceptor.WorkerInterceptor{&barrier.Interceptor{Dir: dir}}
}
