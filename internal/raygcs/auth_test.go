package raygcs

import (
	"context"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// tokenGCS is a GCS with Ray's token authentication on: a call whose `authorization`
// metadata is not `Bearer <token>` is refused Unauthenticated, as Ray's C++ servers refuse
// it (src/ray/rpc/authentication/tests/grpc_auth_token_tests.cc's message), and
// reject refuses every call as a wrong cluster ID (server_call.h).
func tokenGCS(t *testing.T, token string, wrongCluster bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodec(rawProto{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var req []byte
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		md, _ := metadata.FromIncomingContext(stream.Context())
		if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+token {
			return status.Error(codes.Unauthenticated, "InvalidAuthToken: Authentication token is missing or incorrect")
		}
		if wrongCluster {
			return status.Error(codes.Unauthenticated, "Wrong cluster ID token in request")
		}
		method, _ := grpc.MethodFromServerStream(stream)
		var reply []byte
		if method == nodeInfoService+"GetAllNodeInfo" {
			var n []byte
			n = protowire.AppendTag(n, 1, protowire.BytesType)
			n = protowire.AppendBytes(n, []byte{0xab})
			n = protowire.AppendTag(n, 2, protowire.BytesType)
			n = protowire.AppendString(n, "10.0.0.1")
			reply = protowire.AppendTag(reply, 2, protowire.BytesType)
			reply = protowire.AppendBytes(reply, n)
		}
		return stream.SendMsg(&reply)
	}))
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
}

func TestTokenIsSentAndARefusalIsAnAuthError(t *testing.T) {
	addr := tokenGCS(t, "s3cret", false)
	nodes, err := Nodes(context.Background(), addr, "s3cret", dialTCP)
	if err != nil || len(nodes) != 1 || nodes[0].IP.String() != "10.0.0.1" {
		t.Fatalf("with the token: %v, %v", nodes, err)
	}
	for _, tc := range []struct {
		token string
		sent  bool
	}{{"", false}, {"other", true}} {
		_, err := Nodes(context.Background(), addr, tc.token, dialTCP)
		var ae *AuthError
		if !errors.As(err, &ae) || ae.TokenSent != tc.sent {
			t.Fatalf("token %q: %v, want an AuthError (sent %v)", tc.token, err, tc.sent)
		}
		if ae.Status != "InvalidAuthToken: Authentication token is missing or incorrect" {
			t.Errorf("status %q", ae.Status)
		}
	}
}

func TestWrongClusterIDIsNoAuthError(t *testing.T) {
	addr := tokenGCS(t, "s3cret", true)
	_, err := Nodes(context.Background(), addr, "s3cret", dialTCP)
	var ae *AuthError
	if err == nil || errors.As(err, &ae) {
		t.Fatalf("a wrong cluster ID: %v, want an error that is no AuthError", err)
	}
}
