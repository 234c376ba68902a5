// Package raygcs reads Ray's node table from the GCS over its gRPC API and says what it
// means for a plan: every planned node registered under its planned address with the GPUs
// needed, a node under another address, a node Ray marked dead. It needs no Docker and no
// netlink: the agent dials through its node's network namespace, the operator's CLI
// directly.
package raygcs

import (
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
)

// Ray's node table is read from the GCS itself, over its gRPC API, not from the dashboard:
// the dashboard's HTTP server (and with it the state API and `ray list nodes`) runs only
// with ray[default], which vLLM's images do not install (upstream.md §7). The alternative,
// ray.nodes() through the image's Python, connects a Ray driver per call — a new job in
// the GCS every time the supervisor looks — and needs the head's container. The GCS call
// needs neither: NodeInfoGcsService.GetAllNodeInfo, as Ray's own clients make it (the
// cluster ID from GetClusterId in the `ray_cluster_id` metadata), decoded from the wire
// fields of GcsNodeInfo that Ray has kept stable since 2.x (gcs.proto: node_id 1,
// node_manager_address 2, state 7, resources_total 11, is_head_node 25, death_info 29).
// A cluster with Ray's token authentication on (RAY_AUTH_MODE=token; from Ray 2.59 on
// whenever `ray start --head` finds a token, Ray PR #64755) refuses a call without
// `authorization: Bearer <token>` metadata with gRPC status Unauthenticated (its C++
// servers check every call, src/ray/rpc/server_call.h); with a token every call sends it,
// as Ray's own clients do (token_auth_client_interceptor.cc), and a refusal is an
// *AuthError, not a raw gRPC error.

const nodeInfoService = "/ray.rpc.NodeInfoGcsService/"

// gcsNodeInfo is the part of GcsNodeInfo tpdeploy reads.
type gcsNodeInfo struct {
	NodeID       string
	Address      string
	Alive        bool
	Resources    map[string]float64
	Head         bool
	DeathMessage string
}

// AuthError is the GCS refusing a call for its token: Ray's token authentication is on
// and the call carried no token, or not the cluster's.
type AuthError struct {
	Addr string
	// TokenSent says whether the call carried a token (then it is not the cluster's).
	TokenSent bool
	// Status is the GCS's gRPC status message.
	Status string
}

func (e *AuthError) Error() string {
	what := "the call carried no token"
	if e.TokenSent {
		what = "the token sent is not the cluster's"
	}
	return fmt.Sprintf("ray GCS at %s refuses the call (Unauthenticated: %s): Ray's token authentication is on and %s; set secrets.ray_token to the cluster's token", e.Addr, e.Status, what)
}

// authError is err as an *AuthError when it is the GCS's refusal of the token. The
// GCS's other Unauthenticated answer, a wrong `ray_cluster_id` (server_call.h: "Wrong
// cluster ID token in request"), is not about the token.
func authError(addr, token string, err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unauthenticated || strings.Contains(st.Message(), "cluster ID") {
		return err
	}
	return &AuthError{Addr: addr, TokenSent: token != "", Status: st.Message()}
}

// Nodes reads Ray's node table from the GCS at addr (host:port), dialling through dial
// (an agent's: its node's network namespace), sending token (Ray's authentication token;
// "" for none) with every call.
func Nodes(ctx context.Context, addr, token string, dial func(ctx context.Context, addr string) (net.Conn, error)) ([]contract.RegisteredNode, error) {
	nodes, err := nodeInfos(ctx, addr, token, dial)
	if err != nil {
		return nil, err
	}
	return registered(nodes)
}

// nodeInfos is the GCS's GetAllNodeInfo answer.
func nodeInfos(ctx context.Context, addr, token string, dial func(ctx context.Context, addr string) (net.Conn, error)) ([]gcsNodeInfo, error) {
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dial))
	if err != nil {
		return nil, fmt.Errorf("ray GCS at %s: %w", addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if token != "" {
		// Ray's clients send `authorization: Bearer <token>` (AuthenticationToken::SetMetadata,
		// kAuthTokenKey, kBearerPrefix).
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	var idReply []byte
	if err := conn.Invoke(ctx, nodeInfoService+"GetClusterId", &[]byte{}, &idReply, grpc.ForceCodec(rawProto{})); err != nil {
		if ae := authError(addr, token, err); ae != err {
			return nil, ae
		}
		return nil, fmt.Errorf("ray GCS at %s: GetClusterId: %w", addr, err)
	}
	clusterID, err := bytesField(idReply, 2)
	if err != nil {
		return nil, fmt.Errorf("ray GCS at %s: GetClusterId: %w", addr, err)
	}
	if len(clusterID) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, "ray_cluster_id", hex.EncodeToString(clusterID))
	}
	var reply []byte
	if err := conn.Invoke(ctx, nodeInfoService+"GetAllNodeInfo", &[]byte{}, &reply, grpc.ForceCodec(rawProto{})); err != nil {
		if ae := authError(addr, token, err); ae != err {
			return nil, ae
		}
		return nil, fmt.Errorf("ray GCS at %s: GetAllNodeInfo: %w", addr, err)
	}
	return decodeNodeInfoReply(reply)
}

