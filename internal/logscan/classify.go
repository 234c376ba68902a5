package logscan

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// ctx is the line under classification.
type ctx struct {
	l    Line
	t    string // Text
	node string // the Ray node the line came from, "" for the local process
}

// where names the process and node a line came from, for the diagnosis.
func (c ctx) where() string {
	s := ""
	switch {
	case c.node != "":
		s = " on node " + c.node + " (" + c.l.Source + ")"
	case c.l.Source != "":
		s = " (in " + c.l.Source + ")"
	}
	if c.l.Repeated > 1 {
		s += " [repeated " + strconv.Itoa(c.l.Repeated) + "x across the cluster]"
	}
	return s
}

// onNode names the node in a diagnosis: "that node" when where names it, else the node
// whose output is read (the one running vllm serve).
func (c ctx) onNode() string {
	if c.node != "" {
		return "that node"
	}
	return "the node running vllm serve"
}

func (c ctx) find(typ, diag, fix string, fatal bool) *Finding {
	diag = strings.TrimRight(diag, ". ")
	return &Finding{Type: typ, Diagnosis: diag + c.where(), Fix: fix, Fatal: fatal, Line: c.t, Node: c.node}
}

var (
	// Log-line headers in front of a message: vLLM's logger (both formats), torch's
	// "[rank0]:", docker compose's "svc-1  | ", FastChat's "… | ERROR | stderr | ", a CI
	// timestamp.
	vllmHeader    = regexp.MustCompile(`^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[[^\]]*\]|[\w.\-]+:\d+\]) ?`)
	rankPrefix    = regexp.MustCompile(`^\[rank\d+\]: ?`)
	composePrefix = regexp.MustCompile(`^[\w.\-]+-\d+\s+\| `)
	stdPrefix     = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \| [A-Z]+ +\| std(?:err|out) \| `)
	ciStamp       = regexp.MustCompile(`^\[\d{4}-\d\d-\d\dT[\d:.]+Z\] `)
	frameLine     = regexp.MustCompile(`^\s*File "[^"]*", line \d+`)
	fString       = regexp.MustCompile(`(?:^|[\s(,=])[fF][rR]?["'][^"']*\{`)
	assignCall    = regexp.MustCompile(`^[A-Za-z_][\w.\[\]]*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*[+\-*/]?=\s*(?:await\s+)?[A-Za-z_][\w.]*\(`)
	codeKeyword   = regexp.MustCompile(`^(?:raise|return|assert|await|yield|def|class|elif|except|lambda|import|from \S+ import|with \S.*:$|for \S.* in \S.*:$|if \S.*:$|else:$|try:$|finally:$)(?:\s|$|\()`)
	loggerCall    = regexp.MustCompile(`^(?:self\.)?_?(?:logger|log|logging|warnings)\.\w+\(`)
	markerLine    = regexp.MustCompile(`^[\^~\s]+$`)
)

// payload is a line's message without the log headers in front of it; indentation kept.
func payload(t string) string {
	for i := 0; i < 6; i++ {
		n := t
		for _, re := range [...]*regexp.Regexp{ciStamp, stdPrefix, composePrefix, rankPrefix, vllmHeader} {
			if loc := re.FindStringIndex(n); loc != nil {
				n = n[loc[1]:]
			}
		}
		if strings.HasPrefix(n, "(") {
			if end := closing(n); end > 0 && strings.Contains(n[:end], "pid=") {
				n = strings.TrimPrefix(n[end+1:], " ")
			}
		}
		if n == t {
			break
		}
		t = n
	}
	return t
}

// ipythonHeader is the first line of a traceback as IPython and Jupyter print it: the
// exception's class name, padding, then "Traceback (most recent call last)"
// (IPython/core/ultratb.py, the verbose header). The exception's own line, which says what
// failed, comes after the frames and is read there; the header repeats only its class.
var ipythonHeader = regexp.MustCompile(`^\s*[\w.]+\s{2,}Traceback \(most recent call last\)\s*$`)

// caughtUpstream says a line is an error a program logs and carries on from, so the error
// it quotes stopped nothing: gpustack's vLLM backend logs "Failed to derive max model length:
// {e}" from an except clause and goes on with no max length (later with a default,
// "…, continuing with default"; gpustack/worker/backends/vllm.py _derive_max_model_len), and
// vLLM's in_the_same_node_as logs "Error ignored in is_in_the_same_node: %s" from its except
// clause (vllm/distributed/parallel_state.py) and goes on.
func caughtUpstream(p string) bool {
	return strings.Contains(p, "Failed to derive max model length: ") || strings.Contains(p, "Error ignored in is_in_the_same_node: ")
}

// isFrame says a line is a traceback's `File "...", line N, in f`.
func isFrame(p string) bool { return frameLine.MatchString(p) }

// looksLikeCode says a line is Python source (a traceback's source line, or code pasted
// on its own), not output: `raise RuntimeError(f"NCCL error: {error_str}")`.
func looksLikeCode(p string) bool {
	t := strings.TrimSpace(p)
	if t == "" {
		return false
	}
	if codeKeyword.MatchString(t) || fString.MatchString(t) || assignCall.MatchString(t) || loggerCall.MatchString(t) {
		return true
	}
	if markerLine.MatchString(t) && strings.ContainsAny(t, "^~") {
		return true
	}
	// A continuation of a string literal spread over lines: `"… when "` or `" network"`.
	if (t[0] == '"' || t[0] == '\'') && len(t) > 1 {
		last := strings.TrimRight(t, ",)")
		if last != "" && (last[len(last)-1] == '"' || last[len(last)-1] == '\'') {
			return true
		}
	}
	// A call left open across lines: `raise ValueError(`, `engine = cls(`.
	return strings.HasSuffix(t, "(") && !strings.Contains(t, ": ")
}

