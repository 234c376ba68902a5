package netplan

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/failure"
	"github.com/tpdeploy/tpdeploy/internal/release"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Error is a planning failure; Type is what the workflow reports it as.
type Error struct {
	Type string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

var linkLocal = netip.MustParsePrefix("169.254.0.0/16")

// member is one node's foothold in a candidate subnet.
type member struct {
	node string
	link Link
	addr netip.Prefix
	rdma []RDMADevice
}

// candidate is a subnet under consideration, with what the static checks found.
type candidate struct {
	subnet    netip.Prefix
	members   []member // in spec node order; complete only when reject is empty
	reject    string
	preferred bool // explicitly preferred by CIDR or interface glob
	rtt       time.Duration
}

// prefs gathers the operator's wishes from the spec.
type prefs struct {
	preferCIDRs  []netip.Prefix
	excludeCIDRs []netip.Prefix
	preferIfaces []string
	excludeIface []string
	nodeIfaces   map[string][]string
	// keep, when valid, is the only subnet allowed (ChooseKeeping).
	keep netip.Prefix
	// subnet and pins are network.subnet and nodes[].address: the plan's addresses must be
	// in the one and equal the others (the agents refuse any other when they are signed).
	subnet netip.Prefix
	pins   map[string]netip.Addr
}

func prefsOf(c spec.Cluster) prefs {
	p := prefs{
		preferCIDRs:  spec.ParseCIDRs(c.Network.PreferCIDRs),
		excludeCIDRs: spec.ParseCIDRs(c.Network.ExcludeCIDRs),
		preferIfaces: c.Network.PreferInterfaces,
		excludeIface: c.Network.ExcludeInterfaces,
		nodeIfaces:   map[string][]string{},
		subnet:       c.Network.PinnedSubnet(),
		pins:         map[string]netip.Addr{},
	}
	for _, n := range c.Nodes {
		p.nodeIfaces[n.Name] = n.Interfaces
		if a := n.PinnedAddress(); a.IsValid() {
			p.pins[n.Name] = a
		}
	}
	return p
}

func globMatch(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// preferIndex is the position of the first preferred CIDR containing s, or -1.
func (p prefs) preferIndex(s netip.Prefix) int {
	for i, pc := range p.preferCIDRs {
		if pc.Bits() <= s.Bits() && pc.Contains(s.Addr()) {
			return i
		}
	}
	return -1
}

func (p prefs) excluded(s netip.Prefix) bool {
	for _, ex := range p.excludeCIDRs {
		if ex.Bits() <= s.Bits() && ex.Contains(s.Addr()) {
			return true
		}
	}
	return false
}

func (p prefs) interfacePreferred(node, iface string) bool {
	return globMatch(p.preferIfaces, iface) || globMatch(p.nodeIfaces[node], iface)
}

// isDockerBridge reports links Docker creates for its own networks; NCCL does not skip
// br-* by itself, and an address there is only reachable on this host.
func isDockerBridge(l Link) bool {
	return l.Name == "docker0" || strings.HasPrefix(l.Name, "br-")
}

// candidates lists every IPv4 subnet any node has an address in, with the static verdict
// (before reachability). Sorted by subnet for determinism.
func candidates(c spec.Cluster, probes []NodeProbe, p prefs) []candidate {
	byNode := map[string]NodeProbe{}
	for _, pr := range probes {
		byNode[pr.Node] = pr
	}
	seen := map[netip.Prefix]bool{}
	var subnets []netip.Prefix
	for _, pr := range probes {
		for _, l := range pr.Links {
			for _, a := range l.Addrs {
				if !a.Addr().Is4() || l.Loopback || a.Addr().IsLoopback() {
					continue
				}
				s := a.Masked()
				if !seen[s] {
					seen[s] = true
					subnets = append(subnets, s)
				}
			}
		}
	}
	if p.keep.IsValid() && !seen[p.keep] {
		subnets = append(subnets, p.keep) // judged, so the decision says why it is gone
	}
	slices.SortFunc(subnets, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	out := make([]candidate, 0, len(subnets))
	for _, s := range subnets {
		out = append(out, judge(c, byNode, s, p))
	}
	return out
}

// judge applies the static checks to one subnet.
func judge(c spec.Cluster, byNode map[string]NodeProbe, s netip.Prefix, p prefs) candidate {
	cand := candidate{subnet: s, preferred: p.preferIndex(s) >= 0}
	if linkLocal.Overlaps(s) {
		cand.reject = "link-local (169.254.0.0/16) addresses are never chosen"
		return cand
	}
	if p.excluded(s) {
		cand.reject = "excluded by network.exclude_cidrs"
		return cand
	}
	if p.subnet.IsValid() && !p.subnet.Overlaps(s) {
		cand.reject = fmt.Sprintf("outside network.subnet %s", p.subnet)
		return cand
	}
	if p.keep.IsValid() && s != p.keep {
		cand.reject = fmt.Sprintf("this deploy planned on %s before it started over, and a restart does not move it to another subnet", p.keep)
		return cand
	}
	owner := map[netip.Addr]string{}
	for _, n := range c.Nodes {
		pr, ok := byNode[n.Name]
		if !ok {
			cand.reject = n.Name + " was not probed"
			return cand
		}
		var usable []member
		var why []string
		for _, l := range pr.Links {
			a, ok := l.Addr(s)
			if !ok {
				continue
			}
			explicit := cand.preferred || p.interfacePreferred(n.Name, l.Name)
			switch {
			case !l.Up:
				why = append(why, fmt.Sprintf("%s on %s is down", a.Addr(), l.Name))
			case globMatch(p.excludeIface, l.Name):
				why = append(why, fmt.Sprintf("%s is excluded by network.exclude_interfaces", l.Name))
			case isDockerBridge(l) && !explicit:
				why = append(why, fmt.Sprintf("%s is a Docker bridge (prefer it explicitly to use it)", l.Name))
			default:
				usable = append(usable, member{node: n.Name, link: l, addr: a, rdma: rdmaOn(pr, l.Name)})
			}
		}
		if pin, ok := p.pins[n.Name]; ok || p.subnet.IsValid() {
			var kept []member
			var have []string
			for _, m := range usable {
				have = append(have, m.addr.Addr().String())
				if (!ok || m.addr.Addr() == pin) && (!p.subnet.IsValid() || p.subnet.Contains(m.addr.Addr())) {
					kept = append(kept, m)
				}
			}
			if len(kept) == 0 && len(usable) > 0 {
				if ok {
					cand.reject = fmt.Sprintf("%s's address in it is %s, not its nodes[].address %s", n.Name, strings.Join(have, ", "), pin)
				} else {
					cand.reject = fmt.Sprintf("%s's address in it (%s) is outside network.subnet %s", n.Name, strings.Join(have, ", "), p.subnet)
				}
				return cand
			}
			usable = kept
		}
		if len(usable) == 0 {
			if len(why) == 0 {
				cand.reject = n.Name + " has no address in it"
			} else {
				cand.reject = n.Name + ": " + strings.Join(why, ", ")
			}
			return cand
		}
		// Several addresses of one node in the subnet: the operator's interface hint wins,
		// then the faster link, then the name.
		slices.SortStableFunc(usable, func(a, b member) int {
			ah, bh := p.interfacePreferred(n.Name, a.link.Name), p.interfacePreferred(n.Name, b.link.Name)
			if ah != bh {
				if ah {
					return -1
				}
				return 1
			}
			return cmp.Or(cmp.Compare(b.link.SpeedMbps, a.link.SpeedMbps), cmp.Compare(a.link.Name, b.link.Name))
		})
		m := usable[0]
		if other, dup := owner[m.addr.Addr()]; dup {
			cand.reject = fmt.Sprintf("%s and %s both have %s (vLLM refuses nodes sharing an IP)", other, n.Name, m.addr.Addr())
			return cand
		}
		owner[m.addr.Addr()] = n.Name
		cand.members = append(cand.members, m)
	}
	return cand
}

func rdmaOn(p NodeProbe, netdev string) []RDMADevice {
	var out []RDMADevice
	for _, d := range p.RDMA {
		if d.Netdev == netdev && (d.State == "" || strings.EqualFold(d.State, "ACTIVE") || strings.HasSuffix(d.State, "ACTIVE")) {
			out = append(out, d)
		}
	}
	return out
}

// ListenAddrs gives, per node, the addresses worth a reachability test: those in subnets
// that passed the static checks.
func ListenAddrs(c spec.Cluster, probes []NodeProbe) map[string][]netip.Prefix {
	out := map[string][]netip.Prefix{}
	for _, cand := range candidates(c, probes, prefsOf(c)) {
		if cand.reject != "" {
			continue
		}
		for _, m := range cand.members {
			out[m.node] = append(out[m.node], m.addr)
		}
	}
	return out
}

// checkReachable rejects a candidate unless every ordered pair of nodes connected.
func checkReachable(cand *candidate, matrix []PairResult) {
	type key struct{ from, to string }
	results := map[key]PairResult{}
	for _, r := range matrix {
		if r.Subnet == cand.subnet {
			results[key{r.From, r.To}] = r
		}
	}
	var failed []string
	var rtts []time.Duration
	for _, a := range cand.members {
		for _, b := range cand.members {
			if a.node == b.node {
				continue
			}
			r, ok := results[key{a.node, b.node}]
			switch {
			case !ok:
				failed = append(failed, fmt.Sprintf("%s → %s not tested", a.node, b.node))
			case !r.OK:
				failed = append(failed, fmt.Sprintf("%s cannot reach %s at %s (%s)", a.node, b.node, r.Addr, r.Error))
			default:
				rtts = append(rtts, r.RTT)
			}
		}
	}
	if len(failed) > 0 {
		cand.reject = strings.Join(failed, "; ")
		return
	}
	if len(rtts) > 0 {
		slices.Sort(rtts)
		cand.rtt = rtts[len(rtts)/2]
	}
}

// score is the ranking key of a viable subnet; see rank for the order.
type score struct {
	preferIdx  int // index in prefer_cidrs, or len(prefer_cidrs) when not preferred
	ifacePrefs int // nodes whose interface the operator preferred
	rdma       bool
	speed      int // slowest member link, Mb/s (0 unknown)
	mtu        int // smallest member MTU
	notDefault bool
	rtt        time.Duration
}

func scoreOf(cand candidate, p prefs, probes map[string]NodeProbe) score {
	s := score{preferIdx: p.preferIndex(cand.subnet), rdma: true, speed: -1, mtu: -1, notDefault: true, rtt: cand.rtt}
	if s.preferIdx < 0 {
		s.preferIdx = len(p.preferCIDRs)
	}
	for _, m := range cand.members {
		if p.interfacePreferred(m.node, m.link.Name) {
			s.ifacePrefs++
		}
		if len(m.rdma) == 0 {
			s.rdma = false
		}
		if s.speed < 0 || m.link.SpeedMbps < s.speed {
			s.speed = m.link.SpeedMbps
		}
		if s.mtu < 0 || m.link.MTU < s.mtu {
			s.mtu = m.link.MTU
		}
		if dr := probes[m.node].DefaultRoute; dr != nil && dr.Interface == m.link.Name {
			s.notDefault = false
		}
	}
	return s
}

// compareScores orders better first and says why the loser lost, in the order the
// criteria apply: operator's CIDR preference, operator's interface preference, RDMA, link
// speed, MTU, a dedicated link over the default route, RTT, then the subnet itself.
func compareScores(a, b score, sa, sb netip.Prefix) (int, string) {
	switch {
	case a.preferIdx != b.preferIdx:
		return cmp.Compare(a.preferIdx, b.preferIdx), "not first in network.prefer_cidrs"
	case a.ifacePrefs != b.ifacePrefs:
		return cmp.Compare(b.ifacePrefs, a.ifacePrefs), fmt.Sprintf("preferred interfaces on %d nodes < %d", min(a.ifacePrefs, b.ifacePrefs), max(a.ifacePrefs, b.ifacePrefs))
	case a.rdma != b.rdma:
		if a.rdma {
			return -1, "not RDMA-capable on every node"
		}
		return 1, "not RDMA-capable on every node"
	case a.speed != b.speed:
		return cmp.Compare(b.speed, a.speed), fmt.Sprintf("link speed %s < %s", speed(min(a.speed, b.speed)), speed(max(a.speed, b.speed)))
	case a.mtu != b.mtu:
		return cmp.Compare(b.mtu, a.mtu), fmt.Sprintf("MTU %d < %d", min(a.mtu, b.mtu), max(a.mtu, b.mtu))
	case a.notDefault != b.notDefault:
		if a.notDefault {
			return -1, "carries a node's default route (a dedicated interconnect is preferred)"
		}
		return 1, "carries a node's default route (a dedicated interconnect is preferred)"
	case a.rtt != b.rtt && !similarRTT(a.rtt, b.rtt):
		return cmp.Compare(a.rtt, b.rtt), fmt.Sprintf("median RTT %s > %s", max(a.rtt, b.rtt).Round(time.Microsecond), min(a.rtt, b.rtt).Round(time.Microsecond))
	default:
		return cmp.Or(sa.Addr().Compare(sb.Addr()), cmp.Compare(sa.Bits(), sb.Bits())), "tie, broken by address order"
	}
}

// similarRTT treats RTTs within 2x or 100µs of each other as equal: one TCP connect is a
// noisy measurement, and a flapping plan is worse than a slightly slower one.
func similarRTT(a, b time.Duration) bool {
	lo, hi := min(a, b), max(a, b)
	return hi-lo < 100*time.Microsecond || hi < 2*lo
}

func speed(mbps int) string {
	switch {
	case mbps <= 0:
		return "unknown"
	case mbps >= 1000 && mbps%1000 == 0:
		return strconv.Itoa(mbps/1000) + " Gb/s"
	default:
		return strconv.Itoa(mbps) + " Mb/s"
	}
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}

// Choose decides the cluster's subnet from the probes and the reachability matrix and
// derives every node's settings from it.
func Choose(c spec.Cluster, probes []NodeProbe, matrix []PairResult) (Plan, error) {
	return ChooseFor(c, probes, matrix, Options{})
}

// Options refine the choice.
type Options struct {
	// Keep limits the choice to this subnet when valid (ChooseKeeping).
	Keep netip.Prefix
	// Engine is how the image's vLLM release behaves (package release): it decides how
	// the NCCL variables must be given. Nil plans for the legacy Ray executor's copy
	// that overwrites the workers' values, the one form right under every release.
	Engine *release.Model
}

// ChooseKeeping is Choose limited to the subnet keep (when valid): a deploy that starts
// over after a node's network changed plans again on the subnet it had chosen. Interface
// names and addresses in it may differ (a NIC that came back renamed), but a fast link
// that stays down fails the deploy instead of moving tensor-parallel traffic to a network
// a hundred times slower without anyone deciding it.
func ChooseKeeping(c spec.Cluster, probes []NodeProbe, matrix []PairResult, keep netip.Prefix) (Plan, error) {
	return ChooseFor(c, probes, matrix, Options{Keep: keep})
}

// ChooseFor is Choose with options.
func ChooseFor(c spec.Cluster, probes []NodeProbe, matrix []PairResult, o Options) (Plan, error) {
	c = c.WithDefaults()
	if o.Engine != nil {
		c.Executor = o.Engine.Executor
	}
	p := prefsOf(c)
	p.keep = o.Keep
	byNode := map[string]NodeProbe{}
	for _, pr := range probes {
		byNode[pr.Node] = pr
	}
	cands := candidates(c, probes, p)
	var viable []int
	for i := range cands {
		if cands[i].reject == "" {
			checkReachable(&cands[i], matrix)
		}
		if cands[i].reject == "" {
			viable = append(viable, i)
		}
	}
	scores := map[int]score{}
	for _, i := range viable {
		scores[i] = scoreOf(cands[i], p, byNode)
	}
	slices.SortStableFunc(viable, func(i, j int) int {
		r, _ := compareScores(scores[i], scores[j], cands[i].subnet, cands[j].subnet)
		return r
	})
	plan := Plan{Head: c.Head().Name}
	for rank, i := range viable {
		cand := Candidate{Subnet: cands[i].subnet, Verdict: Viable, Rank: rank + 1}
		if rank == 0 {
			cand.Verdict = Chosen
			cand.Reason = chosenReason(cands[i], scores[i], len(c.Nodes))
		} else {
			_, why := compareScores(scores[viable[0]], scores[i], cands[viable[0]].subnet, cands[i].subnet)
			cand.Reason = fmt.Sprintf("reachable, ranked %s: %s", ordinal(rank+1), why)
		}
		plan.Decision = append(plan.Decision, cand)
	}
	for _, cd := range cands {
		if cd.reject != "" {
			plan.Decision = append(plan.Decision, Candidate{Subnet: cd.subnet, Verdict: Rejected, Reason: "rejected: " + cd.reject})
		}
	}
	if len(viable) == 0 {
		return plan, &Error{Type: failure.NoViableSubnet, Msg: noViableMessage(c, probes, plan.Decision)}
	}
	best := cands[viable[0]]
	plan.Subnet = best.subnet
	mp := c.Executor == spec.ExecutorMP
	for _, m := range best.members {
		if m.node == plan.Head && !mp {
			plan.RayAddress = netip.AddrPortFrom(m.addr.Addr(), uint16(c.Ports.Ray)).String()
		}
	}
	plan.Rails = rails(c, byNode, cands)
	railHCAs := map[string][]RDMADevice{}
	for _, r := range plan.UsedRails() {
		for _, m := range r.Members {
			railHCAs[m.Node] = append(railHCAs[m.Node], m.Device)
		}
	}
	nccl := ""
	if o.Engine != nil {
		nccl = o.Engine.NCCL
	}
	fabric, err := dataPlaneFabric(c, byNode, matrix, probes, railHCAs, nccl)
	if err != nil {
		return plan, err
	}
	if fabric != nil && fabric.Used && len(railHCAs) == 0 {
		addrs, gpus := map[string]netip.Addr{}, map[string]int{}
		for _, m := range best.members {
			addrs[m.node] = m.addr.Addr()
		}
		for _, n := range c.Nodes {
			gpus[n.Name] = cmp.Or(n.GPUs, byNode[n.Name].GPUs)
		}
		var pe *Error
		if err := placeForExecutor(c, o.Engine, fabric, addrs, gpus); errors.As(err, &pe) {
			if c.DataPlane != spec.DataPlaneSkip && c.DataPlane != spec.DataPlaneWarn {
				return plan, err
			}
			// warn and skip serve on sockets rather than on a ring NCCL cannot connect.
			fabric.Used, fabric.Placement = false, strings.SplitN(pe.Msg, "\n", 2)[0]
		}
	}
	if fabric != nil {
		plan.Fabric = fabric
		plan.Warnings = append(plan.Warnings, fabricWarnings(c, *fabric)...)
		if fabric.Used && len(railHCAs) == 0 {
			railHCAs = fabricHCAs(fabric.Graph)
		}
	}
	for i := range best.members {
		best.members[i].rdma = railHCAs[best.members[i].node]
	}
	plan.DataPlane = c.DataPlane
	if plan.DataPlane == "" {
		plan.DataPlane = spec.DataPlaneSkip
		if len(railHCAs) > 0 {
			plan.DataPlane = spec.DataPlaneRequire
		}
	}
	if len(railHCAs) > 0 {
		disabling := rdmaDisablingEnv(c)
		if len(disabling) > 0 && plan.DataPlane == spec.DataPlaneRequire {
			return plan, &Error{Type: failure.DataPlaneDegraded, Msg: fmt.Sprintf("the plan has RDMA on %d rail(s), but %s; remove the setting, or set data_plane: warn to serve over sockets anyway",
				len(plan.UsedRails()), strings.Join(disabling, "; "))}
		}
		for _, d := range disabling {
			plan.Warnings = append(plan.Warnings, d+" (data_plane: "+plan.DataPlane+")")
		}
	}
	overwrites := o.Engine == nil || o.Engine.EnvCopy == release.EnvCopyPrefixesOverwrite
	switch {
	case mp:
		// Each node's vLLM reads its own container's environment; nothing copies the
		// head's to the others, so every node gets exactly its own interface.
		plan.NCCL = NCCLEnv{Form: NCCLPerNode, Reason: "executor mp: every node's vLLM reads its own environment and nothing copies the head's, so each node names exactly its own interface"}
	case !overwrites && o.Engine.EnvCopy == release.EnvCopyAllSetdefault:
		plan.NCCL = NCCLEnv{Form: NCCLPerNode, Reason: "vLLM " + o.Engine.VLLM + "'s Ray executor (V2) fills the driver's variables in with setdefault and keeps each worker's own, so each node names exactly its own interface"}
	case !overwrites:
		plan.NCCL = NCCLEnv{Form: NCCLPerNode, Reason: "vLLM " + o.Engine.VLLM + "'s Ray executor copies only vLLM's own VLLM_* variables to its workers, so each node names exactly its own interface"}
	default:
		plan.NCCL = ncclForm(best.members, byNode)
	}
	for i, m := range best.members {
		n := c.Nodes[i]
		// The spec's count, when it gives one, is the operator's (fewer GPUs than the node
		// has, say); else what the probe detected. Ray's --num-gpus uses the same number.
		gpus := n.GPUs
		if gpus == 0 {
			gpus = byNode[n.Name].GPUs
		}
		plan.GPUs += gpus
		plan.Nodes = append(plan.Nodes, NodePlan{
			Name: n.Name, Role: n.Role, Address: m.addr.Addr(), Interface: m.link.Name, GPUs: gpus, RDMA: m.rdma,
			Env: nodeEnv(n, m, plan.RayAddress, plan.NCCL, best.members, plan.Fabric),
		})
	}
	if overwrites && !mp {
		plan.Warnings = append(plan.Warnings, copiedEnvWarnings(c)...)
	}
	if err := gpuIndicesPresent(c, byNode); err != nil {
		return plan, err
	}
	if need := c.WorldSize(); plan.GPUs < need {
		var have []string
		for _, np := range plan.Nodes {
			have = append(have, fmt.Sprintf("%s: %d (%s)", np.Name, np.GPUs, byNode[np.Name].GPUSource))
		}
		return plan, &Error{Type: failure.InsufficientGPUs, Msg: fmt.Sprintf("parallel: tensor %d x pipeline %d = %d GPUs, nodes provide %d (%s)",
			c.Parallel.Tensor, c.Parallel.Pipeline, need, plan.GPUs, strings.Join(have, ", "))}
	}
	return plan, nil
}

// nodeEnv is every variable a node's containers need so that each layer uses the plan's
// address and interface. Interface names are exact (NCCL's "=" form): as prefixes,
// enp1s0f1 would also match enp1s0f1np1. GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME and
// VLLM_HOST_IP are always per node: Gloo wants every name it is given to exist (a list
// fails on every node, measured), and vLLM copies none of the three to its workers.
func nodeEnv(n spec.Node, m member, rayAddress string, form NCCLEnv, members []member, fabric *Fabric) map[string]string {
	env := map[string]string{}
	for k, v := range n.Env {
		env[k] = v
	}
	env["VLLM_HOST_IP"] = m.addr.Addr().String()
	env["GLOO_SOCKET_IFNAME"] = m.link.Name
	env["TP_SOCKET_IFNAME"] = m.link.Name
	if rayAddress != "" {
		env["RAY_ADDRESS"] = rayAddress
	}
	ifaces, hcas := []string{m.link.Name}, hcaNames(m.rdma)
	if form.Form == NCCLClusterWide {
		ifaces, hcas = nil, nil
		for _, o := range members {
			ifaces = appendNew(ifaces, o.link.Name)
			for _, h := range hcaNames(o.rdma) {
				hcas = appendNew(hcas, h)
			}
		}
	}
	env["NCCL_SOCKET_IFNAME"] = "=" + strings.Join(ifaces, ",")
	if len(hcas) > 0 {
		env["NCCL_IB_HCA"] = "=" + strings.Join(hcas, ",")
	}
	// Links the plan does not use (data_plane warn or skip on a fabric NCCL cannot use, or a
	// layout it cannot carry): with NCCL_IB_HCA unset NCCL's IB plugin would open every
	// HCA, and its queue pairs would cross ports with no cable to the peer; NCCL runs over
	// sockets on the bootstrap subnet, as the plan says. The operator's own choice stands.
	_, ownIB := n.Env["NCCL_IB_DISABLE"]
	_, ownNet := n.Env["NCCL_NET"]
	if fabric != nil && !fabric.Used && len(hcas) == 0 && !ownIB && !ownNet {
		env["NCCL_IB_DISABLE"] = "1"
	}
	// The operator's own NCCL_ALGO stands (fabricWarnings says when it is not the ring).
	if _, own := n.Env["NCCL_ALGO"]; fabric != nil && fabric.Used && fabric.Algo != "" && !own {
		env["NCCL_ALGO"] = fabric.Algo
	}
	// NCCL ≥ 2.30.7 on a fabric whose node talks to peers on different ports: each
	// connection moves to the HCA on the peer's subnet. The operator's own values stand, as
	// the signed spec's must (fabricWarnings names a different one).
	if fabric != nil && fabric.Used && fabric.SubnetPrefixLen > 0 && len(hcas) > 0 {
		if _, own := n.Env[EnvSubnetRouting]; !own {
			env[EnvSubnetRouting] = "1"
		}
		if _, own := n.Env[EnvSubnetPrefixLen]; !own {
			env[EnvSubnetPrefixLen] = strconv.Itoa(fabric.SubnetPrefixLen)
		}
	}
	return env
}

func hcaNames(devs []RDMADevice) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.HCA())
	}
	return out
}

