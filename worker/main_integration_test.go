//go:build integration

package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/devserver"
)

var devAddress string

func init() { startServices = startDevServer }

// startDevServer starts the Temporal dev server the agent under test connects to.
func startDevServer(dir string) (stop func(), err error) {
	srv, err := devserver.Start(context.Background(), dir)
	if err != nil {
		// No skip: CI builds the binary, so its absence is a failure to be seen.
		return nil, fmt.Errorf("worker tests need the Temporal dev server: %w", err)
	}
	devAddress = srv.Address
	return srv.Stop, nil
}

// TestAgentServesMetricsAndHealth runs the agent against the dev server with
// --metrics-addr and scrapes it: /healthz is 200 while its pollers run, /metrics carries
// the SDK's own metrics; after shutdown the endpoint is gone.
func TestAgentServesMetricsAndHealth(t *testing.T) {
	port, err := devserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--node", "metrics-node", "--address", devAddress, "--log-level", "error",
			"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port), "--policy-file", writePolicy(t, "allowed_ports: ['8000-9000']\n")})
	}()

	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := httpGet(base + "/healthz")
		if err == nil && code == http.StatusOK {
			if !strings.Contains(body, "tpdeploy.node.metrics-node") {
				t.Errorf("/healthz body %q does not name the node's queue", body)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("agent exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz not 200 after 30s: %d %q %v", code, body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Pollers report requests within moments; wait for the SDK's metrics to show.
	var body string
	for time.Now().Before(deadline) {
		_, body, err = httpGet(base + "/metrics")
		if err == nil && strings.Contains(body, "temporal_long_request_total{") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, want := range []string{
		"temporal_request_total{", // the SDK's RPCs
		"temporal_long_request_total{",
		`task_queue="tpdeploy.node.metrics-node"`,
		"temporal_worker_task_slots_available{",
		"temporal_worker_start_total{", // the dashboard's job variable
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%.4000s", body)
	}
	if nodePolicy.CheckPorts(8500) != nil || nodePolicy.CheckPorts(9001) == nil {
		t.Errorf("the agent's policy is not the file's: %+v", nodePolicy)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("agent exit on cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop")
	}
	if _, _, err := httpGet(base + "/healthz"); err == nil {
		t.Error("the endpoint still answers after the agent stopped")
	}
}