var (
	pgWait     = regexp.MustCompile(`Waiting for creating a placement group of specs for (\d+) seconds\. specs=(.*?)\. Check`)
	pgFail     = regexp.MustCompile(`Cannot provide a placement group (?:requiring ([\d.]+) GPUs \(placement_group_specs=(.*)\)|of placement_group_specs=(.*?))(?: within (\d+) seconds|$)`)
	pinnedNode = regexp.MustCompile(`'node:([0-9a-fA-F.:]+)'`)

	// dupIPs reads vLLM's counts; the address set is optional because users shorten the
	// line ("Got 8 nodes with [...] and 7 unique IP addresses.").
	dupIPs = regexp.MustCompile(`Got (\d+) nodes.*?and (\d+) unique IP addresses(?:\s*(\{[^}]*\}|\[[^\]]*\]))?`)

	driverIP  = regexp.MustCompile(`This node has an IP address of ([^\s,]+)`)
	raylets   = regexp.MustCompile(`found raylets at (.*?) but none`)
	gcsAt     = regexp.MustCompile(`GCS (?:\(ray head\) )?(?:at|server)(?: address)? (\S*?):(\d+)`)
	gcsLastAt = regexp.MustCompile(`last attempted GCS server address was (\S*)`)

	c10dErrno = regexp.MustCompile(`failed to connect to (\S+) \(errno: (\d+) - ([^)]*)\)`)
	c10dAny   = regexp.MustCompile(`failed to connect to any network address of \(([^,]+), (\d+)\)`)
	// c10dTimeout is pytorch/pytorch torch/csrc/distributed/c10d/socket.cpp (torch 2.4, as
	// pasted in pytorch#105782), SocketConnectOp::throwTimeoutError: fmt::format("The client
	// socket has timed out after {} while trying to connect to ({}, {}).",
	// opts_->connect_timeout(), host_, port_). The port is any placeholder's text, not only
	// digits: users redact it ("(PRIVATE_IP, PORT)", heldout4).
	c10dTimeout = regexp.MustCompile(`client socket has timed out after (\S+) while trying to connect to \(([^,()]+), ([^,()\s]+)\)`)
	c10dRetry   = regexp.MustCompile(`TCP client failed to connect/validate to host (\S+?):(\d+) - retrying`)
	// c10dServer is pytorch/pytorch torch/csrc/distributed/c10d/TCPStore.cpp, waitForWorkers:
	// fmt::format("Timed out after {} seconds waiting for clients. {}/{} clients joined.", …);
	// pytorch PR 111805, which added it, shows it as "… waiting for workers. 1/2 workers joined."
	// (its first wording), so both nouns are read.
	c10dServer = regexp.MustCompile(`Timed out after (\d+) seconds waiting for (?:clients|workers)\. (\d+)/(\d+) (?:clients|workers) joined`)

	ncclFamily  = regexp.MustCompile(`with family (\d+) is neither AF_INET\(2\) nor AF_INET6\(10\)`)
	ncclDupGPU  = regexp.MustCompile(`Duplicate GPU detected : rank (\d+) and rank (\d+) both on CUDA device (\w+)`)
	ncclConnect = regexp.MustCompile(`(?:Connect to|connect to|remote peer) (\S+?)(?:<\d+>)?(?:[\s,]|$)`)
	ncclWarnOp  = regexp.MustCompile(`NCCL WARN (?:socketStartConnect|socketPollConnect|socketProgress|socketFinalizeAccept|socketConnect|socketAccept|Net : Connect to|Connect to|Call to connect|Socket recv failed|\[Proxy Service \d+\] Failed to execute operation Connect|\[Service thread\] Error encountered progressing operation=Connect)`)
	ncclPeerAt  = regexp.MustCompile(`(?:from|to|peer) (\S+?<\d+>)`)
	ncclRetry   = regexp.MustCompile(`NCCL INFO socketPollConnect: connect returned (.*?), retrying`)
	// ncclSockWarn: a socket-level NCCL warning (any release's wording, with or without the
	// NCCL tag of 2.x before WARN): the connection between two ranks failed.
	ncclSockWarn = regexp.MustCompile(`(?:NCCL WARN|socket\.(?:h|cc):\d+ WARN) .*?(?:Connection closed by remote peer|Connection refused|Connection reset|Connection timed out|Broken pipe|No route to host|Network is unreachable|Call to (?:connect|recv|send)\b|Socket creation failed)`)
	ncclFailure  = regexp.MustCompile(`NCCL (?:failure|Check failed)\b.*'?(?:unhandled system error|internal error|remote process exited|unhandled cuda error)`)

	glooNoAddr = regexp.MustCompile(`Unable to find address for: (\S+)`)
	glooNoIf   = regexp.MustCompile(`Unable to find interface for: \[?([^\]\s]+)`)
	glooRemote = regexp.MustCompile(`remote=\[([^\]]+)\]`)

	oomGPU  = regexp.MustCompile(`GPU (\d+) has a total capac(?:ity|ty) of ([\d.]+ [KMGT]?i?B) of which ([\d.]+ [KMGT]?i?B) is free`)
	oomOld  = regexp.MustCompile(`\(GPU (\d+); ([\d.]+ [KMGT]?i?B) total capacity; ([\d.]+ [KMGT]?i?B) already allocated; ([\d.]+ [KMGT]?i?B) free`)
	oomProc = regexp.MustCompile(`this process has ([\d.]+ [KMGT]?i?B) memory in use`)
	freeMem = regexp.MustCompile(`Free memory on device(?: (\S+))? \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory utilization \(([\d.]+), ([\d.]+) GiB\)`)

	kvOld = regexp.MustCompile(`max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\)`)
	// vllm-project/vllm vllm/v1/core/kv_cache_utils.py, _check_enough_kv_cache_memory:
	//   f"To serve at least one request with the models's max seq len ({max_model_len}), ({format_gib(needed_memory)} GiB KV "
	//   f"cache is needed, which is larger than the available KV cache memory ({format_gib(available_memory)} GiB). {estimated_msg}"
	// The fixed parts after the length; "model's" and an unopened "(" are kept optional as older releases and users write them.
	kvNew     = regexp.MustCompile(`max seq len \((\d+)\),\s*\(?([\d.]+ ?GiB) KV\s+cache is needed, which is larger than the available KV\s+cache\s+memory \(([\d.]+ ?GiB)\)`)
	kvEst     = regexp.MustCompile(`estimated maximum model length is (\d+)`)
	heads     = regexp.MustCompile(`Total number of attention heads \((\d+)\) must be divisible by tensor parallel size \((\d+)\)`)
	layers    = regexp.MustCompile(`Total number of hidden layers \((\d+)\) must be divisible by pipeline parallel size \((\d+)\)`)
	blockQuan = regexp.MustCompile(`(\w+) = (\d+) is not divisible by weight quantization block_[nk] = (\d+)`)

	archs      = regexp.MustCompile(`Model architectures \[([^\]]*)\] (failed to be inspected|are not supported)`)
	archInspec = regexp.MustCompile(`Error in inspecting model architecture '([^']+)'`)
	tfUnknown  = regexp.MustCompile("model type `?([\\w\\-.]+)`? but Transformers does not recognize this architecture")
	noConfig   = regexp.MustCompile(`(\S+) does not appear to have a file named ([\w.\-]+?)\.?(?:\s|$)`)
	idxMissing = regexp.MustCompile(`Weight files referenced in index but missing: (.*)`)
	shardNames = regexp.MustCompile(`[\w.\-]+\.safetensors\b`)
	noWeights  = regexp.MustCompile("Cannot find any model weights with [`'\"]?([^`'\")]*)")
	badRepoID  = regexp.MustCompile(`Invalid repository ID or local directory specified: '([^']*)'`)
	hfRepoID   = regexp.MustCompile(`Repo id must [^:]*: '([^']*)'`)
	// huggingface/huggingface_hub src/huggingface_hub/utils/_http.py, REPO_API_REGEX: a repository's URL,
	// ^https://[^/]+(/api/(models|datasets|spaces)/(.+)|/(.+)/resolve/(.+)). hf_raise_for_status reads a 401
	// on one as RepositoryNotFoundError unless the Hub said "Invalid credentials in Authorization header"
	// ("401 is misleading as it is returned for: private and gated repos if user is not authenticated,
	// missing repos"), as internal/hub's classify does.
	hub401Repo = regexp.MustCompile(`for url: https://(?:[\w-]+\.)*(?:huggingface\.co|hf\.co)(?:/api/(?:models|datasets|spaces)/\S+|/\S+/resolve/\S+)`)
	hfURL      = regexp.MustCompile(`(?:for url:? |Unauthorized for url: )(https://huggingface\.co/\S+?)\.?(?:\s|$)`)
	gpuAtIP    = regexp.MustCompile(`current_ip='([^']+)'`)

	// gpusExceed is vLLM's check of the GPUs a placement group can offer, in three forms that
	// differ in whether vLLM stops:
	//   - vllm-project/vllm vllm/engine/ray_utils.py initialize_cluster (commit 085ccad, the
	//     0.2-0.3 releases): raise ValueError("The number of required GPUs exceeds the total
	//     number of " "available GPUs in the placement group.") and, with no current group,
	//     the same ending "in the cluster."; pasted as the traceback's `ValueError: ...` line;
	//   - vllm/executor/ray_utils.py initialize_ray_cluster (commit 01eec54), a given group:
	//     raise ValueError(f"The number of required {device_str}s exceeds the total number of
	//     available {device_str}s in the placement group. Required number of devices:
	//     {world_size}. Total number of devices: {device_bundles}.");
	//   - the same function, no group yet: logger.warning("The number of required %ss exceeds
	//     the total number of available %ss in the placement group.") and vLLM goes on to
	//     wait for the group (a warning, not a stop).
	// So the line is fatal when it is the raised exception (`ValueError: ` before it), names
	// the counts, or ends "in the cluster."; the bare logged sentence is the warning.
	gpusExceed = regexp.MustCompile(`(ValueError: )?The number of required GPUs exceeds the total number of available GPUs in the (placement group|cluster)\.(?: Required number of devices: (\d+)\. Total number of devices: (\d+)\.)?`)
	noConfFmt  = regexp.MustCompile(`No supported config format found in (\S+)`)
	cantConfig = regexp.MustCompile(`Can't load config for '([^']*)'`)

	rayExec    = regexp.MustCompile(`(?:exec: \\?"ray\\?": executable file not found|^"ray": executable file not found|(?:^|[\s:])ray: (?:command )?not found)`)
	rayVersion = regexp.MustCompile(`started with:\s*Ray: (\S+)\s+Python: (\S+)\s+This process on node (\S+) was started with:\s*Ray: (\S+)\s+Python: (\S+)`)
)

