package connect_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/connect"
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

// startServices, set by the files with build tag integration, starts what their tests dial.
var startServices func(dir string) (stop func(), err error)

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tpdeploy-connect-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// Neither this machine's Temporal CLI profile nor a TEMPORAL_* variable of the caller
	// may change what the tests dial.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TEMPORAL_") && k != "TEMPORAL_BIN" {
			os.Unsetenv(k)
		}
	}
	os.Setenv("TEMPORAL_CONFIG_FILE", filepath.Join(dir, "absent.toml"))
	if startServices != nil {
		stop, err := startServices(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			return 1
		}
		defer stop()
	}
	return m.Run()
}

func TestRegisterFlags(t *testing.T) {
	var o connect.Options
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o.Register(fs)
	err := fs.Parse([]string{"--address", "a:1", "--namespace", "ns", "--api-key", "k", "--tls",
		"--tls-cert-path", "c", "--tls-key-path", "k.pem", "--tls-ca-path", "ca", "--tls-server-name", "sn",
		"--profile", "p", "--config-file", "f.toml", "--codec-key-file", "key"})
	if err != nil {
		t.Fatal(err)
	}
	want := connect.Options{Address: "a:1", Namespace: "ns", APIKey: "k", TLS: true, TLSCertPath: "c", TLSKeyPath: "k.pem",
		TLSCAPath: "ca", TLSServerName: "sn", Profile: "p", ConfigFile: "f.toml", CodecKeyFile: "key"}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("parsed %+v\nwant   %+v", o, want)
	}
}

func TestCodecKeyFileFromEnvironment(t *testing.T) {
	t.Setenv("TEMPORAL_CODEC_KEY_FILE", "/etc/tpdeploy/codec.key")
	var o connect.Options
	o.Register(flag.NewFlagSet("x", flag.ContinueOnError))
	if o.CodecKeyFile != "/etc/tpdeploy/codec.key" {
		t.Errorf("codec key file = %q", o.CodecKeyFile)
	}
	if _, err := o.ClientOptions(nil); err == nil || !strings.Contains(err.Error(), "/etc/tpdeploy/codec.key") {
		t.Errorf("a missing key file must fail naming it, got %v", err)
	}
}
