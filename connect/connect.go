// Package connect holds the Temporal connection settings shared by the worker and the
// starter: flags that default to the standard TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE.
package connect

import (
	"flag"
	"fmt"
	"os"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/logging"
)

// Options say where Temporal is.
type Options struct {
	Address   string
	Namespace string
}

// Register adds --address and --namespace to fs, defaulting to the environment.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.Address, "address", EnvOr("TEMPORAL_ADDRESS", client.DefaultHostPort), "Temporal frontend host:port (env TEMPORAL_ADDRESS)")
	fs.StringVar(&o.Namespace, "namespace", EnvOr("TEMPORAL_NAMESPACE", client.DefaultNamespace), "Temporal namespace (env TEMPORAL_NAMESPACE)")
}

// EnvSetOr is EnvOr where a variable set to the empty string counts as set (an empty
// value is meaningful, e.g. "no ulimits").
func EnvSetOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// EnvOr returns the environment variable key, or def when it is unset or empty.
func EnvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Dial connects to Temporal, logging through z.
func (o Options) Dial(z *zap.Logger) (client.Client, error) {
	c, err := client.Dial(client.Options{
		HostPort:  o.Address,
		Namespace: o.Namespace,
		Logger:    logging.Temporal(z),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to temporal at %s (namespace %s): %w", o.Address, o.Namespace, err)
	}
	return c, nil
}
