// Package lab builds the simulated GPU cluster the end-to-end tests and `make demo` run
// on: node containers running the real tpdeploy worker, on Docker networks that
// reproduce the seed (a management network for Temporal, an external network only the
// head has and that carries its default route, a fast internal network with MTU 9000
// that all nodes share) or, per Config.Topology, two rails with RoCE HCAs or a switchless
// triangle or ring of cables (topology.go), a Temporal dev server container, and the Ray/vLLM simulator
// image the deploy starts. docker-compose.yml declares the same two-node lab for people;
// this package is what tests drive, with a prefix and subnets of their own.
package lab

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/agentgate"
	"github.com/tpdeploy/tpdeploy/internal/barrier"
	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/internal/searchattr"
	"github.com/tpdeploy/tpdeploy/lab/faultproxy"
)

// Image tags the lab builds (the simulator's, one per release: Releases).
const (
	NodeImage     = "tpdeploy/node:dev"
	TemporalImage = "tpdeploy/temporal:dev"
	RouterImage   = "tpdeploy/router:dev"
)

// LabelLab marks every container and network of a lab with its prefix.
const LabelLab = "tpdeploy.lab"

// BuildImages compiles the simulator, the node init, the worker and the router (static; the worker
// with build tag lab) and builds
// the lab's images FROM scratch, each only when its inputs changed. temporalBin is the
// pinned Temporal CLI (bin/temporal); empty skips the Temporal image.
func BuildImages(ctx context.Context, eng images.Engine, temporalBin string) error {
	unlock, err := lockBuilds(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	dir, err := os.MkdirTemp("", "tpd-lab-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bins := map[string]string{}
	for _, pkg := range []string{"./lab/sim", "./lab/nodeinit", "./worker", "./router", "./gate"} {
		var tags []string
		if pkg == "./worker" {
			// The lab's agent is a lab build: only it has the barriers the fault matrix
			// holds steps at (worker/hooks.go says why a production agent lacks them).
			tags = []string{"lab"}
		}
		if bins[filepath.Base(pkg)], err = images.GoBinary(ctx, pkg, dir, tags...); err != nil {
			return err
		}
	}
	// The release images are FROM the torch base: Debian's python3-torch runs each rank's
	// rendezvous and Gloo for real (lab/torch.go). Debian's root also has the POSIX shell and
	// coreutils that vLLM's (Ubuntu) images have and tpdeploy's wrapper uses.
	base, err := ensureTorch(ctx, eng)
	if err != nil {
		return err
	}
	var all []images.Image
	for _, r := range ImageReleases() {
		img, err := simImage(r, base.ImageID, bins["sim"], dir)
		if err != nil {
			return err
		}
		all = append(all, img)
	}
	all = append(all, []images.Image{
		{Tag: NodeImage, Files: map[string]string{"init": bins["nodeinit"], "worker": bins["worker"], "gate": bins["gate"]}, Dirs: []string{"tmp", "run"},
			Dockerfile: "FROM scratch\nCOPY init worker gate /\nCOPY tmp /tmp\nCOPY run /run\nENTRYPOINT [\"/init\", \"/worker\"]\n"},
		RouterImageOf(bins["router"]),
	}...)
	if temporalBin != "" {
		all = append(all, images.Image{Tag: TemporalImage, Files: map[string]string{"temporal": temporalBin}, Dirs: []string{"tmp"},
			Dockerfile: "FROM scratch\nCOPY temporal /\nCOPY tmp /tmp\nENV HOME=/tmp USER=temporal\nENTRYPOINT [\"/temporal\"]\n"})
	}
	hub, err := hubImage(ctx, dir)
	if err != nil {
		return err
	}
	all = append(all, hub)
	for _, img := range all {
		if _, err := images.Ensure(ctx, eng, img); err != nil {
			return err
		}
	}
	return nil
}

// RouterImageOf is the router's image (tpdeploy/router:dev) around its static binary:
// FROM scratch, the admin socket's /run and a /tmp for the state file's writes.
func RouterImageOf(bin string) images.Image {
	return images.Image{Tag: RouterImage, Files: map[string]string{"router": bin}, Dirs: []string{"tmp", "run"},
		Dockerfile: "FROM scratch\nCOPY router /\nCOPY tmp /tmp\nCOPY run /run\nEXPOSE 8000\nENTRYPOINT [\"/router\"]\n"}
}

// Config describes a lab.
type Config struct {
	// Prefix names every container and network (e.g. "tpd-e2e-a"); leftovers of a crashed
	// run are found by it.
	Prefix string
	// Nodes is the number of nodes (default 2); node 0 is the head with the external NIC.
	Nodes int
	// Index picks the subnets (10.231.I.0/24 management, 10.230.I.0/24 external,
	// 10.200.I.0/24 fast); 0 searches for a free index from 1.
	Index int
	// NodeEnv is extra environment for every node agent.
	NodeEnv map[string]string
	// FaultProxies puts a fault proxy (lab/faultproxy) between each node's agent and the
	// Docker engine, so a test can fail, hang or hold that node's engine calls.
	FaultProxies bool
	// Unsigned starts agents that trust no operator key (no trusted_keys): they act on
	// unsigned requests, as an agent whose policy sets none. The lab's key is made anyway.
	Unsigned bool
	// Release names the modelled vLLM release (Releases) the lab's deploys run: Lab.Image
	// is its image. Empty is DefaultRelease. Every release's image is built and allowed on
	// every node either way.
	Release string
	// NodeMemory, when set, is every node container's memory limit in bytes (cgroup v2's
	// memory.max, v1's limit_in_bytes): its agent then reads its memory facts from that
	// cgroup (package hostmem), as a memory-limited node.
	NodeMemory int64
	// Topology is the lab's network shape (Topologies): "" or TopologyPair, the seed's (one
	// fast network, no RDMA); TopologySpark, two DGX Sparks on two rails with a simulated
	// RoCE HCA each (spark.go); TopologyTriangle and TopologyRing4, three and four Sparks
	// without a switch, a network per cable (topology.go). Every topology has the management
	// network joining every node and the head's external network.
	Topology string
}

// Lab is a running lab.
type Lab struct {
	Prefix string
	// Release is the release chosen by Config.Release; Image its simulator image.
	Release         Release
	Image           string
	Mgmt, Ext, Fast netip.Prefix
	// Ctl is the control plane's subnet (Temporal, the gate's upstream side, the
	// controller), which no node joins.
	Ctl netip.Prefix
	// Fast2 is the second rail's subnet (TopologySpark only).
	Fast2    netip.Prefix
	Topology string
	// Nets are the lab's networks in the order nodes are attached (mgmt first), with
	// their subnets; Cables the link networks of a switchless fabric (triangle, ring4).
	Nets   []Net
	Cables []Cable
	// Temporal is the dev server's frontend address, reachable from this host and the
	// nodes; UI is its Web UI.
	Temporal, UI string
	// Gate is where the nodes' agents dial Temporal: the gate (package agentgate) that
	// holds each node's API key to the calls an agent makes (docs/security.md), as a fleet
	// whose frontend the nodes reach only through it.
	Gate string
	// Controller is the controller's container (startController): the workflows run
	// there, the nodes' agents serve only their node queues.
	Controller string
	// ControllerMgmt is its management address, where it serves /metrics at MetricsPort.
	ControllerMgmt netip.Addr
	Nodes          []Node
	// APIKey is the value every node's agent holds as VLLM_API_KEY (random per lab): a
	// spec with secrets.api_key {env: VLLM_API_KEY} has vLLM require it.
	APIKey string
	// RayToken is the value every node's agent holds as RAY_AUTH_TOKEN (random per lab): a
	// spec with secrets.ray_token {env: RAY_AUTH_TOKEN} runs Ray with it.
	RayToken string
	// SignKey is the lab operator's signing key (SignKeyFile holds it): every node's agent
	// trusts TrustedKey, its public key, so the lab deploys only signed specs, as a
	// production fleet with trusted_keys does. Config.Unsigned leaves trust off.
	SignKey     ed25519.PrivateKey
	SignKeyFile string
	TrustedKey  string
	eng         *client.Client
	proxies     map[string]*faultproxy.Proxy
	// memory is the limit run gives the container it creates (Config.NodeMemory, for nodes).
	memory int64

	// Hub is the lab's Hugging Face hub (labhub.go), an HF_ENDPOINT every node's policy
	// allows; HubToken the token granted its gated repository, which every agent holds
	// as LAB_HF_TOKEN.
	Hub, HubToken string
}

// Proxy is the fault proxy in front of a node's engine (Config.FaultProxies), or nil.
func (l *Lab) Proxy(node string) *faultproxy.Proxy { return l.proxies[node] }

// Close stops the lab's fault proxies (Down removes its containers and networks).
func (l *Lab) Close() {
	for _, p := range l.proxies {
		_ = p.Close()
	}
}

// stateDir is where the lab keeps what must outlive its containers: Temporal's database
// (a real deployment's Temporal persists its state; a restart loses nothing) and the fault
// proxies' sockets.
func stateDir(prefix string) string { return filepath.Join(os.TempDir(), prefix+"-state") }

// MetricsPort is where every lab agent serves /metrics and /healthz, on its management address.
const MetricsPort = 9464

// nodeBarrierDir is where a node's agent finds its barrier files (internal/barrier).
const nodeBarrierDir = "/run/tpdeploy-barrier"

// BarrierDir is the host directory of a node's barrier files: barrier.Hold(dir, activity)
// holds that activity on that node's agent before it runs, until barrier.Release.
func (l *Lab) BarrierDir(node string) string {
	return filepath.Join(stateDir(l.Prefix), "barrier-"+node)
}

// RestartTemporal restarts the lab's Temporal server (its database persists) and waits
// until it answers again.
func (l *Lab) RestartTemporal(ctx context.Context) error {
	if _, err := l.eng.ContainerRestart(ctx, l.Prefix+"-temporal", client.ContainerRestartOptions{}); err != nil {
		return fmt.Errorf("restart temporal: %w", err)
	}
	return waitTCP(ctx, l.Temporal, 60*time.Second)
}

// Node is one simulated GPU node.
type Node struct {
	Name      string // spec name: node-a, node-b, ...
	Container string // container name: PREFIX-node-a
	Mgmt      netip.Addr
	Fast      netip.Addr // pair and spark
	Ext       netip.Addr // head only
	Fast2     netip.Addr // TopologySpark only
	// Addrs is the node's address on every lab network it joins, by network name (mgmt,
	// ext, fast, fast2, link-ab, ...): on a triangle or ring4 its addresses per cable.
	Addrs map[string]netip.Addr
	// HCAs are the node's simulated RoCE HCAs, each on one network (spark, triangle, ring4).
	HCAs []HCA
}

// Addr is the node's address on a lab network ("mgmt", "ext", "fast", "link-ab"); invalid
// if none.
func (n Node) Addr(network string) netip.Addr {
	if a, ok := n.Addrs[network]; ok {
		return a
	}
	switch network {
	case "mgmt":
		return n.Mgmt
	case "fast":
		return n.Fast
	case "ext":
		return n.Ext
	case "fast2":
		return n.Fast2
	}
	return netip.Addr{}
}

// NodeName is the spec name of the i-th node.
func NodeName(i int) string { return fmt.Sprintf("node-%c", 'a'+i) }

func subnet(second, index int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(second), byte(index), 0}), 24)
}

