// Command worker is the tpdeploy node agent. It runs on every GPU node, serves that node's
// task queue (tpdeploy.node.NAME) with the node's activities, and also runs workflow tasks
// on the shared tpdeploy queue, so any live agent can drive a deployment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/connect"
	"github.com/tpdeploy/tpdeploy/logging"
	"github.com/tpdeploy/tpdeploy/workflows"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: worker --node NAME [flags]\n\nRuns the tpdeploy node agent for one GPU node.\n\n")
		fs.PrintDefaults()
	}
	var (
		conn       connect.Options
		node       = fs.String("node", connect.EnvOr("TPDEPLOY_NODE", ""), "this node's name in the cluster spec (env TPDEPLOY_NODE)")
		netNS      = fs.String("netns", "", "run network activities in this named network namespace (tests; empty on real nodes)")
		bootIDFile = fs.String("boot-id-file", "", "read the boot ID from this file instead of the kernel's")
		logLevel   = fs.String("log-level", "info", "debug, info, warn or error")
		console    = fs.Bool("log-console", false, "human-readable logs instead of JSON")
	)
	conn.Register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *node == "" {
		return errors.New("--node is required: the node's name as written in the cluster spec")
	}
	z, err := logging.New(*logLevel, *console)
	if err != nil {
		return err
	}
	defer func() { _ = z.Sync() }()
	z = z.With(zap.String("node", *node))

	c, err := conn.Dial(z)
	if err != nil {
		return err
	}
	defer c.Close()

	wf := worker.New(c, activities.WorkflowQueue, worker.Options{})
	wf.RegisterWorkflow(workflows.DeployCluster)
	wf.RegisterWorkflow(workflows.PlanCluster)
	wf.RegisterWorkflow(workflows.TeardownCluster)

	nodeWorker := worker.New(c, activities.NodeQueue(*node), worker.Options{})
	nodeWorker.RegisterActivity(&activities.Node{Name: *node, Log: z, NetNS: *netNS, BootIDFile: *bootIDFile})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := wf.Start(); err != nil {
		return fmt.Errorf("start workflow worker: %w", err)
	}
	defer wf.Stop()
	if err := nodeWorker.Start(); err != nil {
		return fmt.Errorf("start node worker on %s: %w", activities.NodeQueue(*node), err)
	}
	defer nodeWorker.Stop()
	z.Info("node agent serving", zap.String("queue", activities.NodeQueue(*node)), zap.String("temporal", conn.Address))
	<-ctx.Done()
	z.Info("shutting down")
	return nil
}
