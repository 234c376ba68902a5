package activities

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/intent"
	"github.com/tpdeploy/tpdeploy/netplan"
	"github.com/tpdeploy/tpdeploy/policy"
	"github.com/tpdeploy/tpdeploy/spec"
	"github.com/tpdeploy/tpdeploy/weights"
)

// Signed intent (package intent): with trusted_keys in the node's policy, every request
// that makes the agent act — a container started, vLLM launched or watched, model files
// served, written or removed, containers removed — must carry a spec signed by a trusted
// key, and the agent acts only as that spec says: the request's spec must be the signed
// one (the executor auto may have become ray or mp), its deployment the signed spec's
// cluster and hash, the directories the model's own, the address the node's own. What is
// measured (the plan's addresses, interfaces and env) cannot be signed in advance; the
// rest of the policy bounds it as it does without trusted_keys. Reads and probes
// (ProbeNode, the reachability listeners and dials, ReadImage, ModelManifest, placement
// and Ray checks, boot IDs) need no signature.

// LabelIntent marks a container started for a verified signed spec: its value is the
// signed spec's hash. With trusted_keys, the agent execs in, reads and adopts only
// containers that carry it (a container from before trusted_keys is replaced).
const LabelIntent = "tpdeploy.intent"

// enforced says whether this node acts only on signed specs.
func (a *Node) enforced() bool { return a.Policy != nil && a.Policy.Enforced() }

// signed verifies a request's intent with the node's trusted keys, refuses it when it has
// expired or was signed before the policy's intents_not_before, and returns the spec it
// signs; nil and no error when the node does not require signatures.
func (a *Node) signed(in *contract.Intent) (*spec.Cluster, error) {
	c, err := a.verified(in)
	if c == nil || err != nil {
		return c, err
	}
	if err := intent.Current(in, time.Now(), a.Policy.NotBefore); err != nil {
		fix := "sign the spec again (starter deploy --sign-key-file FILE, with --sign-valid-for for a new expiry)"
		var te *intent.TimeError
		if errors.As(err, &te) && !te.Expired {
			fix += fmt.Sprintf("; this node's %s is %s (%s, %s)", policy.SettingNotBefore, a.Policy.NotBefore.Format(time.RFC3339), a.Policy.File, policy.FlagNotBefore)
		}
		return nil, a.deny("signed intent: %v: %s", err, fix)
	}
	return c, nil
}

// signedRemoval is signed for a request that starts nothing: a removal of what the
// cluster made (its containers, a copy's partial files) and the supervisor's checks of
// what serves (EndpointKey). An expired or revoked signature of the cluster's spec still
// does these, so a deploy whose signature expires midway cleans up after itself, an old
// cluster is torn down without a new signature, and a cluster that serves is still seen
// to serve once its signature expired. The key must still be trusted.
func (a *Node) signedRemoval(in *contract.Intent) (*spec.Cluster, error) { return a.verified(in) }

// checkedSpec is signedSpec for what starts nothing (signedRemoval): the times are not
// checked.
func (a *Node) checkedSpec(in *contract.Intent, sent spec.Cluster) (*spec.Cluster, error) {
	c, err := a.verified(in)
	if c == nil || err != nil {
		return c, err
	}
	if err := intent.Matches(*c, sent); err != nil {
		return nil, a.deny("signed intent: %v", err)
	}
	return c, nil
}

// verified checks the intent's signature with the node's trusted keys, not its times.
func (a *Node) verified(in *contract.Intent) (*spec.Cluster, error) {
	if !a.enforced() {
		return nil, nil
	}
	trusted := fmt.Sprintf("%s: %s in %s, or %s", policy.SettingTrustedKeys, strings.Join(a.Policy.TrustedKeyNames(), ", "), a.Policy.File, policy.FlagTrustKey)
	if in == nil {
		return nil, a.deny("the request is unsigned, and this node acts only on specs signed by a key it trusts (%s); deploy with starter --sign-key-file", trusted)
	}
	k, ok := a.Policy.TrustedKey(in.KeyID)
	if !ok {
		return nil, a.deny("the request's spec is signed by %s, a key this node does not trust (%s)", in.KeyID, trusted)
	}
	c, err := intent.Verify(in, k.Key)
	if err != nil {
		return nil, a.deny("signed intent: %v", err)
	}
	return &c, nil
}