func host(p netip.Prefix, last int) netip.Addr {
	b := p.Addr().As4()
	b[3] = byte(last)
	return netip.AddrFrom4(b)
}

// Up builds the images if stale and starts a lab. On failure it removes what it made.
// Without temporalBin the lab has no Temporal server (the agents wait for one): enough
// for driving the simulator by hand, as the seed's script did.
func Up(ctx context.Context, eng *client.Client, temporalBin string, cfg Config) (*Lab, error) {
	topo, err := topologyOf(cfg.Topology)
	if err != nil {
		return nil, err
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = topo.nodes
	}
	if topo.fixed && cfg.Nodes != topo.nodes {
		return nil, fmt.Errorf("lab: topology %s has %d nodes, not %d", topo.name, topo.nodes, cfg.Nodes)
	}
	if cfg.Nodes < 1 || cfg.Nodes > 20 {
		return nil, fmt.Errorf("lab: %d nodes; 1 to 20 supported", cfg.Nodes)
	}
	if cfg.Prefix == "" {
		return nil, errors.New("lab: a prefix is required")
	}
	if cfg.Release == "" {
		cfg.Release = DefaultRelease
	}
	rel, ok := ReleaseNamed(cfg.Release)
	if !ok {
		return nil, fmt.Errorf("lab: no modelled release %q (Releases)", cfg.Release)
	}
	if err := BuildImages(ctx, eng, temporalBin); err != nil {
		return nil, err
	}
	_ = Down(ctx, eng, cfg.Prefix)
	l := &Lab{Prefix: cfg.Prefix, Release: rel, Image: rel.Image(), eng: eng, Topology: cfg.Topology, APIKey: "sk-lab-" + randomHex(16), RayToken: randomHex(16)}
	if err := l.networks(ctx, topo, cfg.Nodes, cfg.Index); err != nil {
		_ = Down(ctx, eng, cfg.Prefix)
		return nil, err
	}
	if err := l.start(ctx, cfg, temporalBin != ""); err != nil {
		_ = Down(ctx, eng, cfg.Prefix)
		return nil, err
	}
	return l, nil
}

