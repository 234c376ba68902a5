// Package dataplane reads what NCCL chose for the data path and decides whether a cluster
// may be called serving. The proof (proof.py, embedded as Program) runs one all_reduce and
// a few timed ones across every node, in each node's own container, with NCCL's INFO lines
// on; Parse reads one rank's output (NCCL's lines and the program's TPDEPLOY_PROOF lines)
// and Decide judges every rank's against the plan. Both are pure: no I/O, table-tested with
// NCCL 2.28.9's measured lines (docs/upstream.md §9) and lines from threads.
package dataplane

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Program is the proof's Python source; the agent copies it into the container and runs
// it with the image's python3.
//
//go:embed proof.py
var Program string

// ProgramPath is where the agent puts Program in a container.
const ProgramPath = "/tmp/tpdeploy/dataplane/proof.py"

// Env is what the proof adds to the environment vLLM gets: NCCL's INFO lines for the
// subsystems that say which transport and devices it chose.
var Env = map[string]string{"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV,BOOTSTRAP"}

// Transports as NCCL names them in `Using network X`.
const (
	IB     = "IB"
	Socket = "Socket"
)

// Rank is what one rank's output says.
type Rank struct {
	Rank  int `json:"rank"`
	World int `json:"world"`
	// Transport is NCCL's `Using network X` (IB, Socket, or a plugin's name); empty when
	// NCCL never said (a single rank, or a failure before).
	Transport string `json:"transport,omitempty"`
	// HCAs are the devices of `NET/IB : Using [0]mlx5_0:1/RoCE ...` ("mlx5_0:1"); none
	// when the line lists none (the `[RO]` after `No device found.` is a flag).
	HCAs []string `json:"hcas,omitempty"`
	// LinkLayer is the devices' link layer (RoCE or IB).
	LinkLayer string `json:"link_layer,omitempty"`
	// Bootstrap is NCCL's bootstrap interface (`Bootstrap: Using eth0:192.0.2.2<0>`).
	Bootstrap string `json:"bootstrap,omitempty"`
	// IBNoDevice: `NET/IB : No device found.` (libibverbs listed no device).
	IBNoDevice bool `json:"ib_no_device,omitempty"`
	// IBFailed: `Failed to initialize NET plugin IB`.
	IBFailed bool `json:"ib_failed,omitempty"`
	// NoNetPlugin: `Failed to initialize any NET plugin` (the transport was forced).
	NoNetPlugin bool `json:"no_net_plugin,omitempty"`
	// RegMR is NCCL's `Call to ibv_reg_mr… failed` warning (memory could not be pinned).
	RegMR string `json:"reg_mr,omitempty"`
	// Warnings are NCCL's WARN lines.
	Warnings []string `json:"warnings,omitempty"`
	// ChannelsIB and ChannelsSocket count `via NET/IB/…` and `via NET/Socket/…` lines.
	ChannelsIB     int `json:"channels_ib,omitempty"`
	ChannelsSocket int `json:"channels_socket,omitempty"`
	// Peers are the ranks this rank's channels connect to over the network, with the
	// transport of each (`Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0`), in order of
	// first appearance.
	Peers []Peer `json:"peers,omitempty"`

	// From the program's own lines.
	Memlock  string   `json:"memlock,omitempty"` // "unlimited" or bytes
	IPCLock  bool     `json:"ipc_lock,omitempty"`
	UVerbs   []string `json:"uverbs,omitempty"` // /dev/infiniband/uverbs* the container sees
	Torch    string   `json:"torch,omitempty"`
	NCCL     string   `json:"nccl,omitempty"`
	Finished bool     `json:"finished"` // a result line was printed
	SumOK    bool     `json:"sum_ok"`
	Got      float64  `json:"got,omitempty"`
	Expected float64  `json:"expected,omitempty"`
	Sizes    []Size   `json:"sizes,omitempty"`
	// BusBW is the best bus bandwidth over the sizes, GB/s.
	BusBW float64 `json:"busbw_gbs,omitempty"`
	// Error is the program's error line ("phase: text"), or empty.
	Error string `json:"error,omitempty"`
	// Phase is where it failed: import, init, all_reduce, bandwidth, timeout.
	Phase string `json:"phase,omitempty"`
}