// Classify returns what a line means for the deploy, or nil for an ordinary line. A line of
// Python source (a traceback's source line such as `raise RuntimeError(f"NCCL error: …")`)
// is never classified. Classify judges the line alone; a Scanner adds the traceback context.
func Classify(l Line) *Finding {
	if len(l.Text) > maxClassify { // the failures' wording is at the start; regexps are linear in the length
		l.Text = l.Text[:maxClassify]
	}
	p := payload(l.Text)
	if isFrame(p) || looksLikeCode(p) || ipythonHeader.MatchString(p) || caughtUpstream(p) {
		return nil
	}
	c := ctx{l: l, t: l.Text, node: l.Node()}
	for _, rule := range rules {
		if f := rule(c); f != nil {
			return f
		}
	}
	return nil
}

// maxClassify is how much of a line Classify reads.
const maxClassify = 8 << 10

// rules run in order; the first finding wins.
var rules = []func(ctx) *Finding{
	placement, duplicateAddress, driverAttach, imageRay, versionMismatch, gcs, c10d, nccl, gloo, memory,
	kvCache, layout, model, gpus, families, engine,
}

const (
	fixIPs        = "start every Ray node with --node-ip-address on the planned subnet and set VLLM_HOST_IP to the same address on each node"
	fixC10d       = "set VLLM_HOST_IP on the head to an address every node can route to (the shared subnet, the head's --node-ip-address)"
	fixNCCL       = "set NCCL_SOCKET_IFNAME=<=interface> on every node to the shared subnet's interface; with it unset a multi-NIC head uses several interfaces and the ranks disagree"
	fixNCCLIf     = "set NCCL_SOCKET_IFNAME to =<interface> naming the planned subnet's interface as each node names it; a value vLLM copies from the driver to the workers must list every node's name (=a,b) so it exists everywhere"
	fixGloo       = "set GLOO_SOCKET_IFNAME on every node to that node's own interface on the planned subnet (one exact name per node)"
	fixDriver     = "run `vllm serve` inside the Ray head's container (docker exec) with VLLM_HOST_IP equal to the head's --node-ip-address; a driver outside that container cannot reach the raylet's session sockets"
	fixIncomplete = "compare the model's files on every node with the head's and copy what is missing (tpdeploy does before Ray starts with model.host_dir or a Hugging Face name: ModelIncomplete; model.sync: from-head copies them)"
	fixGCS        = "RAY_ADDRESS (and ray start --address on the workers) must name the head's planned address and GCS port, reachable from every node; check the head's Ray is running"
	fixModel      = "mount the model at the spec's path on every node (or serve a Hugging Face id with HF_TOKEN set on every node's container)"
	fixRayImage   = "use --distributed-executor-backend mp (vLLM's own multi-node mode needs no Ray), or an image with Ray added (FROM vllm/vllm-openai:<tag> then RUN pip install ray, the same image on every node), or vLLM ≤ 0.17.1, whose images still ship Ray"
	fixVersions   = "run the same image on every node: the same image ID, not only the same tag (pull it anew or pin it by digest), so Ray and Python match the head's"
	fixNoGPU      = "give that node's container its GPUs (--gpus all or the device request, the NVIDIA container runtime) and check nvidia-smi inside it; with Ray, check --num-gpus and that CUDA_VISIBLE_DEVICES is not empty"
)

// imageRay reads the three ways an image without Ray shows: the container engine cannot
// start a `ray` entrypoint, a shell finds no ray command, or vLLM cannot import ray for the
// Ray executor.
func imageRay(c ctx) *Finding {
	t := c.t
	switch {
	case rayExec.MatchString(payload(t)):
		return c.find(failure.ImageLacksRay, "the image on "+c.onNode()+" has no ray command (stock vllm/vllm-openai images ship without Ray since v0.18.0)", fixRayImage, true)
	case strings.Contains(t, "Failed to import Ray"):
		if strings.Contains(t, "For distributed inference") || strings.Contains(t, "For multi-node inference") {
			return c.find(failure.ImageLacksRay, "the image's Python has no ray module: the Ray executor cannot start there", fixRayImage, false)
		}
		return c.find(failure.ImageLacksRay, "vLLM cannot import Ray for --distributed-executor-backend ray: the image has no Ray (stock vllm/vllm-openai images since v0.18.0)", fixRayImage, true)
	}
	return nil
}

