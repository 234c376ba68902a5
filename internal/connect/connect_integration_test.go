//go:build integration

package connect_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tpdeploy/tpdeploy/internal/connect"
	"github.com/tpdeploy/tpdeploy/internal/devserver"
)

// devAddress is the real Temporal dev server every test here dials, directly or through
// a TLS-terminating proxy.
var devAddress string

func init() { startServices = startDevServer }

// startDevServer starts the Temporal dev server the tests here dial.
func startDevServer(dir string) (stop func(), err error) {
	srv, err := devserver.Start(context.Background(), dir)
	if err != nil {
		// No skip: CI builds the binary, so its absence is a failure to be seen.
		return nil, fmt.Errorf("connect tests need the Temporal dev server: %w", err)
	}
	devAddress = srv.Address
	return srv.Stop, nil
}

// dialAndCheck dials with o and asks the server for its health and system info.
func dialAndCheck(t *testing.T, o connect.Options) error {
	t.Helper()
	c, err := o.Dial(nil)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		t.Fatalf("health through %s: %v", o.Address, err)
	}
	return nil
}

func TestDialTLSWithTheServersCA(t *testing.T) {
	ca := newCA(t, "tls-ca")
	server := ca.issue(t, "server", false, "127.0.0.1")
	addr := tlsProxy(t, devAddress, &tls.Config{Certificates: []tls.Certificate{server.TLS}})
	if err := dialAndCheck(t, connect.Options{Address: addr, TLSCAPath: ca.CertPath}); err != nil {
		t.Fatalf("TLS with the right CA: %v", err)
	}
}