// networks creates the topology's networks, searching for free subnets when index is 0.
func (l *Lab) networks(ctx context.Context, topo topology, nodes, index int) error {
	first, last := index, index
	if index == 0 {
		first, last = 1, 250
	}
	var err error
	for i := first; i <= last; i++ {
		l.Nets, l.Cables = topo.build(nodes, i)
		for _, n := range l.Nets {
			switch n.Name {
			case "mgmt":
				l.Mgmt = n.Subnet
			case "ext":
				l.Ext = n.Subnet
			case "fast":
				l.Fast = n.Subnet
			case "fast2":
				l.Fast2 = n.Subnet
			case "ctl":
				l.Ctl = n.Subnet
			}
		}
		if err = l.createNetworks(ctx); err == nil {
			return nil
		}
		l.removeNetworks(ctx)
		if !strings.Contains(err.Error(), "overlap") {
			return err
		}
	}
	return fmt.Errorf("lab: no free subnets: %w", err)
}

func (l *Lab) createNetworks(ctx context.Context) error {
	for _, n := range l.Nets {
		opts := map[string]string{}
		if n.MTU != 0 {
			opts["com.docker.network.driver.mtu"] = fmt.Sprint(n.MTU)
		}
		_, err := l.eng.NetworkCreate(ctx, l.Prefix+"-"+n.Name, client.NetworkCreateOptions{
			Driver: "bridge", Internal: n.Internal, Options: opts, Labels: map[string]string{LabelLab: l.Prefix},
			IPAM: &network.IPAM{Config: []network.IPAMConfig{{Subnet: n.Subnet, Gateway: host(n.Subnet, 1)}}},
		})
		if err != nil {
			return fmt.Errorf("network %s-%s (%s): %w", l.Prefix, n.Name, n.Subnet, err)
		}
	}
	return nil
}

