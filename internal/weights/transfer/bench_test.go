package transfer

import (
	"fmt"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// BenchmarkFanOut copies a 64 MB model (4 files) over links shaped to 16 MB/s each way per
// node, in-process on loopback: one copy (head → one node), a chain to 8 nodes (head and 7)
// and a star to 4 (the head serving 4 nodes at once). It reports each fan-out's time as
// a multiple of the one copy's, and the chain's link utilisation (the model's size over
// the time its last node took, against the rate). The chain's time should not grow with
// the nodes; the star's grows with them, its head's link carrying one copy per node.
func BenchmarkFanOut(b *testing.B) {
	const (
		rate  = 16e6
		count = 4
		size  = 16 << 20
	)
	run := func(nodes int, chain bool) time.Duration {
		fleet := newFleet(b, nodes, rate)
		files := writeModel(b, fleet[0], count, size)
		out := runFanOut(b, fleet, files, chain, nil)
		for n, err := range out.errs {
			if err != nil {
				b.Fatalf("%s: %v", n, err)
			}
		}
		return out.took
	}
	for range b.N {
		one := run(2, true)
		chain8 := run(8, true)
		star4 := run(5, false)
		total := float64(count * size)
		b.ReportMetric(one.Seconds(), "s/one-copy")
		b.ReportMetric(chain8.Seconds()/one.Seconds(), "chain8/one")
		b.ReportMetric(star4.Seconds()/one.Seconds(), "star4/one")
		b.ReportMetric(total/chain8.Seconds()/rate, "chain8-link-use")
		fmt.Printf("fan-out of %s at %.0f MB/s per link: one copy %.2fs; chain to 8 nodes %.2fs (%.2f× one copy, link use %.0f%%); star to 4 nodes %.2fs (%.2f×)\n",
			weights.HumanSize(int64(total)), rate/1e6, one.Seconds(), chain8.Seconds(), chain8.Seconds()/one.Seconds(),
			100*total/chain8.Seconds()/rate, star4.Seconds(), star4.Seconds()/one.Seconds())
	}
}
