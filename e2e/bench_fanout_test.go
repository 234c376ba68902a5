//go:build integration

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	tclient "go.temporal.io/sdk/client"

	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/images"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/lab"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// fanOutRate is the shaped lab links' rate, bytes a second each way: slow enough that a
// copy of the benchmark's model is bound by the link, not by the 2-core machine.
const fanOutRate = 20_000_000

// BenchmarkFanOutLab measures model.sync's chain on a lab of four nodes (or
// TPDEPLOY_FANOUT_NODES) whose fast
// network is shaped to fanOutRate (lab.ShapeLinks, a tbf at both ends of each node's
// link): the model-copy step of a deploy to two nodes (one copy) against that of a deploy
// to four (three copies along the chain head → b → c → d), and each copy's rate against
// the link's. A star would take about three copies' time, the head's link carrying all.
func BenchmarkFanOutLab(b *testing.B) {
	ctx := context.Background()
	root, _ := images.ModuleRoot()
	rnd := make([]byte, 3)
	_, _ = rand.Read(rnd)
	prefix := "tpd-e2e-fan-" + hex.EncodeToString(rnd)
	nodes := 4 // TPDEPLOY_FANOUT_NODES=8 for the eight (heavier on 2 cores)
	if n, err := strconv.Atoi(os.Getenv("TPDEPLOY_FANOUT_NODES")); err == nil && n >= 3 {
		nodes = n
	}
	l, err := labUp(ctx, filepath.Join(root, "bin", "temporal"), lab.Config{Prefix: prefix, Nodes: nodes})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		l.Close()
		if err := lab.Down(context.Background(), eng, prefix); err != nil {
			b.Logf("lab down: %v", err)
		}
	})
	unshape, err := l.ShapeLinks(ctx, "fast", fanOutRate)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = unshape() })
	mc, err := tclient.Dial(tclient.Options{HostPort: l.Temporal})
	if err != nil {
		b.Fatal(err)
	}
	defer mc.Close()
	ctl := control.Controller{Client: mc, SignKey: l.SignKey}

	const shards, shardSize = 4, 16 << 20
	copyStep := func(name string, nodes int) (time.Duration, []workflows.ModelCopy) {
		s := benchSpec(b, name)
		for _, n := range l.Nodes[2:nodes] {
			s.Nodes = append(s.Nodes, spec.Node{Name: n.Name, Role: spec.RoleWorker, GPUs: 1})
		}
		s.Parallel.Tensor = nodes
		s.Model.Path, s.Model.HostDir, s.Model.Sync = "/models/"+name, "/models/"+name, spec.SyncFromHead
		if err := lab.MakeModel(filepath.Join(l.NodeRoot("node-a"), s.Model.HostDir), shards, shardSize, 11); err != nil {
			b.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		run, err := ctl.StartDeploy(dctx, workflows.DeployRequest{Spec: s, Trigger: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		var res workflows.DeployResult
		if err := run.Get(dctx, &res); err != nil {
			b.Fatalf("%s: deploy: %v", name, control.Reason(err))
		}
		if _, err := ctl.Teardown(ctx, name, nil); err != nil {
			b.Fatal(err)
		}
		for _, st := range res.Steps {
			if st.Step == workflows.PhaseModelCopy {
				return st.Duration, res.ModelCopies
			}
		}
		b.Fatalf("%s: no model-copy step in %+v", name, res.Steps)
		return 0, nil
	}
	for i := 0; i < b.N; i++ {
		one, _ := copyStep(fmt.Sprintf("bench-fan1-%d", i), 2)
		chain, copies := copyStep(fmt.Sprintf("bench-fan%d-%d", nodes-1, i), nodes)
		if len(copies) != nodes-1 {
			b.Fatalf("the %d-node deploy made %d copies, want %d: %+v", nodes, len(copies), nodes-1, copies)
		}
		b.ReportMetric(one.Seconds(), "s-one-copy")
		b.ReportMetric(chain.Seconds(), fmt.Sprintf("s-chain-%d", nodes-1))
		b.ReportMetric(chain.Seconds()/one.Seconds(), "ratio")
		for _, c := range copies {
			use := c.MBps * 1e6 / fanOutRate
			b.ReportMetric(use, "link-use-"+c.Node)
			fmt.Printf("copy to %s from %q: %d bytes in %.2fs, %.1f MB/s (%.0f %% of the %d MB/s link)\n",
				c.Node, c.From, c.Bytes, c.Seconds, c.MBps, 100*use, fanOutRate/1_000_000)
		}
		fmt.Printf("fan-out on %d MB/s links: one copy's step %.2fs, the chain to %d nodes %.2fs, ratio %.2f (a star would be about %d)\n",
			fanOutRate/1_000_000, one.Seconds(), nodes-1, chain.Seconds(), chain.Seconds()/one.Seconds(), nodes-1)
	}
}