func (l *Lab) removeNetworks(ctx context.Context) {
	for _, n := range l.Nets {
		_, _ = l.eng.NetworkRemove(ctx, l.Prefix+"-"+n.Name, client.NetworkRemoveOptions{})
	}
}

func (l *Lab) start(ctx context.Context, cfg Config, withTemporal bool) error {
	tAddr := host(l.Ctl, 254)
	l.Temporal, l.UI = net.JoinHostPort(tAddr.String(), "7233"), "http://"+net.JoinHostPort(tAddr.String(), "8233")
	state := stateDir(l.Prefix)
	if err := os.MkdirAll(state, 0o755); err != nil {
		return fmt.Errorf("lab state: %w", err)
	}
	if err := l.operatorKey(state); err != nil {
		return err
	}
	if withTemporal {
		err := l.run(ctx, l.Prefix+"-temporal", &container.Config{
			Image: TemporalImage, Labels: map[string]string{LabelLab: l.Prefix},
			Cmd: append([]string{"server", "start-dev", "--ip", "0.0.0.0", "--ui-ip", "0.0.0.0", "--log-level", "error",
				"--db-filename", "/data/temporal.db"}, searchattr.DevServerFlags()...),
		}, map[string]netip.Addr{"ctl": tAddr}, nil, state+":/data")
		if err != nil {
			return err
		}
	}
	if err := l.startHub(ctx); err != nil {
		return err
	}
	nodeKeys, err := l.startGate(ctx, cfg.Nodes, state)
	if err != nil {
		return err
	}
	if err := l.startController(ctx); err != nil {
		return err
	}
	for i := 0; i < cfg.Nodes; i++ {
		n := Node{Name: NodeName(i), Container: l.Prefix + "-" + NodeName(i), Addrs: map[string]netip.Addr{}, HCAs: l.hcasOf(i)}
		for _, net := range l.Nets {
			if a, ok := net.addrOf(i); ok {
				n.Addrs[net.Name] = a
			}
		}
		n.Mgmt, n.Ext, n.Fast, n.Fast2 = n.Addrs["mgmt"], n.Addrs["ext"], n.Addrs["fast"], n.Addrs["fast2"]
		nets := n.Addrs
		env := []string{
			"TPDEPLOY_NODE=" + n.Name,
			// Temporal through the gate, with the node's own key (plaintext on the lab's
			// management network; a fleet's gate serves TLS).
			"TEMPORAL_ADDRESS=" + l.Gate, "TEMPORAL_API_KEY=" + nodeKeys[n.Name], "TEMPORAL_TLS=false",
			// Node agents only: the workflows run on the lab's controller (startController),
			// so no node holds credentials that run workflow tasks (docs/security.md).
			"TPDEPLOY_ROLE=agent",
			"TPDEPLOY_CONTAINER_NETWORK=container:" + n.Container, "TPDEPLOY_GPUS=none",
			// This engine, like some real ones, refuses memlock for containers.
			"TPDEPLOY_ULIMITS=",
			// The lab's images are the simulator's; a real node's policy allows vLLM's,
			// and the fleet's router (spec.Router) runs tpdeploy's own.
			"TPDEPLOY_ALLOW_IMAGES=" + strings.Join(append(SimImages(), RouterImage), ","),
			// The simulator's own settings (pacing, faults) are node env like NCCL_DEBUG.
			// HF_ENDPOINT: the lab hub, for specs with model.source: hub (labhub.go).
			"TPDEPLOY_ALLOW_ENV=TPDEPLOY_SIM_*,HF_ENDPOINT",
			"TPDEPLOY_BOOT_ID_FILE=/run/tpdeploy/boot_id", "TPDEPLOY_LOG_LEVEL=info",
			// The lab's nodes share one development machine: the policy's host reserve is a
			// small node's, not the default max(8 GiB, 10 %) of a real one, which the
			// machine's other work would eat into; so is the memory guard's floor.
			"TPDEPLOY_HOST_RESERVE=256MiB", "TPDEPLOY_MEMORY_FLOOR=128MiB",
			// The lab's engine rank is the simulator and a CPU torch process, not a CUDA
			// one: the admission's estimate of it is its own (measured, lab/README.md).
			"TPDEPLOY_ENGINE_RANK_MEMORY=" + labEngineRankMemory,
			// vLLM's API key, for specs with secrets.api_key {env: VLLM_API_KEY}.
			"VLLM_API_KEY=" + l.APIKey,
			// Ray's token, for specs with secrets.ray_token {env: RAY_AUTH_TOKEN}.
			"RAY_AUTH_TOKEN=" + l.RayToken,
			// Every agent exports its metrics on its management address, as on a fleet
			// (a port alone would be loopback's; every interface is refused).
			"TPDEPLOY_METRICS_ADDR=" + netip.AddrPortFrom(n.Mgmt, MetricsPort).String(),
		}
		if !cfg.Unsigned {
			// The lab operator's public key: these agents act only on specs it signed.
			env = append(env, "TPDEPLOY_TRUSTED_KEYS="+l.TrustedKey)
		}
		if i > 0 {
			env = append(env, "TPDEPLOY_LAB_NO_DEFAULT_ROUTE=1")
		}
		env = append(env, l.hubEnv()...)
		if cfg.NodeMemory > 0 && hostCgroupV1() {
			// The node's engines run under the node's own memory cgroup, so its limit is
			// the node's RAM for them too (ContainerOptions.CgroupParent). cgroup v2 forbids
			// it: the node's cgroup holds the agent's processes, and a v2 cgroup with
			// processes cannot hand the memory controller to children.
			env = append(env, "TPDEPLOY_CGROUP_PARENT=self")
		}
		for k, v := range cfg.NodeEnv {
			env = append(env, k+"="+v)
		}
		socket := "/var/run/docker.sock"
		if cfg.FaultProxies {
			socket = filepath.Join(state, n.Name+"-docker.sock")
			p := faultproxy.New("unix:///var/run/docker.sock")
			if err := p.ListenUnix(socket); err != nil {
				return fmt.Errorf("fault proxy for %s: %w", n.Name, err)
			}
			if l.proxies == nil {
				l.proxies = map[string]*faultproxy.Proxy{}
			}
			l.proxies[n.Name] = p
		}
		barriers, root := l.BarrierDir(n.Name), l.NodeRoot(n.Name)
		for _, dir := range []string{barriers, root} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("lab directory for %s: %w", n.Name, err)
			}
		}
		// The node's "disk" is a directory of the host, at the same path in the agent's
		// container, so the agent's reads and the engine's binds name the same files.
		env = append(env, barrier.EnvDir+"="+nodeBarrierDir, "TPDEPLOY_HOST_ROOT="+root)
		if len(n.HCAs) > 0 {
			// The node's sysfs (HCAs, link speeds) and device nodes are the lab's (spark.go):
			// the agent reads them, and its containers see them as a real node's do.
			env = append(env, "TPDEPLOY_SYS_ROOT="+filepath.Join(root, "sys"), "TPDEPLOY_CONTAINER_SYSFS="+filepath.Join(root, "sys"))
		}
		l.memory = cfg.NodeMemory
		err := l.run(ctx, n.Container, &container.Config{
			Image: NodeImage, Hostname: n.Name, Env: env, Labels: map[string]string{LabelLab: l.Prefix, "tpdeploy.lab.node": n.Name},
		}, nets, []string{"NET_ADMIN"}, socket+":/var/run/docker.sock", barriers+":"+nodeBarrierDir, root+":"+root)
		l.memory = 0
		if err != nil {
			return err
		}
		l.Nodes = append(l.Nodes, n)
		if len(n.HCAs) > 0 {
			if err := l.sparkSysfs(ctx, n, root); err != nil {
				return err
			}
		}
	}
	if !withTemporal {
		return nil
	}
	return waitTCP(ctx, l.Temporal, 60*time.Second)
}

