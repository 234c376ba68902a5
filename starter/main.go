// Command starter is the operator's CLI: deploy, plan, status and teardown of a cluster.
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/connect"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/logging"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

const usage = `Usage: starter COMMAND [flags]

Commands:
  deploy -f spec.yaml [--watch]   deploy the cluster (one deploy per cluster at a time)
  plan -f spec.yaml [--json]      probe nodes, test reachability, show the subnet plan; starts nothing
  status CLUSTER [--watch]        show the latest deploy's phase, progress, plan and result
  teardown CLUSTER [-f spec.yaml] cancel a running deploy, stop supervision, pause the schedule,
                                  remove the cluster's containers
  redeploy CLUSTER [--reason TEXT]
                                  ask the cluster's supervisor to redeploy now (re-arms a degraded one)
  schedule create CLUSTER -f spec.yaml --every 24h | --cron '0 3 * * *'
                                  redeploy on a schedule (no-op while the spec is unchanged and serving)
  schedule list [--json] | pause CLUSTER | unpause CLUSTER | delete CLUSTER
  codec-server --codec-key-file FILE [--addr 127.0.0.1:8081] [--ui-origin URL] [--host NAME] [--allow-encode]
                                  decrypt payloads for the Temporal UI and CLI (their codec endpoint)
  keygen -o FILE                  write a new operator signing key (ed25519, mode 0600); print its
                                  public key for the agents' trusted_keys
  sign -f spec.yaml --sign-key-file FILE
                                  print the Start Workflow input (JSON) of a signed deploy, for the UI
  diagnose [--json] [FILE|-]      read a saved log (vLLM's, Ray's, torch's, NCCL's, Docker's) as a
                                  deploy's watch does and print the failures in it; needs no Temporal

Every command but keygen, codec-server and diagnose takes the connection flags --address,
--namespace, --api-key, --tls, --tls-cert-path, --tls-key-path, --tls-ca-path,
--tls-server-name, --profile, --config-file (or the Temporal CLI's environment: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
TEMPORAL_TLS_*, TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE), --codec-key-file (env
TEMPORAL_CODEC_KEY_FILE) when the agents encrypt payloads, --sign-key-file (env
TPDEPLOY_SIGN_KEY_FILE) to sign the spec of deploys, schedules and teardowns with the
operator's key (required by agents whose policy sets trusted_keys), --sign-valid-for
DURATION (env TPDEPLOY_SIGN_VALID_FOR) to make those signatures expire, and --help.
Exit status: 0 on success, 1 with a one-line reason on failure, 2 on usage errors.
`

// errUsage marks errors that exit 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "starter:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "deploy":
		return cmdDeploy(ctx, rest, stdout, stderr)
	case "plan":
		return cmdPlan(ctx, rest, stdout, stderr)
	case "status":
		return cmdStatus(ctx, rest, stdout, stderr)
	case "teardown":
		return cmdTeardown(ctx, rest, stdout, stderr)
	case "redeploy":
		return cmdRedeploy(ctx, rest, stdout, stderr)
	case "schedule":
		return cmdSchedule(ctx, rest, stdout, stderr)
	case "codec-server":
		return cmdCodecServer(ctx, rest, stdout, stderr)
	case "keygen":
		return cmdKeygen(rest, stdout, stderr)
	case "sign":
		return cmdSign(rest, stdout, stderr)
	case "diagnose":
		return cmdDiagnose(rest, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "starter: unknown command %q\n\n%s", cmd, usage)
		return errUsage
	}
}

// command is what every subcommand shares: its flags and the Temporal connection.
type command struct {
	fs   *flag.FlagSet
	conn connect.Options
	// signKeyFile is the operator's signing key (--sign-key-file, TPDEPLOY_SIGN_KEY_FILE).
	signKeyFile string
	// signValidFor is how long its signatures are good for (--sign-valid-for); 0: forever.
	signValidFor time.Duration
	// envErr is a bad value in the environment, reported when the flags are parsed.
	envErr error
}