// Peer is one network connection of a rank's channels.
type Peer struct {
	Rank      int    `json:"rank"`
	Transport string `json:"transport"`
}

// Size is one timed size.
type Size struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	AlgBW   float64 `json:"algbw_gbs"`
	BusBW   float64 `json:"busbw_gbs"`
}

// BusBW is nccl-tests' all_reduce bus bandwidth: algbw × 2(n−1)/n.
func BusBW(algbw float64, n int) float64 {
	if n <= 1 {
		return 0
	}
	return algbw * 2 * float64(n-1) / float64(n)
}

// ProofPrefix starts the program's own lines.
const ProofPrefix = "TPDEPLOY_PROOF "

var (
	// ` [0]mlx5_0:1/RoCE`, and the merged form `[0] mlx5_0:1/RoCE, [1] …` inside `={…}`.
	ibDev = regexp.MustCompile(`\[\d+\]\s?([A-Za-z0-9_.\-]+):(\d+)/(RoCE|IB)`)
	// `Using network IB`, `Using network Socket`, `Using network AWS Libfabric`.
	usingNetwork = regexp.MustCompile(`\bUsing network (\S+)`)
	bootstrap    = regexp.MustCompile(`Bootstrap ?: Using (\S+)`)
	// `Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0` (src/transport.cc, ncclTransportP2pSetup).
	channel = regexp.MustCompile(`Channel \d+/\d+ : (\d+)\[[0-9a-fA-F]+\] -> (\d+)\[[0-9a-fA-F]+\] \[(send|receive)\] via NET/([^/\s]+)/`)
)

// Parse reads one rank's output. Lines it does not know are ignored: NCCL's and torch's
// other output, Ray's prefixes.
func Parse(out string) Rank {
	var r Rank
	r.Rank = -1
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimRight(line, "\r")
		if i := strings.Index(line, ProofPrefix); i >= 0 {
			r.proofLine(line[i+len(ProofPrefix):])
			continue
		}
		if i := strings.Index(line, "NCCL WARN "); i >= 0 {
			w := strings.TrimSpace(line[i+len("NCCL WARN "):])
			r.Warnings = append(r.Warnings, w)
			if strings.Contains(w, "Call to ibv_reg_mr") {
				r.RegMR = w
			}
			if strings.Contains(w, "Failed to initialize any NET plugin") {
				r.NoNetPlugin = true
			}
			continue
		}
		i := strings.Index(line, "NCCL INFO ")
		if i < 0 {
			continue
		}
		msg := strings.TrimSpace(line[i+len("NCCL INFO "):])
		switch {
		case strings.HasPrefix(msg, "NET/IB : No device found"):
			r.IBNoDevice = true
		case strings.HasPrefix(msg, "NET/IB : Using"):
			// `NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:…`; after
			// `No device found.` it is `NET/IB : Using [RO]; OOB …`: no device.
			head, _, _ := strings.Cut(msg, "; OOB")
			for _, m := range ibDev.FindAllStringSubmatch(head, -1) {
				r.HCAs = appendNew(r.HCAs, m[1]+":"+m[2])
				r.LinkLayer = m[3]
			}
		case strings.HasPrefix(msg, "Failed to initialize NET plugin IB"):
			r.IBFailed = true
		case strings.Contains(msg, "Failed to initialize any NET plugin"):
			r.NoNetPlugin = true
		case usingNetwork.MatchString(msg) && strings.HasPrefix(msg, "Using network"):
			r.Transport = usingNetwork.FindStringSubmatch(msg)[1]
		case bootstrap.MatchString(msg) && r.Bootstrap == "":
			r.Bootstrap = bootstrap.FindStringSubmatch(msg)[1]
		}
		if m := channel.FindStringSubmatch(msg); m != nil {
			from, _ := strconv.Atoi(m[1])
			to, _ := strconv.Atoi(m[2])
			peer := to
			if m[3] == "receive" {
				peer = from
			}
			r.addPeer(Peer{Rank: peer, Transport: m[4]})
		}
		if strings.Contains(msg, " via NET/IB/") {
			r.ChannelsIB++
		} else if strings.Contains(msg, " via NET/Socket/") {
			r.ChannelsSocket++
		}
	}
	return r
}

