// Package devserver starts the real Temporal dev server (the pinned Temporal CLI) for
// tests: a fresh SQLite file, free ports on loopback, and a stop that leaves nothing.
package devserver

import (
	"github.com/tpdeploy/tpdeploy/internal/searchattr"

	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
)

// Server is a running dev server.
type Server struct {
	Address string
	UIPort  int
	cmd     *exec.Cmd
	done    chan error
}

// Binary finds the Temporal CLI: $TEMPORAL_BIN, else bin/temporal at the module root
// (where `make bin/temporal` puts it).
func Binary() (string, error) {
	if p := os.Getenv("TEMPORAL_BIN"); p != "" {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "bin", "temporal")
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("temporal CLI not found at %s: run `make bin/temporal` (or set TEMPORAL_BIN)", p)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("temporal CLI not found: no go.mod above the working directory; set TEMPORAL_BIN")
		}
		dir = parent
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs `temporal server start-dev` with its database in dataDir and waits until
// it answers, with tpdeploy's search attributes registered. extraArgs are passed on.
func Start(ctx context.Context, dataDir string, extraArgs ...string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	uiPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"server", "start-dev", "--ip", "127.0.0.1", "--port", strconv.Itoa(port),
		"--ui-port", strconv.Itoa(uiPort), "--db-filename", filepath.Join(dataDir, "temporal.db"),
		"--log-level", "error"}, append(searchattr.DevServerFlags(), extraArgs...)...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logFile, err := os.Create(filepath.Join(dataDir, "temporal.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Server{Address: fmt.Sprintf("127.0.0.1:%d", port), UIPort: uiPort, cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait(); logFile.Close() }()
	if err := s.waitReady(ctx, 90*time.Second); err != nil {
		s.Stop()
		log, _ := os.ReadFile(filepath.Join(dataDir, "temporal.log"))
		return nil, fmt.Errorf("temporal dev server on %s: %w\n%s", s.Address, err, log)
	}
	return s, nil
}

func (s *Server) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case err := <-s.done:
			return fmt.Errorf("exited: %v", err)
		default:
		}
		c, err := client.Dial(client.Options{HostPort: s.Address, Logger: quiet{}})
		if err == nil {
			_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
			c.Close()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %v", limit, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop ends the server and its children.
func (s *Server) Stop() {
	if s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