func versionMismatch(c ctx) *Finding {
	t := c.t
	if !strings.Contains(t, "Version mismatch: The cluster was started with") {
		return nil
	}
	diag := "a Ray process joined a cluster started with another Ray or Python version: the nodes run different images"
	if m := rayVersion.FindStringSubmatch(t); m != nil {
		diag = "the Ray cluster runs Ray " + m[1] + " / Python " + m[2] + " but the process on " + m[3] + " runs Ray " + m[4] + " / Python " + m[5] + ": the nodes run different images"
	}
	return c.find(failure.VersionMismatch, diag, fixVersions, true)
}

func placement(c ctx) *Finding {
	t := c.t
	if !strings.Contains(t, "placement group") {
		return nil
	}
	if m := pgWait.FindStringSubmatch(t); m != nil {
		secs, _ := strconv.Atoi(m[1])
		f := c.find(failure.PlacementGroupPending, "vLLM is waiting for its placement group"+pinText(m[2]),
			"if it stays pending: make the pinned address the --node-ip-address Ray registered for that node (VLLM_HOST_IP = --node-ip-address on every node) and free GPUs held by other containers", false)
		f.Pinned, f.Waited = pinned(m[2]), time.Duration(secs)*time.Second
		return f
	}
	if m := pgFail.FindStringSubmatch(t); m != nil {
		specs := m[2] + m[3]
		secs, _ := strconv.Atoi(m[4])
		gpus := ""
		if m[1] != "" {
			gpus = " of " + m[1] + " GPUs"
		}
		diag := "vLLM gave up on its placement group" + gpus + pinText(specs)
		if p := pinned(specs); p != "" {
			diag += ": either no Ray node is registered as " + p + " (Ray took another address for the node running vllm serve) or the GPUs stayed busy"
		}
		f := c.find(failure.PlacementGroupPending, diag, fixIPs+"; check `ray status` shows every planned GPU free", true)
		f.Pinned, f.Waited = pinned(specs), time.Duration(secs)*time.Second
		return f
	}
	return nil
}

func pinned(specs string) string {
	if m := pinnedNode.FindStringSubmatch(specs); m != nil {
		return m[1]
	}
	return ""
}

func pinText(specs string) string {
	if p := pinned(specs); p != "" {
		return " (bundle 0 pinned to node:" + p + ")"
	}
	return ""
}

func duplicateAddress(c ctx) *Finding {
	if !strings.Contains(c.t, "Every node should have a unique IP address") {
		return nil
	}
	diag := "two Ray nodes report the same VLLM_HOST_IP"
	fix := "give every node its own --node-ip-address and the same value as its own VLLM_HOST_IP (per-node container environment, never one cluster-wide value); run one Ray node per machine (stop Ray in any other --net=host container there)"
	if m := dupIPs.FindStringSubmatch(c.t); m != nil {
		nodes, _ := strconv.Atoi(m[1])
		ips, _ := strconv.Atoi(m[2])
		if ips > nodes {
			// vLLM compares the count of Ray nodes with the count of its workers' IPs: more
			// IPs means the workers of one Ray node disagree on their address.
			diag = "vLLM's workers on " + m[1] + " Ray node(s) report " + m[2] + " addresses" + setText(m[3]) + ": on one node, VLLM_HOST_IP (or the address vLLM guessed) differs from the --node-ip-address Ray registered"
			fix = "set VLLM_HOST_IP on every node to exactly the --node-ip-address its Ray node registered (ray status / the plan's address), in the container that runs Ray"
		} else {
			diag = m[1] + " Ray nodes report only " + m[2] + " distinct VLLM_HOST_IP addresses" + setText(m[3]) + ": VLLM_HOST_IP is set to one value on several nodes, or two nodes' Ray share one host (two --net=host containers on one machine)"
		}
	}
	return c.find(failure.DuplicateAddress, diag, fix, true)
}

// setText is vLLM's address set as the line gave it, or "" when the line was cut short.
func setText(set string) string {
	if set == "" {
		return ""
	}
	return " " + set
}

func driverAttach(c ctx) *Finding {
	t := c.t
	switch {
	case strings.Contains(t, "Failed to register worker to Raylet"):
		return c.find(failure.RayDriverAttach, "the Ray driver (vllm serve) could not register with the raylet of its node (the raylet closed the socket): it runs outside the Ray node's container or against another Ray session", fixDriver, true)
	case strings.Contains(t, "expects this IP address to be either the"):
		diag := "the Ray driver runs under an address that is no Ray node's"
		if m := driverIP.FindStringSubmatch(t); m != nil {
			diag = "the Ray driver (vllm serve) runs as " + m[1] + " but no raylet has that address"
			if r := raylets.FindStringSubmatch(t); r != nil {
				diag += " (raylets at " + r[1] + ")"
			}
			diag += ": it is not inside a Ray node's container, or its node IP differs from that node's --node-ip-address"
		}
		return c.find(failure.RayDriverAttach, diag, fixDriver, true)
	case strings.Contains(t, "Ray does not allocate any GPUs on the driver node"):
		return c.find(failure.RayDriverAttach, "vLLM's placement group has no GPU on the node running vllm serve: the driver's address (VLLM_HOST_IP, else its default-route address) is not the address Ray registered for that node, or vllm serve runs where Ray has no GPU", fixDriver, true)
	case strings.Contains(t, "Failed to get the system config from Raylet"):
		return c.find(failure.RayDriverAttach, "the Ray driver could not talk to a raylet of its node", fixDriver, true)
	case strings.Contains(t, "This node has an IP address of") && strings.Contains(t, "Raylet"):
		diag := "Ray finds no raylet under this process's address"
		if m := driverIP.FindStringSubmatch(t); m != nil {
			diag = "Ray finds no raylet registered as " + strings.TrimSuffix(m[1], ",") + ", the address this process detected"
		}
		return c.find(failure.RayDriverAttach, diag, fixDriver, false)
	case strings.Contains(t, "Some processes that the driver needs to connect to have not registered with GCS"):
		return c.find(failure.RayDriverAttach, "the Ray driver finds no raylet of its own node registered with the GCS yet (retrying)", fixDriver, false)
	}
	return nil
}

