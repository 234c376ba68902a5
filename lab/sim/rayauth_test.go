package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Ray's token mode at `ray start` (authentication_token_setup.py, PR #64755 for 2.59;
// authentication_token_loader.cc for the sources).
func TestRayStartTokenMode(t *testing.T) {
	home := t.TempDir()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("  file-token \nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, ray          string
		head               bool
		mode, env, path    string
		homeToken          bool
		want, wantErr      string
		wantModeSetInChild bool
	}{
		{name: "no token auth before 2.52", ray: "2.49.2", head: true, mode: "token", env: "t"},
		{name: "2.55 head with a token but no mode: off", ray: "2.55.0", head: true, env: "t"},
		{name: "2.55 explicit mode", ray: "2.55.0", head: true, mode: "token", env: "env-token", want: "env-token"},
		{name: "2.59 head turns it on from ~/.ray/auth_token", ray: "2.59.0", head: true, homeToken: true, want: "home-token", wantModeSetInChild: true},
		{name: "2.59 head from RAY_AUTH_TOKEN_PATH", ray: "2.59.0", head: true, path: "FILE", want: "file-token", wantModeSetInChild: true},
		{name: "2.59 RAY_AUTH_TOKEN first", ray: "2.59.0", head: true, env: "env-token", path: "FILE", homeToken: true, want: "env-token", wantModeSetInChild: true},
		{name: "2.59 worker without a mode stays off", ray: "2.59.0", homeToken: true},
		{name: "2.59 head without any token: off", ray: "2.59.0", head: true},
		{name: "2.59 disabled is respected", ray: "2.59.0", head: true, mode: "disabled", homeToken: true},
		{name: "token mode without a token fails", ray: "2.59.0", mode: "token", wantErr: "no authentication token was found"},
		{name: "an unreadable path fails closed", ray: "2.59.0", head: true, path: "/nonexistent/token", wantErr: "RAY_AUTH_TOKEN_PATH is set but file cannot be opened or is empty: /nonexistent/token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := filepath.Join(home, strings.ReplaceAll(tc.name, " ", "_"))
			t.Setenv("HOME", h)
			if tc.homeToken {
				_ = os.MkdirAll(filepath.Join(h, ".ray"), 0o700)
				_ = os.WriteFile(filepath.Join(h, ".ray", "auth_token"), []byte("home-token\n"), 0o600)
			}
			setOrUnset(t, "RAY_AUTH_MODE", tc.mode)
			setOrUnset(t, "RAY_AUTH_TOKEN", tc.env)
			p := tc.path
			if p == "FILE" {
				p = tokenFile
			}
			setOrUnset(t, "RAY_AUTH_TOKEN_PATH", p)
			got, err := startAuthOn(tc.ray, tc.head)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("token %q %v, want %q", got, err, tc.want)
			}
			if set := os.Getenv("RAY_AUTH_MODE") == "token" && tc.mode == ""; set != tc.wantModeSetInChild {
				t.Errorf("RAY_AUTH_MODE=token for the head's processes: %v, want %v", set, tc.wantModeSetInChild)
			}
		})
	}
}

// setOrUnset sets name for the test, or unsets it ("" value), restoring it after.
func setOrUnset(t *testing.T, name, value string) {
	t.Setenv(name, value)
	if value == "" {
		os.Unsetenv(name)
	}
}

// The GCS in token mode refuses its JSON API without the token, as its gRPC methods.
func TestGCSRefusesCallsWithoutTheToken(t *testing.T) {
	g := newGCS("s", "127.0.0.1:1", "tok")
	for _, tc := range []struct {
		auth string
		ok   bool
	}{{"", false}, {"Bearer other", false}, {"Bearer tok", true}} {
		if g.authorized(tc.auth) != tc.ok {
			t.Errorf("%q: authorized %v", tc.auth, !tc.ok)
		}
	}
	if !newGCS("s", "127.0.0.1:1", "").authorized("") {
		t.Error("without token mode every call is authorized")
	}
}

// The GCS's gRPC methods in token mode: refused Unauthenticated without the token or with
// another, answered with it.
func TestGCSgRPCRefusesCallsWithoutTheToken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go newGCS("s", "127.0.0.1:1", "tok").serve(l)
	conn, err := grpc.NewClient("passthrough:///"+l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, tc := range []struct {
		auth string
		want codes.Code
	}{{"", codes.Unauthenticated}, {"Bearer other", codes.Unauthenticated}, {"Bearer tok", codes.OK}} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if tc.auth != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", tc.auth)
		}
		var reply []byte
		err := conn.Invoke(ctx, nodeInfoService+"GetClusterId", &[]byte{}, &reply, grpc.ForceCodec(rawCodec{}))
		cancel()
		if status.Code(err) != tc.want {
			t.Errorf("%q: %v, want %s", tc.auth, err, tc.want)
		}
		if tc.want == codes.Unauthenticated && status.Convert(err).Message() != rayUnauthenticated {
			t.Errorf("%q: message %q", tc.auth, status.Convert(err).Message())
		}
	}
}
