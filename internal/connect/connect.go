// Package connect holds the Temporal connection settings shared by the worker and the
// starter. They are read as Temporal's own tools read them (go.temporal.io/sdk/contrib/envconfig):
// a profile from the TOML file the `temporal` CLI uses (TEMPORAL_CONFIG_FILE, default
// ~/.config/temporalio/temporal.toml; profile TEMPORAL_PROFILE, default "default"), then
// the environment (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS,
// TEMPORAL_TLS_*), then flags, each overriding the one before. A payload codec key file
// (--codec-key-file, TEMPORAL_CODEC_KEY_FILE) makes every payload encrypted (package codec).
package connect

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"strings"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tpdeploy/tpdeploy/internal/codec"
	"github.com/tpdeploy/tpdeploy/internal/logging"
)

// Options say where Temporal is and how to reach it. Empty fields are taken from the
// profile and the environment.
type Options struct {
	Address   string
	Namespace string
	APIKey    string
	// TLS turns TLS on with the system's roots when nothing else does (a CA, a client
	// certificate, an API key or the profile).
	TLS           bool
	TLSCertPath   string
	TLSKeyPath    string
	TLSCAPath     string
	TLSServerName string
	Profile       string
	ConfigFile    string
	// CodecKeyFile, when set, encrypts every payload with the keys in this file.
	CodecKeyFile string
	// MetricsHandler receives the SDK's metrics; nil for none. Not a flag.
	MetricsHandler client.MetricsHandler
	// Identity names this process to the server (its pollers in DescribeTaskQueue, the
	// identity in history events); empty: the SDK's pid@host. Not a flag.
	Identity string
	// DialOptions are added to the gRPC connection's (the worker's tests record the calls
	// a role makes). Not a flag.
	DialOptions []grpc.DialOption
}

// Register adds the connection flags to fs.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.Address, "address", "", "Temporal frontend host:port (default: env TEMPORAL_ADDRESS, the profile, "+client.DefaultHostPort+")")
	fs.StringVar(&o.Namespace, "namespace", "", "Temporal namespace (default: env TEMPORAL_NAMESPACE, the profile, "+client.DefaultNamespace+")")
	fs.StringVar(&o.APIKey, "api-key", "", "Temporal API key; prefer env TEMPORAL_API_KEY, which process listings do not show")
	fs.BoolVar(&o.TLS, "tls", false, "connect with TLS using the system's roots (implied by the other TLS settings and by an API key; env TEMPORAL_TLS)")
	fs.StringVar(&o.TLSCertPath, "tls-cert-path", "", "client certificate for mTLS (env TEMPORAL_TLS_CLIENT_CERT_PATH)")
	fs.StringVar(&o.TLSKeyPath, "tls-key-path", "", "client private key for mTLS (env TEMPORAL_TLS_CLIENT_KEY_PATH)")
	fs.StringVar(&o.TLSCAPath, "tls-ca-path", "", "CA certificate that signed the server's certificate (env TEMPORAL_TLS_SERVER_CA_CERT_PATH)")
	fs.StringVar(&o.TLSServerName, "tls-server-name", "", "server name to verify in the server's certificate (env TEMPORAL_TLS_SERVER_NAME)")
	fs.StringVar(&o.Profile, "profile", "", "profile in the Temporal CLI's config file (env TEMPORAL_PROFILE, default \"default\")")
	fs.StringVar(&o.ConfigFile, "config-file", "", "Temporal CLI config file (env TEMPORAL_CONFIG_FILE, default ~/.config/temporalio/temporal.toml)")
	fs.StringVar(&o.CodecKeyFile, "codec-key-file", EnvOr(codec.KeyFileEnv, ""), "encrypt payloads with the AES-256 keys in this file, first key encrypting (env "+codec.KeyFileEnv+")")
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

