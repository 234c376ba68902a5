package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/intent"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Gate is the node's one check of signed intent, a worker interceptor for the worker that
// serves the node's queue (registration.NodeOptions installs it). With trusted_keys in the
// policy, before any activity code runs, it verifies the intent of every request package
// contract says is Signed — a trusted key, its times unless the request is a removal, the
// request's spec and deployment the signed ones — lets the activities contract.Unsigned
// names through, and refuses everything else: non-retryable PolicyDenied, naming the node.
// The activity finds the verified spec with signedSpec, for the checks of its own fields.
func (a *Agent) Gate() interceptor.WorkerInterceptor { return &gate{b: a.base} }

type gate struct {
	interceptor.WorkerInterceptorBase
	b *nodeBase
}

func (g *gate) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &gateInbound{b: g.b}
	i.Next = next
	return i
}

type gateInbound struct {
	interceptor.ActivityInboundInterceptorBase
	b *nodeBase
}

// verifiedKey is the context key of the spec the gate verified.
type verifiedKey struct{}

func (i *gateInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	c, err := i.b.admit(activity.GetInfo(ctx).ActivityType.Name, in.Args)
	if err != nil {
		return nil, err
	}
	if c != nil {
		ctx = context.WithValue(ctx, verifiedKey{}, c)
	}
	return i.Next.ExecuteActivity(ctx, in)
}

// admit is the gate's decision on the activity name called with args: the spec its
// intent signs, nil when it needs none (or the node requires no signatures).
func (b *nodeBase) admit(name string, args []any) (*spec.Cluster, error) {
	if !b.enforced() {
		return nil, nil
	}
	if len(args) > 0 {
		if s, ok := args[0].(contract.Signed); ok {
			return b.verify(s.Signature())
		}
	}
	if _, ok := contract.Unsigned[name]; ok {
		return nil, nil
	}
	return nil, b.deny("signed intent: activity %s is neither a signed request nor one of contract.Unsigned, and this node acts only on what an operator signed", name)
}

// signedSpec is the spec the gate verified for this activity's request, for the checks of
// what the request says beside it (addresses, directories, engine): nil when the node
// does not require signatures. Without the gate, a node that requires them refuses.
func (b *nodeBase) signedSpec(ctx context.Context) (*spec.Cluster, error) {
	if !b.enforced() {
		return nil, nil
	}
	if c, ok := ctx.Value(verifiedKey{}).(*spec.Cluster); ok {
		return c, nil
	}
	return nil, b.deny("signed intent: no gate verified this request (the node's worker runs without Agent.Gate)")
}

// enforced says whether this node acts only on specs signed by a key it trusts.
func (b *nodeBase) enforced() bool { return b.policy != nil && b.policy.Enforced() }

// verify checks a signature with the node's trusted keys and returns the spec it signs:
// the key trusted, the signature good, its times current (unless a removal), and the
// request's spec, deployment and cluster the signed spec's.
func (b *nodeBase) verify(s contract.Signature) (*spec.Cluster, error) {
	trusted := fmt.Sprintf("%s: %s in %s, or %s", policy.SettingTrustedKeys, strings.Join(b.policy.TrustedKeyNames(), ", "), b.policy.File, policy.FlagTrustKey)
	if s.Intent == nil {
		return nil, b.deny("the request is unsigned, and this node acts only on specs signed by a key it trusts (%s); deploy with starter --sign-key-file", trusted)
	}
	k, ok := b.policy.TrustedKey(s.Intent.KeyID)
	if !ok {
		return nil, b.deny("the request's spec is signed by %s, a key this node does not trust (%s)", s.Intent.KeyID, trusted)
	}
	c, err := intent.Verify(s.Intent, k.Key)
	if err != nil {
		return nil, b.deny("signed intent: %v", err)
	}
	if !s.Removal {
		if err := intent.Current(s.Intent, time.Now(), b.policy.NotBefore); err != nil {
			fix := "sign the spec again (starter deploy --sign-key-file FILE, with --sign-valid-for for a new expiry)"
			var te *intent.TimeError
			if errors.As(err, &te) && te.Future {
				fix = "sync the clocks of the signing host and this node (NTP), then sign the spec again (starter deploy --sign-key-file FILE)"
			} else if errors.As(err, &te) && !te.Expired {
				fix += fmt.Sprintf("; this node's %s is %s (%s, %s)", policy.SettingNotBefore, b.policy.NotBefore.Format(time.RFC3339), b.policy.File, policy.FlagNotBefore)
			}
			return nil, b.deny("signed intent: %v: %s", err, fix)
		}
	}
	if s.Spec != nil {
		if err := intent.Matches(c, *s.Spec); err != nil {
			return nil, b.deny("signed intent: %v", err)
		}
	}
	if d := s.Deployment; d != nil && (d.Cluster != c.Name || d.SpecHash != c.Hash()) {
		return nil, b.deny("signed intent: the deployment is of cluster %s spec %s, the signed spec is cluster %s spec %s", d.Cluster, d.SpecHash, c.Name, c.Hash())
	}
	if s.Cluster != nil && *s.Cluster != c.Name {
		return nil, b.deny("signed intent: a removal of cluster %s with the signed spec of cluster %s", *s.Cluster, c.Name)
	}
	return &c, nil
}

// VerifyRemoval checks in as the gate checks a removal of cluster's containers: signed by
// a key this node trusts, of a spec of that cluster (an expired or revoked signature still
// removes). Nil without trusted_keys. It is what control.Controller.VerifyRemoval takes,
// for a process that reads the runs and removes in one place; the agent's own start-up
// reconcile gets the run's signature from the controller and the gate checks it, as
// ReconcileCluster's request (contract.ReconcileRequest).
func (a *Agent) VerifyRemoval(in *contract.Intent, cluster string) error {
	if !a.base.enforced() {
		return nil
	}
	_, err := a.base.verify(contract.Signature{Intent: in, Removal: true, Cluster: &cluster})
	return err
}