func TestDialWrongCAFailsNamingTheAddress(t *testing.T) {
	ca, other := newCA(t, "real-ca"), newCA(t, "other-ca")
	server := ca.issue(t, "server", false, "127.0.0.1")
	addr := tlsProxy(t, devAddress, &tls.Config{Certificates: []tls.Certificate{server.TLS}})
	err := dialAndCheck(t, connect.Options{Address: addr, TLSCAPath: other.CertPath})
	if err == nil {
		t.Fatal("dial trusted a server whose certificate another CA signed")
	}
	for _, want := range []string{"connect to temporal at " + addr, "TLS", "unknown authority", "--tls-ca-path"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestDialMutualTLS(t *testing.T) {
	serverCA, clientCA, strangerCA := newCA(t, "server-ca"), newCA(t, "client-ca"), newCA(t, "stranger-ca")
	server := serverCA.issue(t, "server", false, "127.0.0.1")
	agent := clientCA.issue(t, "agent", true)
	stranger := strangerCA.issue(t, "stranger", true)
	addr := tlsProxy(t, devAddress, &tls.Config{
		Certificates: []tls.Certificate{server.TLS},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCA.Pool,
	})

	t.Run("client certificate accepted", func(t *testing.T) {
		o := connect.Options{Address: addr, TLSCAPath: serverCA.CertPath, TLSCertPath: agent.CertPath, TLSKeyPath: agent.KeyPath}
		if err := dialAndCheck(t, o); err != nil {
			t.Fatalf("mTLS: %v", err)
		}
	})
	for _, tt := range []struct {
		name string
		o    connect.Options
	}{
		{"no client certificate", connect.Options{Address: addr, TLSCAPath: serverCA.CertPath}},
		{"certificate of another CA", connect.Options{Address: addr, TLSCAPath: serverCA.CertPath, TLSCertPath: stranger.CertPath, TLSKeyPath: stranger.KeyPath}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := dialAndCheck(t, tt.o)
			if err == nil {
				t.Fatal("the mTLS endpoint accepted the client")
			}
			for _, want := range []string{"connect to temporal at " + addr, "--tls-cert-path"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestTLSServerNameOverride(t *testing.T) {
	ca := newCA(t, "name-ca")
	server := ca.issue(t, "server", false, "temporal.tpdeploy.test")
	addr := tlsProxy(t, devAddress, &tls.Config{Certificates: []tls.Certificate{server.TLS}})
	err := dialAndCheck(t, connect.Options{Address: addr, TLSCAPath: ca.CertPath})
	if err == nil || !strings.Contains(err.Error(), "--tls-server-name") {
		t.Fatalf("certificate for another name: want a hint at --tls-server-name, got %v", err)
	}
	if err := dialAndCheck(t, connect.Options{Address: addr, TLSCAPath: ca.CertPath, TLSServerName: "temporal.tpdeploy.test"}); err != nil {
		t.Fatalf("with the server name: %v", err)
	}
}

func TestPlaintextClientAgainstTLSEndpointFails(t *testing.T) {
	ca := newCA(t, "plain-ca")
	server := ca.issue(t, "server", false, "127.0.0.1")
	addr := tlsProxy(t, devAddress, &tls.Config{Certificates: []tls.Certificate{server.TLS}})
	c, err := connect.Options{Address: addr}.Dial(nil)
	if err == nil {
		c.Close()
		t.Fatal("plaintext dial of a TLS endpoint succeeded")
	}
	if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "plaintext") {
		t.Errorf("error should name the address and say it was plaintext: %v", err)
	}
}

// TestProfileAndEnvironment dials a real mTLS endpoint with settings only in the Temporal
// CLI's config file and environment, and checks the precedence: flags over environment
// over profile.
func TestProfileAndEnvironment(t *testing.T) {
	serverCA, clientCA := newCA(t, "profile-server-ca"), newCA(t, "profile-client-ca")
	server := serverCA.issue(t, "server", false, "127.0.0.1")
	agent := clientCA.issue(t, "agent", true)
	addr := tlsProxy(t, devAddress, &tls.Config{
		Certificates: []tls.Certificate{server.TLS},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCA.Pool,
	})
	file := filepath.Join(t.TempDir(), "temporal.toml")
	toml := fmt.Sprintf(`
[profile.default]
address = "127.0.0.1:1"

[profile.prod]
address = %q
namespace = "default"

[profile.prod.tls]
client_cert_path = %q
client_key_path = %q
server_ca_cert_path = %q
`, addr, agent.CertPath, agent.KeyPath, serverCA.CertPath)
	if err := os.WriteFile(file, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEMPORAL_CONFIG_FILE", file)

	t.Run("profile from TEMPORAL_PROFILE dials mTLS", func(t *testing.T) {
		t.Setenv("TEMPORAL_PROFILE", "prod")
		if err := dialAndCheck(t, connect.Options{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("profile from --profile dials mTLS", func(t *testing.T) {
		if err := dialAndCheck(t, connect.Options{Profile: "prod"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("TLS from TEMPORAL_TLS_* dials mTLS", func(t *testing.T) {
		t.Setenv("TEMPORAL_CONFIG_FILE", filepath.Join(t.TempDir(), "none.toml"))
		t.Setenv("TEMPORAL_ADDRESS", addr)
		t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", agent.CertPath)
		t.Setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", agent.KeyPath)
		t.Setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", serverCA.CertPath)
		if err := dialAndCheck(t, connect.Options{}); err != nil {
			t.Fatal(err)
		}
	})

	for _, tt := range []struct {
		name          string
		env           map[string]string
		o             connect.Options
		wantAddr      string
		wantNamespace string
		wantTLS       bool
	}{
		{"default profile", nil, connect.Options{}, "127.0.0.1:1", "default", false},
		{"env over profile", map[string]string{"TEMPORAL_ADDRESS": "env:7233", "TEMPORAL_NAMESPACE": "env-ns"}, connect.Options{}, "env:7233", "env-ns", false},
		{"flags over env", map[string]string{"TEMPORAL_ADDRESS": "env:7233", "TEMPORAL_NAMESPACE": "env-ns"},
			connect.Options{Address: "flag:7233", Namespace: "flag-ns"}, "flag:7233", "flag-ns", false},
		{"flag address over the named profile", nil, connect.Options{Profile: "prod", Address: "flag:7233"}, "flag:7233", "default", true},
		{"TEMPORAL_TLS=false turns the profile's TLS off", map[string]string{"TEMPORAL_PROFILE": "prod", "TEMPORAL_TLS": "false"}, connect.Options{}, addr, "default", false},
		{"--tls turns TLS on", nil, connect.Options{TLS: true}, "127.0.0.1:1", "default", true},
		{"an API key implies TLS", map[string]string{"TEMPORAL_API_KEY": "k"}, connect.Options{}, "127.0.0.1:1", "default", true},
		{"no profile file: the SDK's defaults", map[string]string{"TEMPORAL_CONFIG_FILE": filepath.Join(t.TempDir(), "none.toml")}, connect.Options{}, client.DefaultHostPort, client.DefaultNamespace, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			opts, err := tt.o.ClientOptions(nil)
			if err != nil {
				t.Fatal(err)
			}
			if opts.HostPort != tt.wantAddr || opts.Namespace != tt.wantNamespace || (opts.ConnectionOptions.TLS != nil) != tt.wantTLS {
				t.Errorf("got address %q namespace %q TLS %v; want %q %q %v",
					opts.HostPort, opts.Namespace, opts.ConnectionOptions.TLS != nil, tt.wantAddr, tt.wantNamespace, tt.wantTLS)
			}
		})
	}

	t.Run("unknown profile is an error", func(t *testing.T) {
		_, err := connect.Options{Profile: "staging"}.ClientOptions(nil)
		if err == nil || !strings.Contains(err.Error(), "staging") {
			t.Fatalf("want an error naming the profile, got %v", err)
		}
	})
}
