package activities

import (
	"fmt"
	"path/filepath"
	"strings"

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
func (b *nodeBase) enforced() bool { return b.policy != nil && b.policy.Enforced() }

// signed verifies a request's intent with the node's trusted keys and returns the spec it
// signs; nil and no error when the node does not require signatures.
func (b *nodeBase) signed(in *contract.Intent) (*spec.Cluster, error) {
	if !b.enforced() {
		return nil, nil
	}
	trusted := fmt.Sprintf("%s: %s in %s, or %s", policy.SettingTrustedKeys, strings.Join(b.policy.TrustedKeyNames(), ", "), b.policy.File, policy.FlagTrustKey)
	if in == nil {
		return nil, b.deny("the request is unsigned, and this node acts only on specs signed by a key it trusts (%s); deploy with starter --sign-key-file", trusted)
	}
	k, ok := b.policy.TrustedKey(in.KeyID)
	if !ok {
		return nil, b.deny("the request's spec is signed by %s, a key this node does not trust (%s)", in.KeyID, trusted)
	}
	c, err := intent.Verify(in, k.Key)
	if err != nil {
		return nil, b.deny("signed intent: %v", err)
	}
	return &c, nil
}

// signedSpec is signed, and the request's spec must be the signed one.
func (b *nodeBase) signedSpec(in *contract.Intent, sent spec.Cluster) (*spec.Cluster, error) {
	c, err := b.signed(in)
	if c == nil || err != nil {
		return c, err
	}
	if err := intent.Matches(*c, sent); err != nil {
		return nil, b.deny("signed intent: %v", err)
	}
	return c, nil
}

// signedDeployment is signedSpec, and the containers' deployment must be the signed
// spec's cluster and hash.
func (b *nodeBase) signedDeployment(in *contract.Intent, sent spec.Cluster, d contract.Deployment) (*spec.Cluster, error) {
	c, err := b.signedSpec(in, sent)
	if c == nil || err != nil {
		return c, err
	}
	if d.Cluster != c.Name || d.SpecHash != c.Hash() {
		return nil, b.deny("signed intent: the deployment is of cluster %s spec %s, the signed spec is cluster %s spec %s", d.Cluster, d.SpecHash, c.Name, c.Hash())
	}
	return c, nil
}

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

// signedModelRoot refuses a model directory that is not the signed spec's: model.host_dir,
// or a snapshot of model.path in its hf_cache.
func (b *nodeBase) signedModelRoot(in *contract.Intent, root string) error {
	c, err := b.signed(in)
	if c == nil || err != nil {
		return err
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