func gcs(c ctx) *Finding {
	t := c.t
	if strings.Contains(t, "Failed to send request to gcs") {
		return c.find(failure.GCSUnreachable, "Ray cannot reach the GCS (its gRPC requests fail)", fixGCS, true)
	}
	if !strings.Contains(t, "GCS") {
		return nil
	}
	if !(strings.Contains(t, "Unable to connect to GCS") || strings.Contains(t, "Failed to connect to GCS") ||
		strings.Contains(t, "Failed to get cluster ID from GCS") || strings.Contains(t, "reconnect to GCS server") ||
		strings.Contains(t, "waiting for GCS to become available")) {
		return nil
	}
	diag := "Ray cannot reach the GCS"
	if m := gcsAt.FindStringSubmatch(t); m != nil {
		if m[1] == "" {
			diag = "Ray was given no GCS host (address \":" + m[2] + "\"): RAY_ADDRESS or --address is empty before the port"
		} else {
			diag = "Ray cannot reach the GCS at " + m[1] + ":" + m[2]
		}
	} else if m := gcsLastAt.FindStringSubmatch(t); m != nil {
		diag = "Ray lost the GCS (last address " + m[1] + ")"
	} else if strings.Contains(t, "cluster ID") {
		diag = "Ray timed out waiting for the GCS (no cluster ID)"
	} else if strings.Contains(t, "waiting for GCS to become available") {
		diag = "Ray timed out waiting for the GCS to become available"
	}
	return c.find(failure.GCSUnreachable, diag, fixGCS, true)
}

func c10d(c ctx) *Finding {
	t := c.t
	if !(strings.Contains(t, "client socket") || strings.Contains(t, "c10d") || strings.Contains(t, "DistNetworkError") ||
		strings.Contains(t, "TCP client") || strings.Contains(t, "waiting for clients") || strings.Contains(t, "waiting for workers")) {
		return nil
	}
	if m := c10dErrno.FindStringSubmatch(t); m != nil {
		errno, _ := strconv.Atoi(m[2])
		if errno == 111 { // refused: the store is not listening yet, torch retries
			return nil
		}
		addr := m[1]
		target := "the torch c10d rendezvous at " + addr
		if strings.HasPrefix(addr, "?") {
			target = "the torch c10d rendezvous (address not shown)"
			if a := c10dAny.FindStringSubmatch(t); a != nil {
				target = "the torch c10d rendezvous at " + a[1] + ":" + a[2]
			}
		}
		why := ""
		switch errno {
		case 101:
			why = ": it has no route to that network"
		case 113:
			why = ": no route to that host"
		case 110:
			why = ": the connection attempt timed out (wrong address or a firewall)"
		}
		return c.find(failure.C10dUnreachable, "a worker cannot reach "+target+" (errno "+m[2]+" - "+m[3]+")"+why, fixC10d, true)
	}
	if m := c10dAny.FindStringSubmatch(t); m != nil {
		return c.find(failure.C10dUnreachable, "a worker cannot reach the torch c10d rendezvous at "+m[1]+":"+m[2]+" on any of its addresses", fixC10d, true)
	}
	if m := c10dTimeout.FindStringSubmatch(t); m != nil {
		return c.find(failure.C10dUnreachable, "a worker timed out after "+m[1]+" connecting to the torch c10d rendezvous at "+m[2]+":"+m[3], fixC10d, true)
	}
	if m := c10dRetry.FindStringSubmatch(t); m != nil {
		if strings.Contains(t, "Connection refused") || strings.Contains(t, "errno: 111") {
			return nil
		}
		return c.find(failure.C10dUnreachable, "a worker cannot connect to the torch c10d rendezvous at "+m[1]+":"+m[2]+" (torch keeps retrying until the store times out)", fixC10d, true)
	}
	if m := c10dServer.FindStringSubmatch(t); m != nil {
		return c.find(failure.C10dUnreachable, "the c10d rendezvous timed out after "+m[1]+" s with "+m[2]+"/"+m[3]+" ranks joined: the other ranks cannot reach the head's rendezvous address", fixC10d, true)
	}
	return nil
}

func nccl(c ctx) *Finding {
	t := c.t
	if !strings.Contains(t, "NCCL") && !strings.Contains(t, "nccl") && !strings.Contains(t, "Bootstrap : no socket interface") && !strings.Contains(t, "Duplicate GPU") &&
		!strings.Contains(t, "socket.h:") && !strings.Contains(t, "socket.cc:") {
		return nil
	}
	switch {
	case strings.Contains(t, "no socket interface found"), strings.Contains(t, "NET/Socket : no interface found"), strings.Contains(t, "no NCCL_SOCKET_IFNAME interface found"):
		return c.find(failure.NCCLNoInterface, "NCCL found no interface matching NCCL_SOCKET_IFNAME on "+c.onNode(), fixNCCLIf, true)
	case ncclFamily.MatchString(t):
		m := ncclFamily.FindStringSubmatch(t)
		return c.find(failure.NCCLNoInterface, "NCCL has no usable socket address (family "+m[1]+" is neither IPv4 nor IPv6): NCCL_SOCKET_IFNAME names no interface on one node (NCCL 2.27+ reports a missing interface this way), or the nodes run different NCCL builds",
			fixNCCLIf+"; run one image on every node", true)
	}
	if m := ncclDupGPU.FindStringSubmatch(t); m != nil {
		return c.find(failure.NCCLError, "NCCL ranks "+m[1]+" and "+m[2]+" sit on the same GPU (CUDA device "+m[3]+"): two Ray nodes share one machine's GPU, or a container sees a GPU another rank uses",
			"give every planned node its own GPU: check the nodes are distinct machines and each container's GPU device request", true)
	}
	if ncclWarnOp.MatchString(t) {
		peer := ""
		if m := ncclConnect.FindStringSubmatch(t); m != nil {
			peer = m[1]
		}
		diag := "NCCL cannot connect to its peer"
		switch {
		case strings.HasPrefix(peer, "fe80:") || strings.HasPrefix(peer, "169.254."):
			diag = "NCCL connects over the link-local address " + peer + ": it picked an interface without a routable address"
		case strings.Contains(t, "closed by remote peer"):
			diag = "the NCCL peer " + peer + " closed its connection: that rank failed first (see its node's lines)"
		case peer != "":
			diag = "NCCL on " + c.onNode() + " cannot connect to its peer " + peer
		}
		return c.find(failure.NCCLError, diag+": "+clip(strings.TrimSpace(payload(t)), 160), fixNCCL, true)
	}
	if m := ncclRetry.FindStringSubmatch(t); m != nil {
		return c.find(failure.NCCLError, "NCCL retries connecting to a peer ("+m[1]+")", fixNCCL, false)
	}
	// A queue pair NCCL could not bring up ends in strerror's "Connection timed out" too,
	// but no socket is involved: families reads it (ibvModifyQP) for what it is.
	if ncclSockWarn.MatchString(t) && !ibvModifyQP.MatchString(t) {
		peer := ""
		if m := ncclConnect.FindStringSubmatch(t); m != nil {
			peer = " " + m[1]
		} else if m := ncclPeerAt.FindStringSubmatch(t); m != nil {
			peer = " " + m[1]
		}
		diag := "an NCCL socket to a peer" + peer + " failed on " + c.onNode()
		if strings.Contains(t, "closed by remote peer") {
			diag = "the NCCL peer" + peer + " closed its connection: that rank failed first (see its node's lines), or the network between the nodes cut it"
		}
		return c.find(failure.NCCLError, diag+": "+clip(strings.TrimSpace(payload(t)), 160), fixNCCL, true)
	}
	if strings.Contains(t, "NCCL WARN NET/IB : Got completion from peer") {
		return c.find(failure.NCCLError, "an RDMA transfer to an NCCL peer failed (IB completion error): "+clip(strings.TrimSpace(payload(t)), 160),
			"check the RDMA link between the nodes (ibstat, cables, the same RoCE GID and MTU on both ends), or set NCCL_IB_DISABLE=1 to fall back to sockets", true)
	}
	low := strings.ToLower(t)
	if !(strings.Contains(t, "NCCL error") || strings.Contains(t, "ncclInternalError") || strings.Contains(t, "ncclRemoteError") ||
		strings.Contains(t, "ncclSystemError") || strings.Contains(t, "ncclInvalidUsage") || strings.Contains(t, "ncclUnhandledCudaError") ||
		strings.Contains(t, "ncclNetSocketListen") || strings.Contains(t, "NCCL WARN Net : Connect to") || ncclFailure.MatchString(t)) {
		return nil
	}
	kind := "NCCL failed"
	switch {
	case strings.Contains(low, "invalid usage"):
		kind = "NCCL reports invalid usage (with NCCL 2.28 this is NCCL_SOCKET_IFNAME naming no interface on that node, e.g. the driver's value copied onto a worker, or two ranks on one GPU)"
	case strings.Contains(low, "internal error"), strings.Contains(t, "ncclNetSocketListen"):
		kind = "NCCL internal error (usually NCCL_SOCKET_IFNAME unset on a multi-NIC node, so the ranks disagree on interfaces, or naming no interface)"
	case strings.Contains(low, "remote"):
		kind = "NCCL lost a peer (remote error: another rank failed or the network between the nodes broke)"
	case strings.Contains(low, "system error"):
		kind = "NCCL socket or system call failed (a peer address unreachable over the chosen interface)"
	}
	return c.find(failure.NCCLError, kind+": "+clip(strings.TrimSpace(payload(t)), 160), fixNCCL, true)
}

