//go:build integration

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	tclient "go.temporal.io/sdk/client"

	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/lab"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// proofRuns deploys s on l runs times and returns each run's data-plane step and whole
// deploy, and the links the proof's all_reduce crossed (1 on rails: the pair's one hop).
func proofRuns(b *testing.B, l *lab.Lab, s spec.Cluster, runs int) (proofs, deploys []time.Duration, links int) {
	b.Helper()
	c, err := tclient.Dial(tclient.Options{HostPort: l.Temporal})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctl := control.Controller{Client: c, SignKey: l.SignKey}
	links = 1
	for range runs {
		dctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		start := time.Now()
		run, err := ctl.StartDeploy(dctx, workflows.DeployRequest{Spec: s, Trigger: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		var res workflows.DeployResult
		if err := run.Get(dctx, &res); err != nil {
			b.Fatalf("%s: deploy: %v", s.Name, control.Reason(err))
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
		b.Fatalf("%s: no data-plane step ran", s.Name)
	}
	return proofs, deploys, links
}

// exampleSpec is examples/FILE named name, on image under executor mp, requiring RDMA.
func exampleSpec(b *testing.B, file, name, image string) spec.Cluster {
	b.Helper()
	root, _ := images.ModuleRoot()
	raw, err := os.ReadFile(filepath.Join(root, "examples", file))
	if err != nil {
		b.Fatal(err)
	}
	s, err := spec.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	s.Name, s.Image, s.Executor, s.DataPlane = name, image, spec.ExecutorMP, ""
	return s
}

// BenchmarkDataPlaneProofPerLink: the data-plane proof's time in all and per link on the
// two-Spark pair (one hop over both rails), the triangle (3 cables) and ring4 (4 cables),
// one lab after the other in one run, each deployed under mp on the NCCL 2.30.7 image (the
// only one whose NCCL serves the switchless fabrics), so the ratios compare like with like.
// Every rank runs at once, each in a fresh container of its node (mp), so the proof grows
// with the slowest rank rather than with the links. The figures are the lab's: container
// starts, the rendezvous and the simulated NCCL on 2 shared cores, no GPU.
func BenchmarkDataPlaneProofPerLink(b *testing.B) {
	runs := min(benchPairs(), 3)
	type row struct {
		name          string
		links         int
		proof, deploy time.Duration
	}
	var rows []row
	for _, tc := range []struct{ topology, file string }{
		{lab.TopologySpark, "lab.yaml"}, {lab.TopologyTriangle, "lab-triangle.yaml"}, {lab.TopologyRing4, "lab-ring4.yaml"},
	} {
		l, down := benchLab(b, "tpd-bench-pl-", tc.topology)
		proofs, deploys, links := proofRuns(b, l, exampleSpec(b, tc.file, "bench-pl-"+tc.topology, lab.NCCL230Release.Image()), runs)
		r := row{tc.topology, links, median(proofs), median(deploys)}
		rows = append(rows, r)
		b.ReportMetric(r.proof.Seconds(), "s/proof-"+tc.topology)
		b.ReportMetric(r.proof.Seconds()/float64(links), "s/link-"+tc.topology)
		b.Logf("%s: %d link(s), proof median %s (%s per link) of a %s deploy, %d runs: %v", tc.topology, links,
			r.proof.Round(time.Millisecond), (r.proof / time.Duration(links)).Round(time.Millisecond), r.deploy.Round(time.Millisecond), len(proofs), proofs)
		down() // before the next lab: 2 cores hold one lab's nodes at a time
	}
	pair := rows[0]
	for _, r := range rows[1:] {
		b.ReportMetric(r.proof.Seconds()/pair.proof.Seconds(), "ratio-proof-"+r.name)
		b.Logf("%s vs pair: %.2fx the links, %.2fx the proof, %.2fx the time per link", r.name,
			float64(r.links)/float64(pair.links), r.proof.Seconds()/pair.proof.Seconds(),
			(r.proof.Seconds()/float64(r.links))/(pair.proof.Seconds()/float64(pair.links)))
	}
}

// benchLab brings up a lab of topology for a benchmark, and the function that takes it
// down (at the latest when the benchmark ends).
func benchLab(b *testing.B, prefix, topology string) (*lab.Lab, func()) {
	b.Helper()
	root, _ := images.ModuleRoot()
	rnd := make([]byte, 3)
	_, _ = rand.Read(rnd)
	prefix += hex.EncodeToString(rnd)
	start := time.Now()
	l, err := labUp(context.Background(), filepath.Join(root, "bin", "temporal"), lab.Config{Prefix: prefix, Topology: topology})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%s lab up in %s", topology, time.Since(start).Round(100*time.Millisecond))
	down := sync.OnceFunc(func() {
		l.Close()
		if err := lab.Down(context.Background(), eng, prefix); err != nil {
			b.Logf("lab down: %v", err)
		}
	})
	b.Cleanup(down)
	return l, down
}

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