// decodeNodeInfoReply reads GetAllNodeInfoReply: status 1 (GcsStatus: code 1, message
// 2), node_info_list 2.
func decodeNodeInfoReply(b []byte) ([]gcsNodeInfo, error) {
	var nodes []gcsNodeInfo
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			var code uint64
			var msg string
			_ = eachField(v, func(n protowire.Number, t protowire.Type, fv []byte, x uint64) error {
				if n == 1 && t == protowire.VarintType {
					code = x
				}
				if n == 2 && t == protowire.BytesType {
					msg = string(fv)
				}
				return nil
			})
			if code != 0 {
				return fmt.Errorf("GCS status %d: %s", code, msg)
			}
		case num == 2 && typ == protowire.BytesType:
			n, err := decodeNodeInfo(v)
			if err != nil {
				return err
			}
			nodes = append(nodes, n)
		}
		return nil
	})
	return nodes, err
}

func decodeNodeInfo(b []byte) (gcsNodeInfo, error) {
	n := gcsNodeInfo{Alive: true, Resources: map[string]float64{}}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			n.NodeID = hex.EncodeToString(v)
		case num == 2 && typ == protowire.BytesType:
			n.Address = string(v)
		case num == 7 && typ == protowire.VarintType:
			n.Alive = x == 0 // GcsNodeState: ALIVE = 0, DEAD = 1
		case num == 11 && typ == protowire.BytesType: // map<string, double> entry
			var key string
			var val float64
			err := eachField(v, func(en protowire.Number, et protowire.Type, ev []byte, ex uint64) error {
				if en == 1 && et == protowire.BytesType {
					key = string(ev)
				}
				if en == 2 && et == protowire.Fixed64Type {
					val = math.Float64frombits(ex)
				}
				return nil
			})
			if err != nil {
				return err
			}
			n.Resources[key] = val
		case num == 25 && typ == protowire.VarintType:
			n.Head = x != 0
		case num == 29 && typ == protowire.BytesType: // NodeDeathInfo: reason_message 2
			_ = eachField(v, func(dn protowire.Number, dt protowire.Type, dv []byte, _ uint64) error {
				if dn == 2 && dt == protowire.BytesType {
					n.DeathMessage = string(dv)
				}
				return nil
			})
		}
		return nil
	})
	return n, err
}

// eachField walks a protobuf message's fields: v is the payload of length-delimited
// fields, x the value of varint and fixed ones.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("bad protobuf tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var y uint32
			y, n = protowire.ConsumeFixed32(b)
			x = uint64(y)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("bad protobuf field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// bytesField is the value of a message's length-delimited field num.
func bytesField(b []byte, num protowire.Number) ([]byte, error) {
	var out []byte
	err := eachField(b, func(n protowire.Number, t protowire.Type, v []byte, _ uint64) error {
		if n == num && t == protowire.BytesType {
			out = v
		}
		return nil
	})
	return out, err
}

// rawProto passes protobuf bytes through gRPC: tpdeploy encodes and decodes the few
// fields it needs itself rather than vendoring Ray's protos.
type rawProto struct{}

func (rawProto) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return nil, fmt.Errorf("rawProto: cannot marshal %T", v)
}

func (rawProto) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawProto: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawProto) Name() string { return "proto" }

// registered turns the GCS's nodes into what placement compares with the plan.
func registered(nodes []gcsNodeInfo) ([]contract.RegisteredNode, error) {
	out := make([]contract.RegisteredNode, 0, len(nodes))
	for _, n := range nodes {
		ip, err := netip.ParseAddr(n.Address)
		if err != nil {
			return nil, fmt.Errorf("ray GCS: node %s: address %q: %w", n.NodeID, n.Address, err)
		}
		out = append(out, contract.RegisteredNode{NodeID: n.NodeID, IP: ip, Alive: n.Alive, GPUs: n.Resources["GPU"], Head: n.Head, DeathMessage: n.DeathMessage})
	}
	return out, nil
}

// NodesAt reads Ray's node table from the GCS at gcsAddr (host:port), dialling from this
// process.
func NodesAt(ctx context.Context, gcsAddr string) ([]contract.RegisteredNode, error) {
	return Nodes(ctx, gcsAddr, "", func(ctx context.Context, addr string) (net.Conn, error) {
		return (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, "tcp", addr)
	})
}

// Health says whether every planned node is alive in Ray under its planned address with
// the GPUs needed: nil, or what is wrong (a dead node, one under another address, one
// missing).
func Health(plan netplan.Plan, needGPUs int, nodes []contract.RegisteredNode) error {
	if err := DeadPlanned(plan, nodes); err != nil {
		return err
	}
	_, _, err := Verdict(contract.PlacementRequest{Plan: plan, NeedGPUs: needGPUs}, nodes)
	return err
}
