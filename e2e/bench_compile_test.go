//go:build integration

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/internal/control"
)

// compileTotal is vLLM's "torch.compile takes %.2f s in total" (monitor.py) in the logs.
var compileTotal = regexp.MustCompile(`torch\.compile takes ([0-9.]+) s in total`)

// BenchmarkCompileCache measures the second start of an engine against its first, with
// the node's compilation cache between them (activities/compilecache.go): the cluster's
// cache is emptied, it is deployed (vLLM compiles), torn down and deployed again (vLLM
// loads the compiled graphs). It prints both deploys and vLLM's own torch.compile totals,
// and their ratios. The lab's compile times are upstream's scaled down (lab/README.md), so
// the ratio, not the seconds, is the figure.
func BenchmarkCompileCache(b *testing.B) {
	s := benchSpec(b, "bench-compile")
	ctl := control.Controller{Client: tc, SignKey: theLab.SignKey}
	ctx := context.Background()
	defer func() { _, _ = ctl.Teardown(ctx, s.Name, nil) }()
	_, _ = ctl.Teardown(ctx, s.Name, nil)
	key := activities.CompileCacheKey(s.WithDefaults())
	for _, n := range s.Nodes {
		if err := os.RemoveAll(filepath.Join(theLab.NodeRoot(n.Name), activities.CompileCacheDir, key)); err != nil {
			b.Fatal(err)
		}
	}
	start := func() (time.Duration, float64) {
		since := time.Now()
		took, _ := deployOnce(b, s)
		m := compileTotal.FindStringSubmatch(clusterLogs(b, s.Name, since))
		if m == nil {
			b.Fatalf("no torch.compile line in %s's logs", s.Name)
		}
		secs, _ := strconv.ParseFloat(m[1], 64)
		if _, err := ctl.Teardown(ctx, s.Name, nil); err != nil {
			b.Fatal(err)
		}
		return took, secs
	}
	firstDeploy, firstCompile := start()
	secondDeploy, secondCompile := start()
	b.ReportMetric(firstDeploy.Seconds(), "s-deploy-cold")
	b.ReportMetric(secondDeploy.Seconds(), "s-deploy-cached")
	b.ReportMetric(firstCompile/secondCompile, "ratio-compile-cold-vs-cached")
	fmt.Printf("compilation cache (key %s):\n", key[:12])
	fmt.Printf("  first start:  deploy %.2fs, torch.compile %.2fs\n", firstDeploy.Seconds(), firstCompile)
	fmt.Printf("  second start: deploy %.2fs, torch.compile %.2fs\n", secondDeploy.Seconds(), secondCompile)
	fmt.Printf("  torch.compile first/second: %.2f; deploy first/second: %.2f\n", firstCompile/secondCompile, firstDeploy.Seconds()/secondDeploy.Seconds())
}