// rails lists every subnet on which each node has an ACTIVE HCA port whose netdev holds an
// IPv4 address there: used when the subnet passed the static checks and the reachability
// test (NCCL's RoCE v2 GID is the netdev's IPv4 address, so the HCAs must reach each other
// over it), left out with the reason otherwise. On a DGX Spark pair each half of the CX-7
// port is its own HCA, netdev and subnet: both are rails, and NCCL reaches the link's
// speed only with both in NCCL_IB_HCA (upstream.md §9).
func rails(c spec.Cluster, byNode map[string]NodeProbe, cands []candidate) []Rail {
	var out []Rail
	for _, cand := range cands {
		var members []RailMember
		var missing []string
		for _, n := range c.Nodes {
			pr := byNode[n.Name]
			found := false
			for _, l := range pr.Links {
				a, ok := l.Addr(cand.subnet)
				if !ok || !a.Addr().Is4() {
					continue
				}
				for _, d := range rdmaOn(pr, l.Name) {
					members = append(members, RailMember{Node: n.Name, Device: d, Addr: a.Addr()})
					found = true
				}
			}
			if !found {
				missing = append(missing, n.Name)
			}
		}
		if len(members) == 0 {
			continue // no HCA anywhere on it: not a rail, nothing to say
		}
		r := Rail{Subnet: cand.subnet, Members: members}
		var hcas []string
		for _, m := range members {
			hcas = append(hcas, fmt.Sprintf("%s %s on %s", m.Node, m.Device.HCA(), m.Device.Netdev))
		}
		switch {
		case len(missing) > 0:
			r.Reason = "left out: " + strings.Join(missing, ", ") + " has no ACTIVE HCA port with an address in it (" + strings.Join(hcas, ", ") + ")"
		case cand.reject != "":
			r.Reason = "left out: " + cand.reject
		default:
			r.Used = true
			r.Reason = "used: " + strings.Join(hcas, ", ") + "; reachable between all nodes"
		}
		out = append(out, r)
	}
	return out
}

