// Package logscan reads Ray's and vLLM's output: it splits off Ray's process prefixes,
// removes colour codes, follows weight loading, and classifies fatal lines into typed
// failures with a one-line diagnosis and the fix. It does no I/O.
package logscan

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Failure types; the deploy workflow branches on them (they are the activities' error types).
const (
	PlacementPending = "PlacementGroupPending"
	C10dUnreachable  = "C10dUnreachable"
	NCCLNoInterface  = "NCCLNoInterface"
	NCCLError        = "NCCLError"
	GlooLoopback     = "GlooLoopback"
	CUDAOutOfMemory  = "CUDAOutOfMemory"
	EngineDead       = "EngineDead"
	DuplicateAddress = "DuplicateAddress"
	GCSUnreachable   = "GCSUnreachable"
	NoGPU            = "InsufficientGPUs"
)

// Line is one output line: the Ray process prefix it carried, if any, and its text.
type Line struct {
	// Source is Ray's prefix without parentheses, e.g. "RayWorkerWrapper pid=3173774,
	// ip=10.254.20.30"; nested prefixes are joined with " / ".
	Source string
	Text   string
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// StripANSI removes terminal colour and cursor codes, and any stray escape byte left, so
// that stripping twice changes nothing.
func StripANSI(s string) string {
	return strings.ReplaceAll(ansi.ReplaceAllString(s, ""), "\x1b", "")
}

// Parse removes colours and carriage returns (tqdm redraws) and splits off Ray's
// `(Name pid=N, ip=X)` prefixes.
func Parse(raw string) Line {
	s := strings.TrimRight(StripANSI(raw), "\r\n")
	if i := strings.LastIndexByte(s, '\r'); i >= 0 {
		s = s[i+1:]
	}
	var sources []string
	for strings.HasPrefix(s, "(") {
		end := strings.IndexByte(s, ')')
		inner := ""
		if end > 0 {
			inner = s[1:end]
		}
		if end < 0 || !strings.Contains(inner, "pid=") {
			break
		}
		sources = append(sources, inner)
		s = strings.TrimLeft(s[end+1:], " ")
	}
	return Line{Source: strings.Join(sources, " / "), Text: s}
}

// Finding is a classified line.
type Finding struct {
	Type      string
	Diagnosis string
	Fix       string
	// Fatal findings end the deploy; the others are recorded as warnings.
	Fatal bool
	Line  string
}

// Message is the one-line account an operator reads.
func (f *Finding) Message() string {
	return f.Diagnosis + ". Fix: " + f.Fix
}

var (
	pgWait     = regexp.MustCompile(`Waiting for creating a placement group of specs for (\d+) seconds\. specs=(.*?)\. Check`)
	pgFail     = regexp.MustCompile(`Cannot provide a placement group requiring (\d+) GPUs \(placement_group_specs=(.*)\) within`)
	pinnedNode = regexp.MustCompile(`'node:([0-9a-fA-F.:]+)'`)
	c10dClient = regexp.MustCompile(`failed to connect to ([^\s]+?):(\d+) \(errno: (\d+) - ([^)]*)\)`)
	c10dServer = regexp.MustCompile(`Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients joined`)
	glooMesh   = regexp.MustCompile(`Gloo connectFullMesh failed with .*remote=\[([^\]]+)\]`)
)

// Classify returns what a line means for the deploy, or nil for an ordinary line.
func Classify(l Line) *Finding {
	t := l.Text
	where := ""
	if l.Source != "" {
		where = " (on " + l.Source + ")"
	}
	f := func(typ, diag, fix string, fatal bool) *Finding {
		return &Finding{Type: typ, Diagnosis: diag + where, Fix: fix, Fatal: fatal, Line: t}
	}
	switch {
	case strings.Contains(t, "Waiting for creating a placement group"), strings.Contains(t, "Cannot provide a placement group requiring"):
		specs := ""
		if m := pgWait.FindStringSubmatch(t); m != nil {
			specs = m[2]
		} else if m := pgFail.FindStringSubmatch(t); m != nil {
			specs = m[2]
		}
		diag := "vLLM's placement group cannot be placed"
		if m := pinnedNode.FindStringSubmatch(specs); m != nil {
			diag = "vLLM pinned its placement group to node:" + m[1] + " but no Ray node offers that resource (Ray registered the node under another address; vLLM would wait about 42 minutes)"
		}
		return f(PlacementPending, diag, "start every Ray node with --node-ip-address on the planned subnet and set VLLM_HOST_IP to the same address on each node", true)
	case strings.Contains(t, "Every node should have a unique IP address"):
		return f(DuplicateAddress, "two Ray nodes registered under the same IP address", "give every node its own --node-ip-address and VLLM_HOST_IP", true)
	case c10dClient.MatchString(t) && (strings.Contains(t, "c10d") || strings.Contains(t, "DistNetworkError") || strings.Contains(t, "client socket")):
		m := c10dClient.FindStringSubmatch(t)
		errno, _ := strconv.Atoi(m[3])
		if errno == 111 { // refused: the store is not listening yet, torch retries
			return nil
		}
		return f(C10dUnreachable, "a worker cannot reach the torch c10d rendezvous at "+m[1]+":"+m[2]+" (errno "+m[3]+" - "+m[4]+")",
			"set VLLM_HOST_IP on the head to an address every node can route to (the shared subnet)", true)
	case c10dServer.MatchString(t):
		m := c10dServer.FindStringSubmatch(t)
		return f(C10dUnreachable, "the c10d rendezvous timed out after "+m[1]+" s with "+m[2]+"/"+m[3]+" ranks joined: the other ranks cannot reach the head's rendezvous address",
			"set VLLM_HOST_IP on the head to an address every node can route to (the shared subnet)", true)
	case strings.Contains(t, "Bootstrap : no socket interface found"), strings.Contains(t, "NET/Socket : no interface found"):
		return f(NCCLNoInterface, "NCCL found no interface matching NCCL_SOCKET_IFNAME", "set NCCL_SOCKET_IFNAME to =<interface> naming an existing interface on that node (names differ per node)", true)
	case strings.Contains(t, "ncclNetSocketListen"), strings.Contains(t, "NCCL error"), strings.Contains(t, "NCCL WARN Net : Connect to"):
		return f(NCCLError, "NCCL failed: "+clip(t, 160), "set NCCL_SOCKET_IFNAME=<=interface> on every node to the shared subnet's interface; with it unset a multi-NIC head uses several interfaces and the ranks disagree", true)
	case strings.Contains(t, "Using the loopback address as fallback"):
		return f(GlooLoopback, "Gloo fell back to the loopback address", "set GLOO_SOCKET_IFNAME to the shared subnet's interface on every node", false)
	case glooMesh.MatchString(t):
		m := glooMesh.FindStringSubmatch(t)
		diag := "Gloo could not connect its mesh (remote " + m[1] + ")"
		if strings.HasPrefix(m[1], "127.") {
			diag = "Gloo bound the loopback address on a rank, so its peers cannot reach it (remote " + m[1] + ")"
		}
		return f(GlooLoopback, diag, "set GLOO_SOCKET_IFNAME to the shared subnet's interface on every node", true)
	case strings.Contains(t, "CUDA out of memory"), strings.Contains(t, "OutOfMemoryError"):
		return f(CUDAOutOfMemory, "a GPU ran out of memory", "lower --gpu-memory-utilization or --max-model-len, or use more GPUs (tensor/pipeline size)", true)
	case strings.Contains(t, "Current node has no GPU available"):
		return f(NoGPU, "vLLM's driver node offers no GPU to Ray", "run vLLM on a node whose Ray registration has GPUs (check --num-gpus and the GPU device request)", true)
	case strings.Contains(t, "Unable to connect to GCS at"):
		return f(GCSUnreachable, "Ray cannot reach the GCS: "+clip(t, 120), "RAY_ADDRESS must name the head's planned address and port, reachable from every node", true)
	case strings.Contains(t, "EngineDeadError"), strings.Contains(t, "Engine core initialization failed"), strings.Contains(t, "EngineCore encountered a fatal error"), strings.Contains(t, "EngineCore failed to start"):
		return f(EngineDead, "vLLM's engine died: "+clip(t, 160), "see the lines above it; a lost rank (node down, network cut) is the usual cause", true)
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Progress is weight loading as tqdm reports it on rank 0.
type Progress struct {
	Loaded, Total, Percent int
	Elapsed, Remaining     time.Duration
}

var shards = regexp.MustCompile(`Loading safetensors checkpoint shards:\s*(\d+)% Completed \| (\d+)/(\d+) \[([0-9:]+)<([0-9:?]+)`)

// ParseProgress reads a shard-loading line.
func ParseProgress(text string) (Progress, bool) {
	m := shards.FindStringSubmatch(text)
	if m == nil {
		return Progress{}, false
	}
	var p Progress
	p.Percent, _ = strconv.Atoi(m[1])
	p.Loaded, _ = strconv.Atoi(m[2])
	p.Total, _ = strconv.Atoi(m[3])
	p.Elapsed = clockDuration(m[4])
	p.Remaining = clockDuration(m[5])
	return p, true
}

// clockDuration reads tqdm's [HH:]MM:SS; "?" is zero.
func clockDuration(s string) time.Duration {
	var d time.Duration
	for _, part := range strings.Split(s, ":") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return 0
		}
		d = d*60 + time.Duration(n)*time.Second
	}
	return d
}

// Phase names what a line says vLLM is doing, or "".
func Phase(text string) string {
	switch {
	case strings.Contains(text, "Application startup complete"), strings.Contains(text, "Starting vLLM server on"), strings.Contains(text, "Starting vLLM API server"):
		return "ready"
	case strings.Contains(text, "Model loading took"), strings.Contains(text, "Loading weights took"):
		return "warming"
	case strings.Contains(text, "Loading safetensors checkpoint shards"), strings.Contains(text, "Starting to load model"):
		return "loading"
	case strings.Contains(text, "distributed_init_method="), strings.Contains(text, "NCCL INFO Bootstrap"):
		return "rendezvous"
	case strings.Contains(text, "Connected to Ray cluster"), strings.Contains(text, "placement group"):
		return "placement"
	}
	return ""
}
