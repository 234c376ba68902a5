// Command gate is the Temporal gate for node agents (package agentgate): it listens where
// the agents dial Temporal, knows each node's API key by its SHA-256 (--keys), and
// forwards to the frontend (--upstream) only the calls docs/security.md's table allows
// that node ("the calls an agent makes"). The controller, the operator and the UI talk to
// the frontend directly; the nodes must reach it through the gate alone.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tpdeploy/tpdeploy/internal/agentgate"
	"github.com/tpdeploy/tpdeploy/internal/logging"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gate:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	listen := fs.String("listen", envOr("TPDEPLOY_GATE_LISTEN", ""), "address the agents dial (host:port; env TPDEPLOY_GATE_LISTEN)")
	upstream := fs.String("upstream", envOr("TPDEPLOY_GATE_UPSTREAM", ""), "the Temporal frontend (host:port; env TPDEPLOY_GATE_UPSTREAM)")
	keys := fs.String("keys", envOr("TPDEPLOY_GATE_KEYS", ""), "file of 'NODE SHA256-OF-ITS-API-KEY' lines (env TPDEPLOY_GATE_KEYS)")
	certFile := fs.String("tls-cert", "", "serve TLS with this certificate (with --tls-key); without, plaintext for a network only the nodes and the gate share")
	keyFile := fs.String("tls-key", "", "the certificate's private key")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *listen == "" || *upstream == "" || *keys == "" {
		return errors.New("--listen, --upstream and --keys are required")
	}
	z, err := logging.New(*level, false)
	if err != nil {
		return err
	}
	nodes, err := readKeys(*keys)
	if err != nil {
		return err
	}
	var opts []grpc.ServerOption
	if *certFile != "" || *keyFile != "" {
		creds, err := credentials.NewServerTLSFromFile(*certFile, *keyFile)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		opts = append(opts, grpc.Creds(creds))
	}
	gate, err := agentgate.Start(*listen, *upstream, nodes, z, opts...)
	if err != nil {
		return err
	}
	z.Info("gate serving", zap.String("listen", gate.Addr), zap.String("upstream", *upstream), zap.Int("nodes", len(nodes)))
	select {
	case <-ctx.Done():
		return gate.Stop()
	case err := <-gate.Done():
		return err
	}
}

var hexHash = regexp.MustCompile(`^[0-9a-f]{64}$`)

// readKeys reads the keys file: one node per line, its name and the hex SHA-256 of its
// API key; blank lines and # comments are skipped.
func readKeys(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--keys: %w", err)
	}
	defer f.Close()
	nodes := map[string]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 || !hexHash.MatchString(fields[1]) {
			return nil, fmt.Errorf("--keys %s:%d: want 'NODE SHA256-HEX', got %q", path, line, text)
		}
		if prev, dup := nodes[fields[1]]; dup {
			return nil, fmt.Errorf("--keys %s:%d: %s has the key of %s", path, line, fields[0], prev)
		}
		nodes[fields[1]] = fields[0]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--keys %s: %w", path, err)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("--keys %s: no node", path)
	}
	return nodes, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