// rdmaDisablingEnv names node env settings that silently turn NCCL's RDMA transport off.
func rdmaDisablingEnv(c spec.Cluster) []string {
	var out []string
	for _, n := range c.Nodes {
		if v, ok := n.Env["NCCL_IB_DISABLE"]; ok && strings.TrimSpace(v) != "" && strings.TrimSpace(v) != "0" {
			out = append(out, fmt.Sprintf("%s's env sets NCCL_IB_DISABLE=%s, which makes NCCL use sockets", n.Name, v))
		}
		if v, ok := n.Env["NCCL_NET"]; ok && strings.EqualFold(strings.TrimSpace(v), "Socket") {
			out = append(out, fmt.Sprintf("%s's env sets NCCL_NET=%s, which makes NCCL use sockets", n.Name, v))
		}
	}
	return out
}

func appendNew(list []string, v string) []string {
	if slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}

// ncclForm decides whether one value of NCCL_SOCKET_IFNAME (and NCCL_IB_HCA) is right on
// every node. vLLM's Ray executor (since vllm PR #34383) copies the driver's NCCL_* onto
// every worker, overwriting the worker's own; the exact-name list of every node's chosen
// interface survives that copy, measured on NCCL 2.28 (upstream.md §6), but only when it
// selects exactly the chosen interface on each node: NCCL's socket transport uses every
// interface that matches, and ranks that see different counts fail. Where the list would
// select another interface too, each node keeps its own value and the copy is stopped.
func ncclForm(members []member, probes map[string]NodeProbe) NCCLEnv {
	var ifaces, hcas []string
	for _, m := range members {
		ifaces = appendNew(ifaces, m.link.Name)
		for _, h := range hcaNames(m.rdma) {
			hcas = appendNew(hcas, h)
		}
	}
	var clashes []string
	for _, m := range members {
		for _, l := range probes[m.node].Links {
			// NCCL considers interfaces that have an address; one without cannot match.
			if l.Name != m.link.Name && len(l.Addrs) > 0 && slices.Contains(ifaces, l.Name) {
				clashes = append(clashes, fmt.Sprintf("%s also has an interface named %s", m.node, l.Name))
			}
		}
		own := hcaNames(m.rdma)
		for _, d := range probes[m.node].RDMA {
			h := d.HCA()
			if !slices.Contains(own, h) && slices.Contains(hcas, h) {
				clashes = append(clashes, fmt.Sprintf("%s also has the HCA %s", m.node, h))
			}
		}
	}
	if len(clashes) > 0 {
		no := []string{"NCCL_SOCKET_IFNAME"}
		if len(hcas) > 0 {
			no = append(no, "NCCL_IB_HCA")
		}
		return NCCLEnv{Form: NCCLPerNode, NoCarryOver: no,
			Reason: "one list of every node's interface would select more than one interface on a node (" + strings.Join(clashes, "; ") +
				"), so each node gets its own value and vLLM is told not to copy them from the driver (ray_non_carry_over_env_vars.json)"}
	}
	reason := fmt.Sprintf("=%s selects exactly the chosen interface on every node, so it survives vLLM copying the driver's NCCL_* to its workers", strings.Join(ifaces, ","))
	if len(ifaces) == 1 {
		reason = fmt.Sprintf("every node uses an interface named %s, so one value is right everywhere (and survives vLLM copying the driver's NCCL_*)", ifaces[0])
	}
	return NCCLEnv{Form: NCCLClusterWide, Reason: reason}
}