func gloo(c ctx) *Finding {
	t := c.t
	if m := glooNoAddr.FindStringSubmatch(t); m != nil {
		if strings.Contains(t, "rp != nullptr") {
			return c.find(failure.GlooLoopback, "Gloo cannot resolve the hostname "+m[1]+" to an address on "+c.onNode(), fixGloo, true)
		}
		name := m[1]
		why := "GLOO_SOCKET_IFNAME names " + name + ", which is not an interface of " + c.onNode()
		switch {
		case strings.ContainsAny(name, "^=,"):
			why += " (Gloo takes one exact interface name: no ^, = or lists)"
		case strings.Count(name, ".") == 3:
			why += " (an address, not an interface name)"
		}
		return c.find(failure.GlooNoInterface, why, fixGloo, true)
	}
	if m := glooNoIf.FindStringSubmatch(t); m != nil {
		return c.find(failure.GlooLoopback, "Gloo derived the address "+m[1]+" from the hostname of "+c.onNode()+" and no interface has it", fixGloo, true)
	}
	if strings.Contains(t, "Using the loopback address as fallback") {
		return c.find(failure.GlooLoopback, "Gloo fell back to the loopback address", fixGloo, false)
	}
	if strings.Contains(t, "Gloo connectFullMesh failed") {
		diag := "Gloo could not connect its mesh: a rank advertises an address its peers cannot reach (loopback when the hostname does not resolve, or the wrong interface)"
		if m := glooRemote.FindStringSubmatch(t); m != nil {
			diag = "Gloo could not connect its mesh (remote " + m[1] + ")"
			if strings.HasPrefix(m[1], "127.") || m[1] == "::1" {
				diag = "Gloo bound the loopback address on a rank, so its peers cannot reach it (remote " + m[1] + ")"
			}
		}
		return c.find(failure.GlooLoopback, diag, fixGloo, true)
	}
	return nil
}

func memory(c ctx) *Finding {
	t := c.t
	if m := freeMem.FindStringSubmatch(t); m != nil {
		free, _ := strconv.ParseFloat(m[2], 64)
		total, _ := strconv.ParseFloat(m[3], 64)
		dev := "the GPU"
		if m[1] != "" {
			dev = m[1]
		}
		held := total - free
		share := 0.0
		if total > 0 {
			share = free/total - 0.02
		}
		most := strconv.FormatFloat(max(0, share), 'f', 2, 64)
		if total > 0 && held > 0.1*total {
			fix := "stop what holds the GPU on " + c.onNode() + " (another vllm or Ray container, a leftover process: nvidia-smi)"
			if share >= 0.3 {
				fix += ", or lower --gpu-memory-utilization to at most " + most
			}
			return c.find(failure.ResourcesBusy, "something else holds "+strconv.FormatFloat(held, 'f', 2, 64)+" GiB of "+dev+" on "+c.onNode()+" ("+m[2]+" of "+m[3]+" GiB free; vLLM wants "+m[4]+" = "+m[5]+" GiB)", fix, true)
		}
		return c.find(failure.CUDAOutOfMemory, "--gpu-memory-utilization "+m[4]+" asks for "+m[5]+" GiB but only "+m[2]+" of "+m[3]+" GiB of "+dev+" are free on "+c.onNode(),
			"lower --gpu-memory-utilization to at most "+most, true)
	}
	if strings.Contains(t, "busy or unavailable") && strings.Contains(t, "CUDA") {
		return c.find(failure.ResourcesBusy, "CUDA says the GPU on "+c.onNode()+" is busy or unavailable (exclusive-process mode held by another process)",
			"stop the process or container that holds the GPU on "+c.onNode(), true)
	}
	if strings.Contains(t, "CUDA out of memory") || strings.Contains(t, "OutOfMemoryError") && !strings.Contains(t, "ray.exceptions.OutOfMemoryError") && !strings.Contains(t, "running low on memory") {
		// Ray's OutOfMemoryError (python/ray/exceptions.py) is host memory: its memory monitor killed the
		// worker ("Task was killed due to the node running low on memory."); families reads it.
		diag := "a GPU ran out of memory"
		if m := oomGPU.FindStringSubmatch(t); m != nil {
			diag = "GPU " + m[1] + " ran out of memory (" + m[2] + " total, " + m[3] + " free"
			if p := oomProc.FindStringSubmatch(t); p != nil {
				diag += ", this process holds " + p[1]
			}
			diag += ")"
		} else if m := oomOld.FindStringSubmatch(t); m != nil {
			diag = "GPU " + m[1] + " ran out of memory (" + m[2] + " total, " + m[3] + " allocated, " + m[4] + " free)"
		}
		return c.find(failure.CUDAOutOfMemory, diag, "lower --gpu-memory-utilization or --max-model-len, or use more GPUs (tensor/pipeline size)", true)
	}
	return nil
}

