package main

import (
	"context"
	"fmt"
	"os"

	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tpdeploy/tpdeploy/internal/connect"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/liveness"
	"github.com/tpdeploy/tpdeploy/internal/logging"
	"github.com/tpdeploy/tpdeploy/internal/metrics"
	"github.com/tpdeploy/tpdeploy/internal/registration"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// The worker's roles (--role).
const (
	roleAgent      = "agent"
	roleController = "controller"
	roleAll        = "all"
)

// dialHook, when set (the tests), adds gRPC dial options to a role's connection.
var dialHook func(role string) []grpc.DialOption

// identity is this process's identity to the server: its role and node, then the host,
// so DescribeTaskQueue tells a controller's pollers from an agent's.
func identity(who string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s:%d", who, host, os.Getpid())
}

// runController runs the workflows and the operations activities (control.Checks) on
// contract.WorkflowQueue: no node queue, no Docker engine, no node policy. It holds the
// namespace's credentials (it starts, signals, describes and reads workflows), so it runs
// on the operator's side, not on a GPU node. Its checks dial the clusters' endpoints (the
// head's planned address at ports.vllm; Ray's GCS at ports.ray) for specs without vLLM's
// API key, whose checks run on the head's agent instead.
func runController(ctx context.Context, conn connect.Options, logLevel string, console bool, metricsAt string, metricsAll bool) error {
	z, err := logging.New(logLevel, console)
	if err != nil {
		return err
	}
	defer func() { _ = z.Sync() }()
	z = z.With(zap.String("role", roleController))
	live := &metrics.Liveness{}
	live.Set(false, "starting")
	if metricsAt != "" {
		exp, stopMetrics, err := serveMetrics(metricsAt, metricsAll, roleController, live, z)
		if err != nil {
			return err
		}
		defer stopMetrics()
		conn.MetricsHandler = exp.Handler
	}
	conn.Identity = identity("tpdeploy-controller")
	if dialHook != nil {
		conn.DialOptions = append(conn.DialOptions, dialHook(roleController)...)
	}
	copts, err := conn.ClientOptions(nil)
	if err != nil {
		return err
	}
	c, err := conn.Dial(z)
	if err != nil {
		return err
	}
	defer c.Close()
	fatal := make(chan error, 1)
	wf := worker.New(c, contract.WorkflowQueue, worker.Options{
		OnFatalError: func(err error) {
			live.Set(false, "worker stopped: "+err.Error())
			fatal <- err
		},
		Interceptors: append(labHooks(z), &liveness.Interceptor{}),
	})
	workflows.RegisterAll(wf)
	registration.Controller(wf, &control.Checks{Controller: control.Controller{Client: c, DataConverter: copts.DataConverter}})
	if err := wf.Start(); err != nil {
		return fmt.Errorf("start workflow worker: %w", err)
	}
	defer wf.Stop()
	defer live.Set(false, "shutting down")
	live.Set(true, "polling "+contract.WorkflowQueue)
	z.Info("controller serving", zap.String("queue", contract.WorkflowQueue))
	select {
	case <-ctx.Done():
		z.Info("shutting down")
		return nil
	case err := <-fatal:
		return fmt.Errorf("worker stopped: %w", err)
	}
}
