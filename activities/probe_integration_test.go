//go:build integration

package activities

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestEngineInfoFromTheRealEngine asks this machine's Docker engine, which CI has.
func TestEngineInfoFromTheRealEngine(t *testing.T) {
	var e engines
	info := e.engineInfo(context.Background(), "unix:///var/run/docker.sock")
	if !info.Reachable || info.Version == "" || info.APIVersion == "" {
		t.Fatalf("engine info = %+v (CI runs a Docker engine on the default socket)", info)
	}
	gone := e.engineInfo(context.Background(), "unix://"+filepath.Join(t.TempDir(), "docker.sock"))
	if gone.Reachable || !strings.Contains(gone.Error, "docker engine at unix://") {
		t.Errorf("missing socket = %+v", gone)
	}
	if v := info.APIVersion; v < "1.41" {
		t.Errorf("negotiated API %s, want >= 1.41", v)
	}
	// ssh:// builds docker/cli's connection helper; nothing is dialled until first use.
	if _, err := engineOptions("ssh://root@spark-2"); err != nil {
		t.Errorf("ssh host: %v", err)
	}
	if _, err := engineOptions("npipe:////./pipe/docker_engine"); err == nil || !strings.Contains(err.Error(), "unsupported scheme") {
		t.Errorf("npipe: %v", err)
	}
}
