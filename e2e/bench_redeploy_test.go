//go:build integration

package e2e

import (
	"context"
	"fmt"
	"github.com/moby/moby/client"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/lab"
)

// BenchmarkRedeployOutage measures what a client of a serving cluster sees when the spec
// changes: the longest time /v1/models does not answer (polled every 25 ms) for a change
// of vLLM's arguments alone, for a change of the image deployed onto the serving cluster,
// and for the same image change made as a teardown followed by a deploy. Each kind runs a
// few times, alternating between two values, and the medians are printed with their ratio.
func BenchmarkRedeployOutage(b *testing.B) {
	s := benchSpec(b, "bench-outage")
	ctl := control.Controller{Client: tc, SignKey: theLab.SignKey}
	ctx := context.Background()
	defer func() { _, _ = ctl.Teardown(ctx, s.Name, nil) }()
	deployOnce(b, s)
	images := [2]string{lab.SimImage, "tpdeploy/sim:vllm-0.17.1"}
	lens := [2]string{"2048", "4096"}
	var args, staged, teardown, argsTotal, stagedTotal, teardownTotal []time.Duration
	kept, cur := 0, 0 // cur: the image serving
	rounds := min(benchPairs(), 3)
	measure := func(change func()) (time.Duration, time.Duration) {
		w := watchOutage(s)
		start := time.Now()
		change()
		total := time.Since(start)
		out, _, _, _ := w.outage()
		return out, total
	}
	for i := 0; i < rounds; i++ {
		head := rayHeadID(b, s)
		s.Model.ExtraArgs = []string{"--max-model-len", lens[i%2]}
		o, t := measure(func() { deployOnce(b, s) })
		args, argsTotal = append(args, o), append(argsTotal, t)
		if rayHeadID(b, s) == head {
			kept++
		}

		cur ^= 1
		s.Image = images[cur]
		o, t = measure(func() { deployOnce(b, s) })
		staged, stagedTotal = append(staged, o), append(stagedTotal, t)

		cur ^= 1
		s.Image = images[cur]
		o, t = measure(func() {
			if _, err := ctl.Teardown(ctx, s.Name, nil); err != nil {
				b.Fatal(err)
			}
			deployOnce(b, s)
		})
		teardown, teardownTotal = append(teardown, o), append(teardownTotal, t)
	}
	ma, ms, mt := median(args), median(staged), median(teardown)
	b.ReportMetric(ma.Seconds(), "s-outage-args")
	b.ReportMetric(ms.Seconds(), "s-outage-image")
	b.ReportMetric(mt.Seconds(), "s-outage-teardown-deploy")
	b.ReportMetric(ms.Seconds()/mt.Seconds(), "ratio-image-vs-teardown")
	fmt.Printf("redeploy outage (/v1/models not answering), %d rounds, medians:\n", rounds)
	fmt.Printf("  arguments only:            outage %.2fs %v (redeploy took %.2fs %v); ray head kept %d of %d\n",
		ma.Seconds(), rounded(args), median(argsTotal).Seconds(), rounded(argsTotal), kept, rounds)
	fmt.Printf("  image, onto the serving cluster: outage %.2fs %v (redeploy took %.2fs %v)\n",
		ms.Seconds(), rounded(staged), median(stagedTotal).Seconds(), rounded(stagedTotal))
	fmt.Printf("  image, teardown then deploy:     outage %.2fs %v (took %.2fs %v)\n",
		mt.Seconds(), rounded(teardown), median(teardownTotal).Seconds(), rounded(teardownTotal))
	fmt.Printf("  image change outage / teardown+deploy outage: %.2f\n", ms.Seconds()/mt.Seconds())
}

// rayHeadID is the ID of the cluster's Ray head container on node-a ("" when none).
func rayHeadID(tb testing.TB, s spec.Cluster) string {
	tb.Helper()
	info, err := eng.ContainerInspect(context.Background(), contract.ContainerName(s.Name, "node-a", contract.RoleRayHead), client.ContainerInspectOptions{})
	if err != nil {
		return ""
	}
	return info.Container.ID
}
