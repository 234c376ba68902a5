package activities

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// Signed intent (package intent): with trusted_keys in the node's policy, the agent acts
// only on requests carrying a spec signed by a trusted key, and only as that spec says.
// Which requests those are is package contract's (contract.Signed, contract.Unsigned);
// the gate (gate.go) verifies the signature, its times and the request's spec and
// deployment before any activity runs. What is left here are the checks of what a request
// says beside its spec, against the spec the gate verified (signedSpec): the engine, the
// directories the model's own, the addresses the node's own and the head's as pinned. What
// is measured (the plan's addresses, interfaces and env) cannot be signed in advance; the
// rest of the policy bounds it as it does without trusted_keys.

// LabelIntent marks a container started for a verified signed spec: its value is the
// signed spec's hash. With trusted_keys, the agent execs in, reads and adopts only
// containers that carry it (a container from before trusted_keys is replaced).
const LabelIntent = "tpdeploy.intent"

// signedNode is the signed spec's entry for this node.
func (b *nodeBase) signedNode(c *spec.Cluster) (spec.Node, error) {
	n, ok := c.WithDefaults().Node(b.name)
	if !ok {
		return spec.Node{}, b.deny("signed intent: the signed spec of cluster %s has no node %s", c.Name, b.name)
	}
	return n, nil
}

// signedDockerHost refuses an engine other than the one the signed spec gives this node.
func (b *nodeBase) signedDockerHost(c *spec.Cluster, host string) error {
	n, err := b.signedNode(c)
	if err != nil {
		return err
	}
	if host != "" && host != n.DockerHost || host == "" && n.DockerHost != spec.DefaultDockerHost {
		return b.deny("signed intent: docker_host %q is not the signed spec's %q for %s", host, n.DockerHost, b.name)
	}
	return nil
}

// Pinned addresses. What the plan says of addresses is measured, not signed: a compromised
// node can start a workflow whose plan points other nodes' Ray workers, ranks and model
// copies at itself. A spec may pin them (network.subnet, nodes[].address), and then,
// signed, every agent refuses a plan that puts itself, the Ray head or rendezvous it
// joins, or the model server it copies from, elsewhere; with trusted_keys the plan's env
// may only be the signed node env and the variables the plan owns (spec.PlannedEnv).

// signedNodePlan checks this node's plan against the verified spec c (nil: nothing to
// check): its address and env, and join, the Ray head or rendezvous address it is told
// to dial ("" for none), which must be the head's at the spec's port for it.
func (n *hostNet) signedNodePlan(c *spec.Cluster, np netplan.NodePlan, join string, port int) error {
	if c == nil {
		return nil
	}
	if err := n.signedAddress(np.Address); err != nil {
		return err
	}
	d := c.WithDefaults()
	i, node, ok := nodeIndex(d, n.name)
	if !ok {
		return n.deny("signed intent: the signed spec of cluster %s has no node %s", c.Name, n.name)
	}
	if err := n.pinnedAt(d, np.Address, fmt.Sprintf("nodes[%d].address", i), node.PinnedAddress(), "this node's planned address"); err != nil {
		return err
	}
	for _, k := range sortedEnvNames(np.Env) {
		v := np.Env[k]
		switch signed, inSpec := node.Env[k]; {
		case inSpec && signed != v:
			return n.deny("signed intent: the plan sets %s=%q for %s, the signed spec's nodes[%d].env says %q", k, v, n.name, i, signed)
		case !inSpec && !spec.PlannedEnv(k) && !spec.PlanDefaultEnv(k, v):
			return n.deny("signed intent: the plan sets %s for %s, which is neither in the signed spec's nodes[%d].env nor a variable the plan owns", k, n.name, i)
		case k == "VLLM_HOST_IP" && v != np.Address.String():
			return n.deny("signed intent: the plan's VLLM_HOST_IP %s for %s is not its planned address %s", v, n.name, np.Address)
		case k == "RAY_ADDRESS":
			if err := n.signedJoin(d, v, d.Ports.Ray, "RAY_ADDRESS"); err != nil {
				return err
			}
		}
	}
	if join != "" {
		return n.signedJoin(d, join, port, "the address to join")
	}
	return nil
}