// gateHost is the last byte of the gate's management address.
const gateHost = 251

// startGate starts the gate the nodes' agents dial Temporal through (cmd gate, in the node
// image): one random API key per node, known to the gate by its SHA-256 only, and handed
// to that node's agent. The controller, the tests and the UI use the frontend directly.
func (l *Lab) startGate(ctx context.Context, nodes int, state string) (map[string]string, error) {
	keys := map[string]string{}
	var file strings.Builder
	file.WriteString("# node and the SHA-256 of its agent's API key (lab.startGate)\n")
	for i := range nodes {
		name := NodeName(i)
		keys[name] = "tpd-node-key-" + randomHex(16)
		fmt.Fprintf(&file, "%s %s\n", name, agentgate.KeyHash(keys[name]))
	}
	if err := os.WriteFile(filepath.Join(state, "gate-keys"), []byte(file.String()), 0o644); err != nil {
		return nil, fmt.Errorf("gate keys: %w", err)
	}
	addr := host(l.Mgmt, gateHost)
	l.Gate = net.JoinHostPort(addr.String(), "7233")
	err := l.run(ctx, l.Prefix+"-gate", &container.Config{
		Image: NodeImage, Hostname: "gate", Labels: map[string]string{LabelLab: l.Prefix}, Entrypoint: []string{"/gate"},
		Cmd: []string{"--listen", l.Gate, "--upstream", l.Temporal, "--keys", "/data/gate-keys", "--log-level", "warn"},
	}, map[string]netip.Addr{"mgmt": addr, "ctl": host(l.Ctl, gateHost)}, nil, state+":/data:ro")
	return keys, err
}