// copiedEnvWarnings names NCCL_* (and the other copied prefixes') values that differ
// between a worker's env and the head's: newer vLLM replaces the worker's with the head's.
func copiedEnvWarnings(c spec.Cluster) []string {
	head := c.Head()
	var out []string
	for _, n := range c.Nodes {
		if n.Name == head.Name {
			continue
		}
		for _, k := range sortedEnvKeys(n.Env) {
			if !copiedByVLLM(k) {
				continue
			}
			if hv, ok := head.Env[k]; !ok || hv != n.Env[k] {
				out = append(out, fmt.Sprintf("%s sets %s=%q but the head %s; vLLM's legacy Ray executor (v0.17 to the V2 default in v0.21, or VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0) copies the head's value to every worker, so %s will not see its own",
					n.Name, k, n.Env[k], describeHeadValue(head.Env, k), n.Name))
			}
		}
	}
	return out
}

// copiedByVLLM says whether vLLM's Ray executor copies a variable from the driver to its
// workers by prefix (vllm/ray/ray_env.py, DEFAULT_ENV_VAR_PREFIXES).
func copiedByVLLM(k string) bool {
	for _, p := range []string{"VLLM_", "LMCACHE_", "NCCL_", "UCX_", "HF_", "HUGGING_FACE_"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

func describeHeadValue(env map[string]string, k string) string {
	if v, ok := env[k]; ok {
		return fmt.Sprintf("sets %q", v)
	}
	return "does not set it"
}

func sortedEnvKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func chosenReason(cand candidate, s score, nodes int) string {
	parts := []string{fmt.Sprintf("reachable between all %d nodes in both directions", nodes)}
	if s.preferIdx == 0 && cand.preferred {
		parts = append(parts, "preferred by network.prefer_cidrs")
	}
	if s.rdma {
		parts = append(parts, "RDMA-capable")
	}
	if s.speed > 0 {
		parts = append(parts, "link speed "+speed(s.speed))
	}
	parts = append(parts, fmt.Sprintf("MTU %d", s.mtu))
	return "chosen: " + strings.Join(parts, ", ")
}

func noViableMessage(c spec.Cluster, probes []NodeProbe, decision []Candidate) string {
	var b strings.Builder
	b.WriteString("no subnet is shared and reachable by every node")
	for _, d := range decision {
		fmt.Fprintf(&b, "\n  %s %s", d.Subnet, d.Reason)
	}
	b.WriteString("\nwhat each node has:")
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "\n  %s:", n.Name)
		for _, pr := range probes {
			if pr.Node != n.Name {
				continue
			}
			for _, l := range pr.Links {
				if l.Loopback || len(l.Addrs) == 0 {
					continue
				}
				state := "up"
				if !l.Up {
					state = "down"
				}
				fmt.Fprintf(&b, " %s %s (%s, mtu %d);", l.Name, joinPrefixes(l.Addrs), state, l.MTU)
			}
		}
	}
	return b.String()
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// RanksOn is how many of the deploy's ranks the node holds: the plan's GPUs, taken node by
// node in the spec's order (Ray's bundles and vLLM's --node-rank both fill them so) until
// tensor × pipeline are placed; without a plan, the spec's count or one per node.
func RanksOn(c spec.Cluster, plan *Plan, node string) int {
	left := c.WorldSize()
	for _, n := range c.Nodes {
		gpus := max(n.GPUs, 1)
		if plan != nil {
			if np, ok := plan.Node(n.Name); ok && np.GPUs > 0 {
				gpus = np.GPUs
			}
		}
		take := min(gpus, left)
		left -= take
		if n.Name == node {
			return take
		}
	}
	return 0
}

// gpuIndicesPresent refuses GPU indices (nodes[].gpus: [0, 1]) a node does not have, by
// what its agent detected (the driver's GPUs are numbered 0 to count-1, as nvidia-smi and
// NVIDIA_VISIBLE_DEVICES number them). A node whose GPUs were not detected has only the
// spec's word, which is taken.
func gpuIndicesPresent(c spec.Cluster, byNode map[string]NodeProbe) error {
	for i, n := range c.Nodes {
		pr := byNode[n.Name]
		if len(n.GPUIndices) == 0 || pr.GPUSource != "detected" {
			continue
		}
		for j, g := range n.GPUIndices {
			if g >= pr.GPUs {
				return &Error{Type: failure.InsufficientGPUs, Msg: fmt.Sprintf("nodes[%d].gpus[%d]: %s has no GPU %d: its agent detected %d (indices 0 to %d); list GPUs the node has",
					i, j, n.Name, g, pr.GPUs, pr.GPUs-1)}
			}
		}
	}
	return nil
}