func kvCache(c ctx) *Finding {
	t := c.t
	if m := kvOld.FindStringSubmatch(t); m != nil {
		return c.find(failure.KVCacheTooSmall, "the KV cache holds "+m[2]+" tokens, fewer than one request of the model's max length "+m[1],
			"set --max-model-len to at most "+m[2]+", or raise --gpu-memory-utilization, or spread the model over more GPUs", true)
	}
	if m := kvNew.FindStringSubmatch(t); m != nil {
		fix := "lower --max-model-len"
		if e := kvEst.FindStringSubmatch(t); e != nil {
			fix += " to at most " + e[1]
		}
		return c.find(failure.KVCacheTooSmall, "one request of max length "+m[1]+" needs "+m[2]+" of KV cache but "+m[3]+" is left after the weights",
			fix+", or raise --gpu-memory-utilization, or spread the model over more GPUs", true)
	}
	if strings.Contains(t, "No available memory for the cache blocks") {
		return c.find(failure.KVCacheTooSmall, "no GPU memory is left for the KV cache after the weights",
			"raise --gpu-memory-utilization or spread the model over more GPUs (tensor/pipeline size); a smaller --max-model-len does not help here", true)
	}
	return nil
}

func layout(c ctx) *Finding {
	t := c.t
	if m := heads.FindStringSubmatch(t); m != nil {
		n, _ := strconv.Atoi(m[1])
		return c.find(failure.InvalidParallelLayout, "the model has "+m[1]+" attention heads, not divisible by the tensor-parallel size "+m[2],
			"use a tensor-parallel size that divides "+m[1]+" ("+divisors(n)+") and make up the GPU count with pipeline parallelism", true)
	}
	if m := layers.FindStringSubmatch(t); m != nil {
		n, _ := strconv.Atoi(m[1])
		return c.find(failure.InvalidParallelLayout, "the model has "+m[1]+" layers, not divisible by the pipeline-parallel size "+m[2],
			"use a pipeline-parallel size that divides "+m[1]+" ("+divisors(n)+")", true)
	}
	if m := blockQuan.FindStringSubmatch(t); m != nil {
		return c.find(failure.InvalidParallelLayout, "with this tensor-parallel size a weight shard ("+m[1]+" = "+m[2]+") is not a multiple of the quantization block "+m[3],
			"use a smaller tensor-parallel size (pipeline parallelism for the rest)", true)
	}
	if strings.Contains(t, "not divisible by the number of tensor parallelism") {
		return c.find(failure.InvalidParallelLayout, "the GPUs per node are not a multiple of the tensor-parallel size", "use a tensor-parallel size that divides the GPUs of each node, or pipeline parallelism across nodes", true)
	}
	return nil
}

func divisors(n int) string {
	var d []string
	for i := 1; i <= n && len(d) < 8; i++ {
		if n%i == 0 {
			d = append(d, strconv.Itoa(i))
		}
	}
	return strings.Join(d, ", ")
}

func model(c ctx) *Finding {
	t := c.t
	const fixImage = "use a vLLM image whose release supports the architecture (a newer image), the same image on every node"
	if m := archs.FindStringSubmatch(t); m != nil {
		if m[2] == "failed to be inspected" {
			return c.find(failure.ModelUnsupported, "the image's vLLM cannot load the model class for "+m[1]+" (inspection failed: the architecture is newer than the image or its code does not import there; the ERROR lines above name the cause)", fixImage, true)
		}
		return c.find(failure.ModelUnsupported, "the image's vLLM does not support the model architecture "+m[1], fixImage, true)
	}
	if m := archInspec.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelUnsupported, "the image's vLLM fails to inspect the model architecture "+m[1], fixImage, true)
	}
	if m := tfUnknown.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelUnsupported, "the image's transformers does not know the model type "+m[1], fixImage, true)
	}
	if m := idxMissing.FindStringSubmatch(t); m != nil {
		files := shardNames.FindAllString(m[1], -1)
		what := "files its index lists"
		if len(files) > 0 {
			what = strings.Join(files[:min(3, len(files))], ", ")
			if len(files) > 3 {
				what += fmt.Sprintf(" and %d more", len(files)-3)
			}
		}
		return c.find(failure.ModelIncomplete, "the model on "+c.onNode()+" lacks "+what+" (a partial download or copy)", fixIncomplete, true)
	}
	if strings.Contains(t, "Following weights were not initialized from checkpoint") {
		return c.find(failure.ModelIncomplete, "weights are missing from the checkpoint on "+c.onNode()+
			": shards missing or truncated on that node, or a checkpoint that does not match this vLLM's code for the model",
			fixIncomplete+"; if the files are complete and equal on every node, use the vLLM release the checkpoint was made for", true)
	}
	hf := ""
	if m := hfURL.FindStringSubmatch(t); m != nil {
		hf = " (" + m[1] + ")"
	}
	switch {
	case strings.Contains(t, "GatedRepoError"), strings.Contains(t, "gated repo"), strings.Contains(t, "is restricted. You must"),
		strings.Contains(t, "You must be authenticated to access it"):
		return c.find(failure.ModelGated, "Hugging Face refuses the gated model"+hf+": the token lacks access",
			"accept the model's terms on huggingface.co with the account whose token is passed as HF_TOKEN to every node's container, or mount downloaded weights and serve the local path", true)
	case strings.Contains(t, "RepositoryNotFoundError"), strings.Contains(t, "Repository Not Found for url"):
		return c.find(failure.ModelNotFound, "Hugging Face has no repository for the model id"+hf+" with this token (a misspelt id, or a private repository)",
			"check the spec's model id; for a private repository pass HF_TOKEN to every node's container; for local weights "+fixModel, true)
	case strings.Contains(t, "401 Client Error") && hub401Repo.MatchString(t) && !strings.Contains(t, "Invalid credentials"):
		return c.find(failure.ModelNotFound, "Hugging Face answers 401 for the model's repository"+hf+": no such repository, or a private or gated one asked for without a token the Hub accepts (the Hub gives both the same 401, which huggingface_hub reads as RepositoryNotFoundError)",
			"check the spec's model id (a Hugging Face id, not a ModelScope one); for a private or gated repository pass HF_TOKEN to every node's container; for local weights "+fixModel, true)
	case (strings.Contains(t, "401 Client Error") || strings.Contains(t, "403 Client Error")) && strings.Contains(t, "huggingface") && !mirror403(t):
		return c.find(failure.ModelUnavailable, "Hugging Face rejected the request"+hf+" (401/403: no or wrong token)", "pass a valid HF_TOKEN with access to the model to every node's container, or mount the weights", true)
	case strings.Contains(t, "404 Client Error") && strings.Contains(t, "huggingface.co"):
		return c.find(failure.ModelNotFound, "Hugging Face has no such repository or file"+hf+" (404: a misspelt model id or a path taken for one)",
			"check the spec's model id; for local weights "+fixModel, true)
	}
	if m := noConfFmt.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelUnavailable, "vLLM finds no config.json or params.json for "+m[1]+" on "+c.onNode()+" (not mounted there, not a Hugging Face-format checkpoint, or a Hugging Face id it could not fetch)", fixModel, true)
	}
	if strings.Contains(t, "Could not detect config format") {
		return c.find(failure.ModelUnavailable, "vLLM finds no config.json or params.json for the model on "+c.onNode()+" (not mounted there, not a Hugging Face-format checkpoint, or a Hugging Face id it could not fetch)", fixModel, true)
	}
	if m := cantConfig.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelUnavailable, "transformers cannot load a config for "+m[1]+" on "+c.onNode()+": neither a Hugging Face model id it can fetch nor a directory with config.json", fixModel, true)
	}
	if m := noConfig.FindStringSubmatch(t); m != nil && (m[2] == "config.json" || m[2] == "params.json") {
		return c.find(failure.ModelUnavailable, "the model path "+m[1]+" has no "+m[2]+" on "+c.onNode()+" (not a Hugging Face-format checkpoint, or not mounted there)", fixModel, true)
	}
	if m := noWeights.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelUnavailable, "no weight files (*.safetensors, *.bin) under "+strings.TrimSpace(m[1])+" on "+c.onNode(), fixModel+"; check --load-format matches the files", true)
	}
	if m := badRepoID.FindStringSubmatch(t); m != nil {
		return c.find(failure.ModelNotFound, m[1]+" is neither a directory with config.json on "+c.onNode()+" nor a Hugging Face repository", fixModel, true)
	}
	// vLLM's "Error retrieving file list: Repo id must …, retrying" is a probe, not the failure.
	if m := hfRepoID.FindStringSubmatch(t); m != nil && strings.Contains(t, "HFValidationError") {
		return c.find(failure.ModelNotFound, "the model path "+m[1]+" does not exist on "+c.onNode()+", so it was taken for a Hugging Face repository id", fixModel, true)
	}
	if strings.Contains(t, "couldn't connect to 'https://huggingface.co'") || strings.Contains(t, "LocalEntryNotFoundError") {
		return c.find(failure.ModelOffline, c.onNode()+" cannot reach huggingface.co (offline mode or no network) and the model is not in its cache", fixOffline, true)
	}
	return nil
}