// signedSpec is signed, and the request's spec must be the signed one.
func (a *Node) signedSpec(in *contract.Intent, sent spec.Cluster) (*spec.Cluster, error) {
	c, err := a.signed(in)
	if c == nil || err != nil {
		return c, err
	}
	if err := intent.Matches(*c, sent); err != nil {
		return nil, a.deny("signed intent: %v", err)
	}
	return c, nil
}

// signedDeployment is signedSpec, and the containers' deployment must be the signed
// spec's cluster and hash.
func (a *Node) signedDeployment(in *contract.Intent, sent spec.Cluster, d contract.Deployment) (*spec.Cluster, error) {
	c, err := a.signedSpec(in, sent)
	if c == nil || err != nil {
		return c, err
	}
	if d.Cluster != c.Name || d.SpecHash != c.Hash() {
		return nil, a.deny("signed intent: the deployment is of cluster %s spec %s, the signed spec is cluster %s spec %s", d.Cluster, d.SpecHash, c.Name, c.Hash())
	}
	return c, nil
}

// signedNode is the signed spec's entry for this node.
func (a *Node) signedNode(c *spec.Cluster) (spec.Node, error) {
	n, ok := c.WithDefaults().Node(a.Name)
	if !ok {
		return spec.Node{}, a.deny("signed intent: the signed spec of cluster %s has no node %s", c.Name, a.Name)
	}
	return n, nil
}

// signedDockerHost refuses an engine other than the one the signed spec gives this node.
func (a *Node) signedDockerHost(c *spec.Cluster, host string) error {
	n, err := a.signedNode(c)
	if err != nil {
		return err
	}
	if host != "" && host != n.DockerHost || host == "" && n.DockerHost != spec.DefaultDockerHost {
		return a.deny("signed intent: docker_host %q is not the signed spec's %q for %s", host, n.DockerHost, a.Name)
	}
	return nil
}

