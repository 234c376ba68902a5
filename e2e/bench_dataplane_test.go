//go:build integration

package e2e

import (
	"context"
	"testing"
	"time"

	tclient "go.temporal.io/sdk/client"

	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// BenchmarkDataPlaneProof deploys on the two-Spark lab (both rails) a few times and
// reports what the data-plane proof step costs a deploy (the lab's: copying the program
// into both Ray containers, the simulated NCCL's choice, the rendezvous) next to the whole
// deploy. On real GPUs add torch's import and NCCL's init, a few seconds per rank.
func BenchmarkDataPlaneProof(b *testing.B) {
	ctx := context.Background()
	l := sparkLab(b, "tpd-bench-spark-")
	c, err := tclient.Dial(tclient.Options{HostPort: l.Temporal})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctl := control.Controller{Client: c, SignKey: l.SignKey}
	var proofs, deploys []time.Duration
	links := 1 // the pair's: one hop of NCCL's ring (over both rails)
	for range benchPairs() {
		s := benchSpec(b, "bench-proof")
		dctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		start := time.Now()
		run, err := ctl.StartDeploy(dctx, workflows.DeployRequest{Spec: s, Trigger: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		var res workflows.DeployResult
		if err := run.Get(dctx, &res); err != nil {
			b.Fatalf("deploy: %v", control.Reason(err))
		}
		deploys = append(deploys, time.Since(start))
		if res.DataPlane != nil && len(res.DataPlane.Links) > 0 {
			links = len(res.DataPlane.Links)
		}
		for _, st := range res.Steps {
			if st.Step == workflows.PhaseDataPlane {
				proofs = append(proofs, st.Duration)
			}
		}
		if _, err := ctl.Teardown(dctx, s.Name, nil); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	if len(proofs) == 0 {
		b.Fatal("no data-plane step ran")
	}
	b.ReportMetric(median(proofs).Seconds(), "s/proof")
	b.ReportMetric(median(deploys).Seconds(), "s/deploy")
	b.ReportMetric(median(proofs).Seconds()/float64(links), "s/link")
	b.Logf("data-plane proof: median %s of a %s deploy (%d runs)", median(proofs).Round(time.Millisecond), median(deploys).Round(time.Millisecond), len(proofs))
}