// signedRank checks a rank's plan (executor mp) against the verified spec c: this node's
// plan, and the rendezvous (--master-addr) the head's planned address at ports.master.
func (n *hostNet) signedRank(c *spec.Cluster, req contract.RankRequest) error {
	if c == nil {
		return nil
	}
	np, _ := req.Plan.Node(n.name)
	head, _ := req.Plan.Node(c.Head().Name)
	port := c.WithDefaults().Ports.MasterPort()
	return n.signedNodePlan(c, np, netip.AddrPortFrom(head.Address, uint16(port)).String(), port)
}

// signedProof is signedRank for the proof's one-shot container, and the proof's own
// rendezvous (its master) the head's too.
func (n *hostNet) signedProof(c *spec.Cluster, req contract.ProofRequest) error {
	if c == nil {
		return nil
	}
	if err := n.signedRank(c, *req.Fresh); err != nil {
		return err
	}
	d := c.WithDefaults()
	return n.signedJoin(d, req.Master, d.Ports.MasterPort(), "the proof's master")
}

// signedJoin checks an address this node is told to dial as the head's (Ray's GCS, the
// rendezvous): host:port, the port the spec's, the host the head's nodes[].address when
// pinned and inside network.subnet when pinned.
func (b *nodeBase) signedJoin(d spec.Cluster, join string, port int, what string) error {
	ap, err := netip.ParseAddrPort(join)
	if err != nil {
		return b.deny("signed intent: %s %q is not an address and port", what, join)
	}
	if port > 0 && int(ap.Port()) != port {
		return b.deny("signed intent: %s %s is not at the signed spec's port %d", what, ap, port)
	}
	hi, head, _ := nodeIndex(d, d.Head().Name)
	return b.pinnedAt(d, ap.Addr(), fmt.Sprintf("nodes[%d].address", hi), head.PinnedAddress(), what+" "+ap.String()+" (the head "+head.Name+"'s)")
}

// signedSource checks the model server a copy is told to fetch from against the verified
// spec c: source is the node serving it ("" for the head), which must be a node of the
// signed spec that comes before this one in the copy chain's order (the head, then the
// spec's nodes in order: weights.Chain), and from its address as the spec pins it (its
// nodes[].address, network.subnet). A plan cannot point a copy at an address the
// operator did not sign, at this node itself, or round a loop.
func (b *nodeBase) signedSource(c *spec.Cluster, source string, from netip.AddrPort) error {
	if c == nil {
		return nil
	}
	d := c.WithDefaults()
	head := d.Head().Name
	if source == "" {
		source = head
	}
	order := []string{head}
	for _, n := range d.Nodes {
		if n.Name != head {
			order = append(order, n.Name)
		}
	}
	si, self := slices.Index(order, source), slices.Index(order, b.name)
	switch {
	case si < 0:
		return b.deny("signed intent: the model server's node %s is not a node of the signed spec of cluster %s", source, c.Name)
	case self >= 0 && si >= self:
		return b.deny("signed intent: %s is to copy the model from %s, which comes after it in the copy chain (the head, then the signed spec's nodes in order)", b.name, source)
	}
	i, n, _ := nodeIndex(d, source)
	what := "the model server " + from.String() + " (the head " + n.Name + "'s)"
	if source != head {
		what = "the model server " + from.String() + " (" + n.Name + "'s, the node before " + b.name + " in the copy chain)"
	}
	return b.pinnedAt(d, from.Addr(), fmt.Sprintf("nodes[%d].address", i), n.PinnedAddress(), what)
}

