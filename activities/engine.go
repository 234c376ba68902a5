package activities

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/cli/cli/connhelper"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
)

// DefaultDockerHost is the engine a node's agent talks to when the spec names none.
const DefaultDockerHost = "unix:///var/run/docker.sock"

// containerEngine is what the container activities need of a node's Docker engine; the
// moby client satisfies it.
type containerEngine interface {
	ServerVersion(ctx context.Context, o client.ServerVersionOptions) (client.ServerVersionResult, error)
	ImageInspect(ctx context.Context, image string, o ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerStart(ctx context.Context, id string, o client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerInspect(ctx context.Context, id string, o client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ContainerList(ctx context.Context, o client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerStop(ctx context.Context, id string, o client.ContainerStopOptions) (client.ContainerStopResult, error)
	ContainerRemove(ctx context.Context, id string, o client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerLogs(ctx context.Context, id string, o client.ContainerLogsOptions) (client.ContainerLogsResult, error)
	// ContainerWait streams its answer: bounded by its caller.
	ContainerWait(ctx context.Context, id string, o client.ContainerWaitOptions) client.ContainerWaitResult
	ExecCreate(ctx context.Context, id string, o client.ExecCreateOptions) (client.ExecCreateResult, error)
	ExecAttach(ctx context.Context, id string, o client.ExecAttachOptions) (client.ExecAttachResult, error)
	ExecInspect(ctx context.Context, id string, o client.ExecInspectOptions) (client.ExecInspectResult, error)
	ExecStart(ctx context.Context, id string, o client.ExecStartOptions) (client.ExecStartResult, error)
	CopyToContainer(ctx context.Context, id string, o client.CopyToContainerOptions) (client.CopyToContainerResult, error)
}

// engines caches one client per engine address: clients hold connection pools and their
// negotiated API version.
type engines struct {
	mu      sync.Mutex
	clients map[string]*client.Client
}

// engine returns the client for host (empty: DOCKER_HOST, else the local socket). The
// API version is negotiated with the engine on first use, so engines down to API 1.41
// (Docker 20.10) work; tcp:// uses TLS when DOCKER_CERT_PATH is set for the agent;
// ssh:// runs `docker system dial-stdio` on the remote host through ssh, as the docker
// CLI does.
func (e *engines) engine(host string) (containerEngine, string, error) {
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	if host == "" {
		host = DefaultDockerHost
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if c, ok := e.clients[host]; ok {
		return boundedEngine{c}, host, nil
	}
	opts, err := engineOptions(host)
	if err != nil {
		return nil, host, temporal.NewNonRetryableApplicationError(fmt.Sprintf("docker host %q: %v", host, err), contract.ErrBadRequest, nil)
	}
	c, err := client.New(opts...)
	if err != nil {
		return nil, host, temporal.NewNonRetryableApplicationError(fmt.Sprintf("docker host %q: %v", host, err), contract.ErrBadRequest, nil)
	}
	if e.clients == nil {
		e.clients = map[string]*client.Client{}
	}
	e.clients[host] = c
	return boundedEngine{c}, host, nil
}

func engineOptions(host string) ([]client.Opt, error) {
	u, err := url.Parse(host)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "unix":
		return []client.Opt{client.WithHost(host)}, nil
	case "tcp":
		opts := []client.Opt{client.WithHost(host)}
		if os.Getenv("DOCKER_CERT_PATH") != "" || os.Getenv("DOCKER_TLS_VERIFY") != "" {
			opts = append(opts, client.WithTLSClientConfigFromEnv())
		}
		return opts, nil
	case "ssh":
		h, err := connhelper.GetConnectionHelper(host)
		if err != nil {
			return nil, err
		}
		return []client.Opt{client.WithHost(h.Host), client.WithDialContext(h.Dialer)}, nil
	}
	return nil, fmt.Errorf("unsupported scheme %q (use unix://, tcp:// or ssh://)", u.Scheme)
}

// engineError turns an engine failure into the activity's error: an engine that does not
// answer is retryable and named by its address; anything else is returned as it is.
func engineError(host, doing string, err error) error {
	if err == nil {
		return nil
	}
	if client.IsErrConnectionFailed(err) || errors.Is(err, context.DeadlineExceeded) || cerrdefs.IsUnavailable(err) {
		return temporal.NewApplicationError(fmt.Sprintf("docker engine at %s unreachable (%s): %v", host, doing, err), contract.ErrDockerUnreachable)
	}
	if cerrdefs.IsInvalidArgument(err) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %v", doing, err), contract.ErrDocker, nil)
	}
	return temporal.NewApplicationError(fmt.Sprintf("%s: %v", doing, err), contract.ErrDocker)
}

// engineInfo asks the node's Docker engine for its version, to report in the probe whether
// the engine answers before anything is started on it.
func (e *engines) engineInfo(ctx context.Context, host string) netplan.DockerInfo {
	eng, addr, err := e.engine(host)
	if err != nil {
		return netplan.DockerInfo{Error: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := eng.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return netplan.DockerInfo{Error: fmt.Sprintf("docker engine at %s: %v", addr, err)}
	}
	return netplan.DockerInfo{Reachable: true, Version: v.Version, APIVersion: v.APIVersion}
}