// signedAddress refuses a planned address that is not one of this node's own: the address
// a container registers under (Ray's --node-ip-address) is measured, not signed.
func (a *Node) signedAddress(addr netip.Addr) error {
	if !a.enforced() {
		return nil
	}
	own, err := a.ownPrefixes()
	if err != nil {
		return err
	}
	if !ownsAddr(own, addr) {
		return a.deny("signed intent: the planned address %s is not an address of this node", addr)
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
func (a *Node) signedNodePlan(c *spec.Cluster, np netplan.NodePlan, join string, port int) error {
	if c == nil {
		return nil
	}
	if err := a.signedAddress(np.Address); err != nil {
		return err
	}
	d := c.WithDefaults()
	i, n, ok := nodeIndex(d, a.Name)
	if !ok {
		return a.deny("signed intent: the signed spec of cluster %s has no node %s", c.Name, a.Name)
	}
	if err := a.pinnedAt(d, np.Address, fmt.Sprintf("nodes[%d].address", i), n.PinnedAddress(), "this node's planned address"); err != nil {
		return err
	}
	for _, k := range sortedEnvNames(np.Env) {
		v := np.Env[k]
		switch signed, inSpec := n.Env[k]; {
		case inSpec && signed != v:
			return a.deny("signed intent: the plan sets %s=%q for %s, the signed spec's nodes[%d].env says %q", k, v, a.Name, i, signed)
		case !inSpec && !spec.PlannedEnv(k):
			return a.deny("signed intent: the plan sets %s for %s, which is neither in the signed spec's nodes[%d].env nor a variable the plan owns", k, a.Name, i)
		case k == "VLLM_HOST_IP" && v != np.Address.String():
			return a.deny("signed intent: the plan's VLLM_HOST_IP %s for %s is not its planned address %s", v, a.Name, np.Address)
		case k == "RAY_ADDRESS":
			if err := a.signedJoin(d, v, d.Ports.Ray, "RAY_ADDRESS"); err != nil {
				return err
			}
		}
	}
	if join != "" {
		return a.signedJoin(d, join, port, "the address to join")
	}
	return nil
}

// signedRank checks a rank's plan (executor mp) against the verified spec c: this node's
// plan, and the rendezvous (--master-addr) the head's planned address at ports.master.
func (a *Node) signedRank(c *spec.Cluster, req contract.RankRequest) error {
	if c == nil {
		return nil
	}
	np, _ := req.Plan.Node(a.Name)
	head, _ := req.Plan.Node(c.Head().Name)
	port := c.WithDefaults().Ports.MasterPort()
	return a.signedNodePlan(c, np, netip.AddrPortFrom(head.Address, uint16(port)).String(), port)
}

// signedProof is signedRank for the proof's one-shot container, and the proof's own
// rendezvous (its master) the head's too.
func (a *Node) signedProof(c *spec.Cluster, req contract.ProofRequest) error {
	if c == nil {
		return nil
	}
	if err := a.signedRank(c, *req.Fresh); err != nil {
		return err
	}
	d := c.WithDefaults()
	return a.signedJoin(d, req.Master, d.Ports.MasterPort(), "the proof's master")
}

// signedJoin checks an address this node is told to dial as the head's (Ray's GCS, the
// rendezvous): host:port, the port the spec's, the host the head's nodes[].address when
// pinned and inside network.subnet when pinned.
func (a *Node) signedJoin(d spec.Cluster, join string, port int, what string) error {
	ap, err := netip.ParseAddrPort(join)
	if err != nil {
		return a.deny("signed intent: %s %q is not an address and port", what, join)
	}
	if port > 0 && int(ap.Port()) != port {
		return a.deny("signed intent: %s %s is not at the signed spec's port %d", what, ap, port)
	}
	hi, head, _ := nodeIndex(d, d.Head().Name)
	return a.pinnedAt(d, ap.Addr(), fmt.Sprintf("nodes[%d].address", hi), head.PinnedAddress(), what+" "+ap.String()+" (the head "+head.Name+"'s)")
}

// signedSource checks the address of the head's model server a copy is told to fetch from
// against the signed spec's pins (the head's nodes[].address, network.subnet).
func (a *Node) signedSource(in *contract.Intent, from netip.AddrPort) error {
	c, err := a.signed(in)
	if c == nil || err != nil {
		return err
	}
	d := c.WithDefaults()
	hi, head, _ := nodeIndex(d, d.Head().Name)
	return a.pinnedAt(d, from.Addr(), fmt.Sprintf("nodes[%d].address", hi), head.PinnedAddress(), "the model server "+from.String()+" (the head "+head.Name+"'s)")
}

// signedOwnAddress checks an address of this node a request gives (the model server's)
// against the signed spec's pins.
func (a *Node) signedOwnAddress(in *contract.Intent, addr netip.Addr) error {
	c, err := a.signed(in)
	if c == nil || err != nil {
		return err
	}
	d := c.WithDefaults()
	i, n, ok := nodeIndex(d, a.Name)
	if !ok {
		return a.deny("signed intent: the signed spec of cluster %s has no node %s", c.Name, a.Name)
	}
	return a.pinnedAt(d, addr, fmt.Sprintf("nodes[%d].address", i), n.PinnedAddress(), "this node's planned address")
}

// pinnedAt refuses addr when the signed spec d pins it elsewhere: pin (the field named)
// or outside network.subnet.
func (a *Node) pinnedAt(d spec.Cluster, addr netip.Addr, field string, pin netip.Addr, what string) error {
	if pin.IsValid() && addr != pin {
		return a.deny("signed intent: %s is %s, not the signed spec's %s %s", what, addr, field, pin)
	}
	if sub := d.Network.PinnedSubnet(); sub.IsValid() && !sub.Contains(addr) {
		return a.deny("signed intent: %s is %s, outside the signed spec's network.subnet %s", what, addr, sub)
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

// signedModelRoot refuses a model directory that is not the signed spec's: model.host_dir,
// or a snapshot of model.path in its hf_cache.
func (a *Node) signedModelRoot(in *contract.Intent, root string) error {
	c, err := a.signed(in)
	if c == nil || err != nil {
		return err
	}
	return a.modelRootOf(c, root)
}

// signedRemovalModelRoot is signedModelRoot for the removal of a copy's partial files,
// which an expired or revoked signature still does (signedRemoval).
func (a *Node) signedRemovalModelRoot(in *contract.Intent, root string) error {
	c, err := a.signedRemoval(in)
	if c == nil || err != nil {
		return err
	}
	return a.modelRootOf(c, root)
}

// modelRootOf refuses a model directory that is not the verified spec c's.
func (a *Node) modelRootOf(c *spec.Cluster, root string) error {
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
	return a.deny("signed intent: %s is not the signed spec's model directory (model.host_dir, or a snapshot of %s in %s)", root, d.Model.Path, d.HFCache)
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