func newCommand(name, synopsis string, stderr io.Writer) *command {
	c := &command{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.SetOutput(stderr)
	c.fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: starter %s\n\nFlags:\n", synopsis)
		c.fs.PrintDefaults()
	}
	c.conn.Register(c.fs)
	c.fs.StringVar(&c.signKeyFile, "sign-key-file", connect.EnvOr("TPDEPLOY_SIGN_KEY_FILE", ""),
		"the operator's ed25519 key (starter keygen): deploys, schedules and teardowns carry the spec signed with it, which agents with trusted_keys require (env TPDEPLOY_SIGN_KEY_FILE)")
	c.fs.Var(validFor{&c.signValidFor}, "sign-valid-for",
		"how long a signature made with --sign-key-file is good for, e.g. 720h: no agent acts on it after that, recoveries and schedules included; 0 or empty: it does not expire (env TPDEPLOY_SIGN_VALID_FOR)")
	if v := os.Getenv("TPDEPLOY_SIGN_VALID_FOR"); v != "" {
		if err := (validFor{&c.signValidFor}).Set(v); err != nil {
			c.envErr = fmt.Errorf("TPDEPLOY_SIGN_VALID_FOR: %w", err)
		}
	}
	return c
}

// validFor is --sign-valid-for: a Go duration, 0 for none, never negative.
type validFor struct{ d *time.Duration }

func (v validFor) String() string {
	if v.d == nil || *v.d == 0 {
		return ""
	}
	return v.d.String()
}

func (v validFor) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is not a duration of at least 0 (e.g. 720h)", s)
	}
	*v.d = d
	return nil
}

// signKey reads the operator's signing key, or nil when none is given.
func (c *command) signKey() (ed25519.PrivateKey, error) {
	if c.signKeyFile == "" {
		return nil, nil
	}
	data, err := os.ReadFile(c.signKeyFile)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	k, err := intent.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", c.signKeyFile, err)
	}
	return k, nil
}

// parse parses flags; positional arguments may come before or after flags.
func (c *command) parse(args []string) ([]string, error) {
	if c.envErr != nil {
		fmt.Fprintln(c.fs.Output(), c.envErr)
		return nil, errUsage
	}
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, flag.ErrHelp
			}
			return nil, errUsage
		}
		if c.fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, c.fs.Arg(0))
		args = c.fs.Args()[1:]
	}
}

// cluster parses args that must name exactly one cluster; a wrong count prints the usage
// and is errUsage, --help is flag.ErrHelp.
func (c *command) cluster(args []string) (string, error) {
	pos, err := c.parse(args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		c.fs.Usage()
		return "", errUsage
	}
	return pos[0], nil
}

func (c *command) controller() (control.Controller, func(), error) {
	z, err := logging.New("warn", true)
	if err != nil {
		return control.Controller{}, nil, err
	}
	key, err := c.signKey()
	if err != nil {
		return control.Controller{}, nil, err
	}
	opts, err := c.conn.ClientOptions(nil)
	if err != nil {
		return control.Controller{}, nil, err
	}
	cl, err := c.conn.Dial(z.WithOptions(zap.IncreaseLevel(zap.ErrorLevel)))
	if err != nil {
		return control.Controller{}, nil, err
	}
	return control.Controller{Client: cl, DataConverter: opts.DataConverter, SignKey: key, SignValidFor: c.signValidFor}, cl.Close, nil
}

// specAndController reads and validates the spec before connecting, so bad input is
// refused without touching Temporal.
func (c *command) specAndController(file string) (spec.Cluster, control.Controller, func(), error) {
	s, err := readSpec(file)
	if err != nil {
		return spec.Cluster{}, control.Controller{}, nil, err
	}
	ctl, closeFn, err := c.controller()
	return s, ctl, closeFn, err
}

func readSpec(file string) (spec.Cluster, error) {
	if file == "" {
		return spec.Cluster{}, fmt.Errorf("-f spec.yaml is required: %w", errUsage)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return spec.Cluster{}, fmt.Errorf("read spec: %w", err)
	}
	s, err := spec.Parse(data)
	if err != nil {
		return spec.Cluster{}, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}
