package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/http"
	"sort"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// The GCS's real gRPC surface, as much of it as tpdeploy's agent calls:
// ray.rpc.NodeInfoGcsService/GetClusterId and /GetAllNodeInfo, with the wire format of
// src/ray/protobuf/gcs_service.proto and gcs.proto (GcsNodeInfo field numbers) and the
// cluster-ID check of server_call.h (metadata `ray_cluster_id`, hex; a different ID is
// refused, none is accepted). Encoded here by hand, independently of the agent's decoder,
// so a mistake on one side is not mirrored on the other.

const nodeInfoService = "/ray.rpc.NodeInfoGcsService/"

// serveGCS serves the GCS port: gRPC (HTTP/2 with prior knowledge) to the gRPC server,
// everything else to the simulator's JSON API.
func (g *gcs) serve(l net.Listener) {
	gl := &chanListener{ch: make(chan net.Conn), addr: l.Addr()}
	hl := &chanListener{ch: make(chan net.Conn), addr: l.Addr()}
	gs := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(g.grpcHandler))
	go func() { _ = gs.Serve(gl) }()
	go func() { _ = http.Serve(hl, g.handler()) }()
	preface := []byte("PRI * HTTP/2.0")
	for {
		c, err := l.Accept()
		if err != nil {
			gl.Close()
			hl.Close()
			return
		}
		go func() {
			br := bufio.NewReader(c)
			head, err := br.Peek(len(preface))
			pc := &peekedConn{Conn: c, r: br}
			if err == nil && bytes.Equal(head, preface) {
				gl.ch <- pc
				return
			}
			hl.ch <- pc
		}()
	}
}

func (g *gcs) grpcHandler(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	var req []byte
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	md, _ := metadata.FromIncomingContext(stream.Context())
	// Token mode: every call needs `authorization: Bearer <token>` (rayauth.go).
	if auth := md.Get("authorization"); g.token != "" && (len(auth) != 1 || !g.authorized(auth[0])) {
		return status.Error(codes.Unauthenticated, rayUnauthenticated)
	}
	if md != nil {
		if got := md.Get("ray_cluster_id"); len(got) > 0 && got[0] != hex.EncodeToString(g.clusterID) {
			rayCppLog("W", "server_call.h:228", fmt.Sprintf("Wrong cluster ID token in request! Expected: %x, but got: %s", g.clusterID, got[0]))
			return status.Error(codes.Unauthenticated, "Wrong cluster ID token in request")
		}
	}
	var reply []byte
	switch method {
	case nodeInfoService + "GetClusterId":
		reply = protowire.AppendTag(reply, 1, protowire.BytesType)
		reply = protowire.AppendBytes(reply, gcsStatusOK())
		reply = protowire.AppendTag(reply, 2, protowire.BytesType)
		reply = protowire.AppendBytes(reply, g.clusterID)
	case nodeInfoService + "GetAllNodeInfo":
		nodes := g.nodeList()
		reply = protowire.AppendTag(reply, 1, protowire.BytesType)
		reply = protowire.AppendBytes(reply, gcsStatusOK())
		for _, n := range nodes {
			reply = protowire.AppendTag(reply, 2, protowire.BytesType)
			reply = protowire.AppendBytes(reply, encodeNodeInfo(n))
		}
		reply = protowire.AppendTag(reply, 3, protowire.VarintType)
		reply = protowire.AppendVarint(reply, uint64(len(nodes)))
	default:
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	return stream.SendMsg(&reply)
}

// gcsStatusOK is GcsStatus{code: 0}: an empty message.
func gcsStatusOK() []byte { return nil }

// encodeNodeInfo writes a GcsNodeInfo (gcs.proto): node_id 1, node_manager_address 2,
// raylet_socket_name 3, object_store_socket_name 4, node_manager_port 5, state 7
// (ALIVE=0, DEAD=1), node_manager_hostname 8, resources_total 11, node_name 12,
// start_time_ms 23, end_time_ms 24, is_head_node 25, death_info 29 (reason 1,
// reason_message 2).
func encodeNodeInfo(n gcsNode) []byte {
	var b []byte
	str := func(num protowire.Number, s string) {
		if s != "" {
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendString(b, s)
		}
	}
	varint := func(num protowire.Number, v uint64) {
		if v != 0 {
			b = protowire.AppendTag(b, num, protowire.VarintType)
			b = protowire.AppendVarint(b, v)
		}
	}
	id, _ := hex.DecodeString(n.ID)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, id)
	str(2, n.IP)
	str(3, n.RayletSocket)
	str(4, n.StoreSocket)
	varint(5, uint64(n.NodeManagerPort))
	if n.State == "DEAD" {
		varint(7, 1)
	}
	str(8, n.Hostname)
	keys := make([]string, 0, len(n.Resources))
	for k := range n.Resources {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, k)
		e = protowire.AppendTag(e, 2, protowire.Fixed64Type)
		e = protowire.AppendFixed64(e, math.Float64bits(n.Resources[k]))
		b = protowire.AppendTag(b, 11, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	str(12, n.Name)
	varint(23, uint64(n.StartMS))
	varint(24, uint64(n.EndMS))
	if n.Head {
		varint(25, 1)
	}
	if n.State == "DEAD" {
		var d []byte
		reason := map[string]uint64{"EXPECTED_TERMINATION": 1, "UNEXPECTED_TERMINATION": 2}[n.DeathReason]
		if reason != 0 {
			d = protowire.AppendTag(d, 1, protowire.VarintType)
			d = protowire.AppendVarint(d, reason)
		}
		if n.DeathMessage != "" {
			d = protowire.AppendTag(d, 2, protowire.BytesType)
			d = protowire.AppendString(d, n.DeathMessage)
		}
		b = protowire.AppendTag(b, 29, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
	}
	return b
}

// rawCodec passes protobuf bytes through: the simulator encodes messages itself.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// chanListener hands connections accepted elsewhere to a server.
type chanListener struct {
	ch   chan net.Conn
	addr net.Addr
	once sync.Once
	done chan struct{}
}

func (l *chanListener) Accept() (net.Conn, error) {
	l.once.Do(func() { l.done = make(chan struct{}) })
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { l.done = make(chan struct{}) })
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// peekedConn replays what was peeked before the server reads.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