// ControllerHost is the last byte of the controller's address on each network it joins.
const ControllerHost = 252

// startController starts the lab's controller (the worker binary with --role controller,
// in the node image, under the same init): the workflows and the operations activities,
// on the operator's side of the fleet. It joins the management network and every network
// all nodes share (fast, fast2), as an operator's host on the cluster's network would:
// its checks of a cluster without vLLM's API key dial the head's planned address, which
// lies on one of those (on a triangle or ring, the management network). No Docker socket,
// no node.
func (l *Lab) startController(ctx context.Context) error {
	l.Controller = l.Prefix + "-controller"
	nets := map[string]netip.Addr{}
	for _, n := range l.Nets {
		if n.Members == nil {
			nets[n.Name] = host(n.Subnet, ControllerHost)
		}
	}
	nets["ctl"] = host(l.Ctl, ControllerHost)
	l.ControllerMgmt = nets["mgmt"]
	env := []string{"TPDEPLOY_ROLE=controller", "TEMPORAL_ADDRESS=" + l.Temporal,
		// The workflows' metrics (deploys, steps, time to serving) are the controller's now.
		"TPDEPLOY_METRICS_ADDR=" + netip.AddrPortFrom(l.ControllerMgmt, MetricsPort).String()}
	return l.run(ctx, l.Controller, &container.Config{
		Image: NodeImage, Hostname: "controller", Env: env, Labels: map[string]string{LabelLab: l.Prefix, "tpdeploy.lab.controller": "true"},
	}, nets, nil)
}

