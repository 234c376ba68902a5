package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/tpdeploy/tpdeploy/netplan"
)

// engineInfo asks the node's Docker engine for its version (GET /version), to report in
// the probe whether the engine answers before anything is started on it. unix:// and
// plain tcp:// are asked directly; ssh:// engines are reached by the container
// activities' client and reported as not checked here.
func engineInfo(ctx context.Context, host string) netplan.DockerInfo {
	u, err := url.Parse(host)
	if err != nil {
		return netplan.DockerInfo{Error: fmt.Sprintf("docker host %q: %v", host, err)}
	}
	var dial func(ctx context.Context, _, _ string) (net.Conn, error)
	base := "http://docker"
	switch u.Scheme {
	case "unix":
		dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", u.Path)
		}
	case "tcp":
		base = "http://" + u.Host
	default:
		return netplan.DockerInfo{Error: fmt.Sprintf("%s engines are not checked by the probe", u.Scheme)}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DialContext: dial}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/version", nil)
	if err != nil {
		return netplan.DockerInfo{Error: err.Error()}
	}
	resp, err := client.Do(req)
	if err != nil {
		return netplan.DockerInfo{Error: fmt.Sprintf("docker engine at %s: %v", host, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return netplan.DockerInfo{Error: fmt.Sprintf("docker engine at %s: GET /version: %s", host, resp.Status)}
	}
	var v struct {
		Version    string `json:"Version"`
		APIVersion string `json:"ApiVersion"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return netplan.DockerInfo{Error: fmt.Sprintf("docker engine at %s: decode /version: %v", host, err)}
	}
	return netplan.DockerInfo{Reachable: true, Version: v.Version, APIVersion: v.APIVersion}
}
