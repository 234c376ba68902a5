//go:build integration

package activities

import (
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/netplan"
)

// BenchmarkPlan16Nodes measures probe + all-pairs reachability + plan for 16 nodes on real
// network namespaces, calling the activities directly (no Temporal round trips). Target:
// under 3 s per plan. It prints the wall time; nothing asserts on it.
func BenchmarkPlan16Nodes(b *testing.B) {
	_, agents := seedLab(b, 16)
	c := seedSpec(16)
	var total time.Duration
	runs := 0
	for b.Loop() {
		start := time.Now()
		probes := probeAll(b, agents)
		matrix := reach(b, agents, netplan.ListenAddrs(c, probes))
		plan, err := netplan.Choose(c, probes, matrix)
		if err != nil {
			b.Fatal(err)
		}
		if len(matrix) != 16*15 || plan.Subnet.String() != "192.168.77.0/24" {
			b.Fatalf("matrix %d pairs, subnet %s", len(matrix), plan.Subnet)
		}
		total += time.Since(start)
		runs++
	}
	b.ReportMetric(total.Seconds()/float64(runs), "s/plan")
}