// labEngineRankMemory is the lab's engine_rank_memory: what one of its engine ranks
// takes besides weights and KV cache (the simulator, a Ray head's, and the CPU torch
// process each rank runs), measured in the lab (lab/README.md).
const labEngineRankMemory = "192MiB"

// hostCgroupV1 says the Docker host runs cgroup v1 (no unified hierarchy at the root).
func hostCgroupV1() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err != nil
}

// run creates a container attached to the lab networks named in nets (first the
// management network, then the others in the topology's order, so interface names are
// predictable: eth0 mgmt, then ext, then fast or the cables) and starts it.
func (l *Lab) run(ctx context.Context, name string, cfg *container.Config, nets map[string]netip.Addr, caps []string, binds ...string) error {
	var order []string
	for _, n := range l.Nets {
		order = append(order, n.Name)
	}
	ep := func(n string) *network.EndpointSettings {
		return &network.EndpointSettings{IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: nets[n]}}
	}
	// The first network it joins (mgmt, or ctl for Temporal) is the one it is created on.
	first := ""
	for _, n := range order {
		if _, ok := nets[n]; ok && first == "" {
			first = n
		}
	}
	if first == "" {
		return fmt.Errorf("create %s: no lab network", name)
	}
	created, err := l.eng.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name, Config: cfg,
		HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode(l.Prefix + "-" + first), Binds: binds, CapAdd: caps,
			Resources: container.Resources{Memory: l.memory}},
		NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			l.Prefix + "-" + first: ep(first),
		}},
	})
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	for _, n := range order {
		if _, ok := nets[n]; !ok || n == first {
			continue
		}
		if _, err := l.eng.NetworkConnect(ctx, l.Prefix+"-"+n, client.NetworkConnectOptions{Container: created.ID, EndpointConfig: ep(n)}); err != nil {
			return fmt.Errorf("connect %s to %s: %w", name, n, err)
		}
	}
	if _, err := l.eng.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	return nil
}