func gpus(c ctx) *Finding {
	t := c.t
	switch {
	case strings.Contains(t, "No CUDA GPUs are available"), strings.Contains(t, "no CUDA-capable device is detected"):
		return c.find(failure.GPUsNotVisible, "CUDA sees no GPU in the process on "+c.onNode()+" (the container has no GPU, or CUDA_VISIBLE_DEVICES is empty)", fixNoGPU, true)
	case strings.Contains(t, "Failed to infer device type"):
		return c.find(failure.GPUsNotVisible, "vLLM finds no GPU platform on "+c.onNode()+" (no NVIDIA driver or GPU visible in the container)", fixNoGPU, true)
	}
	if strings.Contains(t, "Current node has no GPU available") {
		diag := "vLLM's driver node offers no GPU to Ray"
		if m := gpuAtIP.FindStringSubmatch(t); m != nil {
			diag = "the Ray node " + m[1] + " running vLLM's engine offers no free GPU (none detected, or all held by another placement group)"
		}
		return c.find(failure.InsufficientGPUs, diag, "run vLLM on a node whose Ray registration has free GPUs (check --num-gpus, the GPU device request and stale placement groups)", true)
	}
	if !strings.Contains(t, "The number of required GPUs exceeds") { // the regexp only on lines that can match
		return nil
	}
	if m := gpusExceed.FindStringSubmatch(t); m != nil {
		diag := "vLLM needs more GPUs than Ray offers"
		if m[3] != "" {
			diag = "vLLM needs " + m[3] + " GPUs but its placement group offers " + m[4]
		}
		fatal := m[1] != "" || m[2] == "cluster" || m[3] != ""
		return c.find(failure.InsufficientGPUs, diag, "join every planned node's GPUs to Ray (ray status) before serving", fatal)
	}
	return nil
}

// Engine lines that announce a traceback; a Scanner holds them until the traceback's own
// exception is known.
var engineHeaders = []string{
	"EngineCore failed to start", "EngineCore hit an exception", "EngineCore encountered a fatal error",
	"WorkerProc failed to start", "Error executing method", "Exception in worker",
	// vllm/v1/executor/multiproc_executor.py WorkerProc.worker_busy_loop: logger.exception("WorkerProc hit an
	// exception."); ray python/ray/exceptions.py RayActorError: "The actor died because of an error raised in
	// its creation task, " + the creation task's RayTaskError (its traceback, then its exception).
	"WorkerProc hit an exception", "died because of an error raised in its creation task",
}

// rpcTimeout is MultiprocExecutor's deadline on a step (vllm/v1/executor/
// multiproc_executor.py collective_rpc: raise TimeoutError(f"RPC call to {method} timed
// out.")), VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 s by default (vllm/envs.py).
var rpcTimeout = regexp.MustCompile(`TimeoutError: RPC call to (\w+) timed out\.`)

func engine(c ctx) *Finding {
	t := c.t
	if m := rpcTimeout.FindStringSubmatch(t); m != nil {
		return c.find(failure.EngineDead, "vLLM's engine died: a rank did not answer its "+m[1]+" step within VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (300 s unless set)",
			"a rank frozen or its collective hung (a stopped process, a cut link, a stuck GPU): read that rank's node; `vllm serve` exits within 5 s of this line", true)
	}
	if strings.Contains(t, "EngineDeadError") || strings.Contains(t, "Engine core initialization failed") {
		return c.find(failure.EngineDead, "vLLM's engine died: "+clip(strings.TrimSpace(payload(t)), 160), "see the lines above it; a lost rank (node down, network cut) is the usual cause", true)
	}
	for _, h := range engineHeaders {
		if strings.Contains(t, h) {
			f := c.find(failure.EngineDead, "vLLM's engine died: "+clip(strings.TrimSpace(payload(t)), 160), "see the traceback that follows it; a lost rank (node down, network cut) is the usual cause", true)
			f.header, f.where = true, c.where()
			return f
		}
	}
	return nil
}