// signedOwnAddress checks an address of this node a request gives (the model server's)
// against the verified spec c's pins.
func (b *nodeBase) signedOwnAddress(c *spec.Cluster, addr netip.Addr) error {
	if c == nil {
		return nil
	}
	d := c.WithDefaults()
	i, n, ok := nodeIndex(d, b.name)
	if !ok {
		return b.deny("signed intent: the signed spec of cluster %s has no node %s", c.Name, b.name)
	}
	return b.pinnedAt(d, addr, fmt.Sprintf("nodes[%d].address", i), n.PinnedAddress(), "this node's planned address")
}

// signedPeers checks the addresses a model server is told to serve (the copying nodes'
// planned addresses) against the verified spec c's pins: each inside network.subnet when
// it is pinned, and, when every other node pins its nodes[].address, one of those. A plan
// cannot open the model to an address the operator did not sign.
func (b *nodeBase) signedPeers(c *spec.Cluster, peers []netip.Addr) error {
	if c == nil {
		return nil
	}
	d := c.WithDefaults()
	pinned := map[netip.Addr]bool{}
	others := 0
	for _, n := range d.Nodes {
		if n.Name == b.name {
			continue
		}
		others++
		if pin := n.PinnedAddress(); pin.IsValid() {
			pinned[pin] = true
		}
	}
	all := others > 0 && len(pinned) == others
	for _, p := range peers {
		if all && !pinned[p] {
			return b.deny("signed intent: the model server's peer %s is none of the other nodes' addresses the signed spec pins (nodes[].address)", p)
		}
		if sub := d.Network.PinnedSubnet(); sub.IsValid() && !sub.Contains(p) {
			return b.deny("signed intent: the model server's peer %s is outside the signed spec's network.subnet %s", p, sub)
		}
	}
	return nil
}

// pinnedAt refuses addr when the signed spec d pins it elsewhere: pin (the field named)
// or outside network.subnet.
func (b *nodeBase) pinnedAt(d spec.Cluster, addr netip.Addr, field string, pin netip.Addr, what string) error {
	if pin.IsValid() && addr != pin {
		return b.deny("signed intent: %s is %s, not the signed spec's %s %s", what, addr, field, pin)
	}
	if sub := d.Network.PinnedSubnet(); sub.IsValid() && !sub.Contains(addr) {
		return b.deny("signed intent: %s is %s, outside the signed spec's network.subnet %s", what, addr, sub)
	}
	return nil
}

// nodeIndex is the spec's node called name, and its place in nodes.
func nodeIndex(c spec.Cluster, name string) (int, spec.Node, bool) {
	for i, n := range c.Nodes {
		if n.Name == name {
			return i, n, true
		}
	}
	return -1, spec.Node{}, false
}

func sortedEnvNames(env map[string]string) []string {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// signedModelRoot refuses a model directory that is not the verified spec c's:
// model.host_dir, or a snapshot of model.path in its hf_cache.
func (b *nodeBase) signedModelRoot(c *spec.Cluster, root string) error {
	if c == nil {
		return nil
	}
	d := c.WithDefaults()
	clean := filepath.Clean(root)
	if d.Model.HostDir != "" && clean == filepath.Clean(d.Model.HostDir) {
		return nil
	}
	if d.Model.IsHFName() {
		snapshots := filepath.Join(weights.HFRepoDir(d.HFCache, d.Model.Path), "snapshots")
		if rel, err := filepath.Rel(snapshots, clean); err == nil && rel != "." && !strings.Contains(rel, "/") && rel != ".." {
			return nil
		}
	}
	return b.deny("signed intent: %s is not the signed spec's model directory (model.host_dir, or a snapshot of %s in %s)", root, d.Model.Path, d.HFCache)
}

// labelled marks a container spec as started for the verified spec c (nil: none).
func labelled(s containerSpec, c *spec.Cluster) containerSpec {
	if c == nil {
		return s
	}
	l := make(map[string]string, len(s.Labels)+1)
	for k, v := range s.Labels {
		l[k] = v
	}
	l[LabelIntent] = c.Hash()
	s.Labels = l
	return s
}