func waitTCP(ctx context.Context, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("lab: %s not answering after %s: %w", addr, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Node returns the named node.
func (l *Lab) Node(name string) (Node, bool) {
	for _, n := range l.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// Cut disconnects a node from a lab network ("fast", "ext", "mgmt", "link-ab"): its interface
// disappears, as when a cable is pulled.
func (l *Lab) Cut(ctx context.Context, node, net string) error {
	n, ok := l.Node(node)
	if !ok {
		return fmt.Errorf("lab: no node %s", node)
	}
	_, err := l.eng.NetworkDisconnect(ctx, l.Prefix+"-"+net, client.NetworkDisconnectOptions{Container: n.Container, Force: true})
	return err
}

// Restore reconnects a node to a lab network with its old address.
func (l *Lab) Restore(ctx context.Context, node, net string) error {
	n, ok := l.Node(node)
	if !ok {
		return fmt.Errorf("lab: no node %s", node)
	}
	addr := n.Addr(net)
	_, err := l.eng.NetworkConnect(ctx, l.Prefix+"-"+net, client.NetworkConnectOptions{Container: n.Container,
		EndpointConfig: &network.EndpointSettings{IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr}}})
	return err
}

// Down removes everything a lab made: the containers joined to its nodes' network
// namespaces (Ray, vLLM), the nodes, Temporal, and the networks. A lab that is not there
// is fine.
func Down(ctx context.Context, eng *client.Client, prefix string) error {
	f := client.Filters{}
	f.Add("label", LabelLab+"="+prefix)
	labs, err := eng.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return fmt.Errorf("lab down: %w", err)
	}
	owners := map[string]bool{}
	for _, c := range labs.Items {
		owners[c.ID] = true
		for _, n := range c.Names {
			owners[strings.TrimPrefix(n, "/")] = true
		}
	}
	all, err := eng.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return fmt.Errorf("lab down: %w", err)
	}
	var errs []error
	remove := func(id string) {
		_, err := eng.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	for _, c := range all.Items {
		mode := c.HostConfig.NetworkMode
		if owner, ok := strings.CutPrefix(mode, "container:"); ok && owners[owner] {
			remove(c.ID)
		}
	}
	for _, c := range labs.Items {
		remove(c.ID)
	}
	if err := os.RemoveAll(stateDir(prefix)); err != nil {
		errs = append(errs, err)
	}
	nets, err := eng.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		errs = append(errs, err)
	} else {
		for _, n := range nets.Items {
			// A container removal still in progress keeps its endpoint for a moment.
			for try := 0; ; try++ {
				_, err := eng.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{})
				if err == nil || cerrdefs.IsNotFound(err) {
					break
				}
				if try == 20 {
					errs = append(errs, err)
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
		}
	}
	return errors.Join(errs...)
}

// Iface is the name of a node's interface on a lab network ("mgmt", "ext", "fast", "link-ab"), read
// with netlink from the node container's network namespace (Docker does not say, and the
// names differ per node, as on real machines).
func (l *Lab) Iface(ctx context.Context, node, network string) (string, error) {
	n, ok := l.Node(node)
	if !ok {
		return "", fmt.Errorf("lab: no node %s", node)
	}
	want := n.Addr(network)
	info, err := l.eng.ContainerInspect(ctx, n.Container, client.ContainerInspectOptions{})
	if err != nil {
		return "", err
	}
	h, err := netlinkHandle(info.Container.State.Pid)
	if err != nil {
		return "", err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return "", err
	}
	for _, link := range links {
		addrs, _ := h.AddrList(link, 2 /* AF_INET */)
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && ip == want {
				return link.Attrs().Name, nil
			}
		}
	}
	return "", fmt.Errorf("lab: %s has no interface with %s", node, want)
}