// addPeer records a connection; a peer reached over sockets on any channel is on sockets.
func (r *Rank) addPeer(p Peer) {
	for i, q := range r.Peers {
		if q.Rank == p.Rank {
			if p.Transport != IB {
				r.Peers[i].Transport = p.Transport
			}
			return
		}
	}
	r.Peers = append(r.Peers, p)
}

func (r *Rank) proofLine(s string) {
	var ev struct {
		Event    string          `json:"event"`
		Rank     *int            `json:"rank"`
		World    int             `json:"world"`
		Memlock  json.RawMessage `json:"memlock"`
		IPCLock  bool            `json:"ipc_lock"`
		UVerbs   []string        `json:"uverbs"`
		Torch    string          `json:"torch"`
		NCCL     string          `json:"nccl"`
		Bytes    int64           `json:"bytes"`
		Seconds  float64         `json:"seconds"`
		AlgBW    float64         `json:"algbw_gbs"`
		BusBW    float64         `json:"busbw_gbs"`
		SumOK    bool            `json:"sum_ok"`
		Got      float64         `json:"got"`
		Expected float64         `json:"expected"`
		Phase    string          `json:"phase"`
		Error    string          `json:"error"`
	}
	if json.Unmarshal([]byte(strings.TrimSpace(s)), &ev) != nil {
		return
	}
	if ev.Rank != nil {
		r.Rank = *ev.Rank
	}
	switch ev.Event {
	case "env":
		r.World, r.IPCLock, r.UVerbs, r.Torch, r.NCCL = ev.World, ev.IPCLock, ev.UVerbs, ev.Torch, ev.NCCL
		var str string
		var n float64
		switch {
		case json.Unmarshal(ev.Memlock, &str) == nil:
			r.Memlock = str
		case json.Unmarshal(ev.Memlock, &n) == nil:
			r.Memlock = strconv.FormatFloat(n, 'f', 0, 64)
		}
	case "size":
		r.Sizes = append(r.Sizes, Size{Bytes: ev.Bytes, Seconds: ev.Seconds, AlgBW: ev.AlgBW, BusBW: ev.BusBW})
		r.BusBW = max(r.BusBW, ev.BusBW)
	case "result":
		r.Finished, r.SumOK, r.Got, r.Expected = true, ev.SumOK, ev.Got, ev.Expected
		r.BusBW = max(r.BusBW, ev.BusBW)
	case "error":
		r.Phase, r.Error = ev.Phase, ev.Error
	}
}

// MemlockUnlimited says RLIMIT_MEMLOCK does not stop ibv_reg_mr: unlimited, or CAP_IPC_LOCK
// (the kernel's ib_umem_get pins past the limit for a process that has it).
func (r Rank) MemlockUnlimited() bool { return r.Memlock == "unlimited" || r.IPCLock }

func appendNew(list []string, v string) []string {
	for _, x := range list {
		if x == v {
			return list
		}
	}
	return append(list, v)
}

// ServingTransport reads one line of vLLM's own output: the transport its NCCL chose
// (`Using network Socket`), or "" for any other line. vLLM prints NCCL's INFO lines only
// when the operator set NCCL_DEBUG=INFO; then the watch holds them against the proof.
func ServingTransport(line string) string {
	if !strings.Contains(line, "NCCL INFO") {
		return ""
	}
	if m := usingNetwork.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	return ""
}

// Contradicts says what a transport vLLM's NCCL reported means against the proof's
// verdict: "" when it agrees (or there was no proof), else the warning.
func (v Verdict) Contradicts(node, transport string) string {
	// A mixed verdict was already reported (data_plane: warn) and names each node's.
	if transport == "" || v.Transport == "" || v.Transport == transport || strings.HasPrefix(v.Transport, "mixed") {
		return ""
	}
	return fmt.Sprintf("vLLM's NCCL on %s uses network %s, but the data-plane proof found %s: vLLM's own environment or NCCL settings differ from the proof's", node, transport, v.Transport)
}
