// Package agentgate is a gRPC gate in front of a Temporal frontend that holds each node
// agent to the calls its role needs (authz.AgentCall): the server-side authorizer the
// dev server and Temporal's namespace roles cannot be. An agent presents its node's API
// key (TEMPORAL_API_KEY, sent as "authorization: Bearer KEY"); the gate knows only the
// keys' SHA-256, maps each to its node, decodes every request as the WorkflowService method
// it names, and forwards it only if AgentCall allows it for that node. The request's bytes
// and the answer are passed on unchanged; the node's key is not. It holds only for nodes
// that reach the frontend through it alone (docs/security.md).
package agentgate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// The WorkflowService's descriptors, which name each method's request type.
	_ "go.temporal.io/api/workflowservice/v1"

	"github.com/tpdeploy/tpdeploy/internal/authz"
)

// workflowService is the one service an agent calls.
const workflowService = "temporal.api.workflowservice.v1.WorkflowService"

// Gate forwards the calls AgentCall allows to Upstream.
type Gate struct {
	// Upstream is the connection to the Temporal frontend.
	Upstream *grpc.ClientConn
	// Nodes maps the hex SHA-256 of each node's API key to the node.
	Nodes map[string]string
	Log   *zap.Logger
}

// KeyHash is the hex SHA-256 of an API key, as Nodes holds it.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Running is a gate serving on Addr (Start).
type Running struct {
	Addr string
	srv  *grpc.Server
	up   *grpc.ClientConn
	done chan error
}

// Start serves a gate on listen in front of the frontend at upstream (plaintext: run the
// gate beside it), for nodes (Nodes' form); opts are the server's (its TLS).
func Start(listen, upstream string, nodes map[string]string, log *zap.Logger, opts ...grpc.ServerOption) (*Running, error) {
	up, err := grpc.NewClient(upstream, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", upstream, err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		_ = up.Close()
		return nil, err
	}
	r := &Running{Addr: ln.Addr().String(), srv: (&Gate{Upstream: up, Nodes: nodes, Log: log}).Server(opts...), up: up, done: make(chan error, 1)}
	go func() { r.done <- r.srv.Serve(ln) }()
	return r, nil
}

// Stop ends the gate, letting the calls in flight finish, and returns why it stopped
// serving (nil after Stop).
func (r *Running) Stop() error {
	r.srv.GracefulStop()
	err := <-r.done
	_ = r.up.Close()
	return err
}

// Done is closed with the error that stopped the gate serving, if it stops on its own.
func (r *Running) Done() <-chan error { return r.done }

// Server is a gRPC server that serves every call through the gate (no service of its own).
func (g *Gate) Server(opts ...grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append(opts, grpc.UnknownServiceHandler(g.handle), grpc.ForceServerCodecV2(rawCodec{}))...)
}

// handle answers one call: the WorkflowService's methods are all unary, so one request,
// one answer.
func (g *Gate) handle(_ any, stream grpc.ServerStream) error {
	ctx := stream.Context()
	method, ok := grpc.MethodFromServerStream(stream)
	if !ok {
		return status.Error(codes.Internal, "no method")
	}
	node, err := g.node(ctx)
	if err != nil {
		return err
	}
	var req rawMessage
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	if err := g.allowed(node, method, req); err != nil {
		g.Log.Warn("refused", zap.String("node", node), zap.String("method", method), zap.Error(err))
		return status.Error(codes.PermissionDenied, err.Error())
	}
	in, _ := metadata.FromIncomingContext(ctx)
	out := in.Copy()
	delete(out, "authorization") // the node's key stays here
	var header metadata.MD
	var resp rawMessage
	err = g.Upstream.Invoke(metadata.NewOutgoingContext(ctx, out), method, req, &resp, grpc.ForceCodecV2(rawCodec{}), grpc.Header(&header))
	if len(header) > 0 {
		_ = stream.SendHeader(header)
	}
	if err != nil {
		return err
	}
	return stream.SendMsg(resp)
}

// node is the node whose key the call presents.
func (g *Gate) node(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		key, ok := strings.CutPrefix(v, "Bearer ")
		if !ok {
			continue
		}
		if node, ok := g.Nodes[KeyHash(key)]; ok {
			return node, nil
		}
	}
	return "", status.Error(codes.Unauthenticated, "no node's API key (authorization: Bearer KEY)")
}

// allowed decodes req as method's request and asks AgentCall.
func (g *Gate) allowed(node, method string, req rawMessage) error {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok || svc != workflowService {
		return fmt.Errorf("node %s's agent may not call %s: not the WorkflowService", node, method)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(workflowService)
	if err != nil {
		return fmt.Errorf("the WorkflowService's descriptor: %w", err)
	}
	md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return fmt.Errorf("node %s's agent may not call %s: no such method", node, name)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		return fmt.Errorf("%s's request type: %w", name, err)
	}
	msg := mt.New().Interface()
	if err := proto.Unmarshal(req, msg); err != nil {
		return fmt.Errorf("node %s: %s: undecodable request: %w", node, name, err)
	}
	return authz.AgentCall(node, method, msg)
}
