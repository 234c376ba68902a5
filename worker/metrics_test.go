package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/devserver"
	"github.com/tpdeploy/tpdeploy/internal/metrics"
)

// A port alone is loopback's; every interface is refused unless the operator says so.
func TestMetricsListenAddress(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		all     bool
		want    string
		note    bool
		wantErr string
	}{
		{addr: ":9464", want: "127.0.0.1:9464", note: true},
		{addr: ":9464", all: true, want: ":9464", note: true},
		{addr: "10.0.0.11:9464", want: "10.0.0.11:9464"},
		{addr: "127.0.0.1:9464", want: "127.0.0.1:9464"},
		{addr: "[fd00::11]:9464", want: "[fd00::11]:9464"},
		{addr: "localhost:9464", want: "localhost:9464"},
		{addr: "0.0.0.0:9464", wantErr: "listens on every interface"},
		{addr: "[::]:9464", wantErr: "listens on every interface"},
		{addr: "0.0.0.0:9464", all: true, want: "0.0.0.0:9464"},
		{addr: "9464", wantErr: `--metrics-addr "9464"`},
	} {
		got, note, err := metricsListen(tc.addr, tc.all)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("metricsListen(%q, %v) = %q, %v; want an error with %q", tc.addr, tc.all, got, err, tc.wantErr)
			} else if strings.Contains(tc.wantErr, "every interface") && !strings.Contains(err.Error(), flagMetricsAll) {
				t.Errorf("the refusal %q does not name %s", err, flagMetricsAll)
			}
		case err != nil || got != tc.want || (note != "") != tc.note:
			t.Errorf("metricsListen(%q, %v) = %q, note %q, %v; want %q (note: %v)", tc.addr, tc.all, got, note, err, tc.want, tc.note)
		}
	}
}

// The agent refuses to start with its metrics on every interface, before it connects to
// anything, and names the flag that allows it.
func TestAgentRefusesMetricsOnEveryInterface(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := run(ctx, []string{"--node", "n1", "--address", "127.0.0.1:1", "--metrics-addr", "0.0.0.0:0",
		"--policy-file", writePolicy(t, "allowed_ports: ['8000-9000']\n")})
	if err == nil || !strings.Contains(err.Error(), "every interface") || !strings.Contains(err.Error(), flagMetricsAll) {
		t.Fatalf("run = %v, want the every-interface refusal naming %s", err, flagMetricsAll)
	}
}

// --metrics-addr :PORT serves on loopback and not on the node's other addresses.
func TestMetricsPortAloneIsLoopbackOnly(t *testing.T) {
	var other net.IP
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			other = n.IP
			break
		}
	}
	if other == nil {
		t.Fatal("this host has no non-loopback IPv4 address to check the bind against")
	}
	port, err := devserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	live := &metrics.Liveness{}
	live.Set(true, "test")
	_, stop, err := serveMetrics(fmt.Sprintf(":%d", port), false, "n1", live, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if code, _, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/healthz", port)); err != nil || code != http.StatusOK {
		t.Fatalf("/healthz on loopback: %d, %v", code, err)
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(other.String(), fmt.Sprint(port)), 2*time.Second)
	if err == nil {
		c.Close()
		t.Fatalf("the metrics endpoint answers on %s: a port alone must mean loopback only", other)
	}
}
