package activities

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/tpdeploy/tpdeploy/contract"
	"github.com/tpdeploy/tpdeploy/intent"
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