// ClientOptions resolves the profile, the environment and o into the SDK's options,
// logging through z (nil for none).
func (o Options) ClientOptions(z *zap.Logger) (client.Options, error) {
	prof, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{
		ConfigFilePath:    o.ConfigFile,
		ConfigFileProfile: o.Profile,
	})
	if err != nil {
		return client.Options{}, fmt.Errorf("temporal connection settings: %w", err)
	}
	o.override(&prof)
	opts, err := prof.ToClientOptions(envconfig.ToClientOptionsRequest{})
	if err != nil {
		return client.Options{}, fmt.Errorf("temporal connection settings: %w", err)
	}
	if opts.HostPort == "" {
		opts.HostPort = client.DefaultHostPort
	}
	if opts.Namespace == "" {
		opts.Namespace = client.DefaultNamespace
	}
	if o.CodecKeyFile != "" {
		c, err := codec.Load(o.CodecKeyFile)
		if err != nil {
			return client.Options{}, err
		}
		opts.DataConverter = codec.DataConverter(c)
		// Error messages name nodes, addresses and paths: encrypted like every payload.
		opts.FailureConverter = temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
			DataConverter: opts.DataConverter, EncodeCommonAttributes: true,
		})
	}
	if z != nil {
		opts.Logger = logging.Temporal(z)
	}
	opts.MetricsHandler = o.MetricsHandler
	if o.Identity != "" {
		opts.Identity = o.Identity
	}
	opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions, o.DialOptions...)
	return opts, nil
}

// override applies the flags that were given over the profile and environment.
func (o Options) override(p *envconfig.ClientConfigProfile) {
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&p.Address, o.Address)
	set(&p.Namespace, o.Namespace)
	set(&p.APIKey, o.APIKey)
	if o.TLS || o.TLSCertPath != "" || o.TLSKeyPath != "" || o.TLSCAPath != "" || o.TLSServerName != "" {
		if p.TLS == nil {
			p.TLS = &envconfig.ClientConfigTLS{}
		}
		p.TLS.Disabled = false
		set(&p.TLS.ClientCertPath, o.TLSCertPath)
		set(&p.TLS.ClientKeyPath, o.TLSKeyPath)
		set(&p.TLS.ServerCACertPath, o.TLSCAPath)
		set(&p.TLS.ServerName, o.TLSServerName)
	}
}

// Dial connects to Temporal, logging through z; the error names the address, the
// namespace and, for TLS failures, the setting to look at.
func (o Options) Dial(z *zap.Logger) (client.Client, error) {
	opts, err := o.ClientOptions(z)
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(opts)
	if err != nil {
		return nil, fmt.Errorf("connect to temporal at %s (namespace %s, %s): %w%s",
			opts.HostPort, opts.Namespace, describeTLS(opts.ConnectionOptions.TLS), err, tlsHint(err, opts.ConnectionOptions.TLS))
	}
	if z != nil {
		z.Info("connected to temporal", zap.String("address", opts.HostPort), zap.String("namespace", opts.Namespace),
			zap.String("tls", describeTLS(opts.ConnectionOptions.TLS)), zap.Bool("payloads_encrypted", o.CodecKeyFile != ""))
	}
	return c, nil
}

func describeTLS(t *tls.Config) string {
	switch {
	case t == nil:
		return "plaintext"
	case len(t.Certificates) > 0:
		return "mTLS"
	default:
		return "TLS"
	}
}

// tlsHint turns the TLS failures operators meet into the setting that fixes them.
func tlsHint(err error, t *tls.Config) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "x509: certificate signed by unknown authority"):
		return " (the server's certificate is not signed by a CA this client trusts: set --tls-ca-path or TEMPORAL_TLS_SERVER_CA_CERT_PATH to the CA that signed it)"
	case strings.Contains(msg, "x509: certificate is valid for"), strings.Contains(msg, "x509: cannot validate certificate"):
		return " (the server's certificate does not name this address: set --tls-server-name or TEMPORAL_TLS_SERVER_NAME to a name it holds)"
	case strings.Contains(msg, "certificate required"), strings.Contains(msg, "bad certificate"), strings.Contains(msg, "unknown certificate authority"):
		return " (the server refused this client's certificate: mTLS needs --tls-cert-path and --tls-key-path, or TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH, signed by a CA the server trusts)"
	case t != nil && (strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset by peer")):
		// A server refusing a client certificate closes the connection after its alert;
		// the client often sees the closed connection rather than the alert.
		if len(t.Certificates) == 0 {
			return " (the server closed the TLS connection: if it requires client certificates (mTLS), set --tls-cert-path and --tls-key-path, or TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH)"
		}
		return " (the server closed the TLS connection: it may refuse this client's certificate; the one in --tls-cert-path / TEMPORAL_TLS_CLIENT_CERT_PATH must be signed by a CA the server trusts)"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return " (the server does not speak TLS: drop the TLS settings, or TEMPORAL_TLS=false)"
	}
	return ""
}
