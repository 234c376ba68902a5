// Command proofread reads the data-plane proof's output of each rank (files named on the
// command line, in rank order) and prints what tpdeploy's deploy would decide: the
// transport NCCL chose per rank, the HCAs, the all_reduce check, the bus bandwidth, and
// the verdict (DataPlaneDegraded / DataPlaneFailed) for the given expectation.
//
//	go run ./scripts/proofread [--rdma] [--mode require|warn] rank0.log rank1.log ...
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/dataplane"
)

func main() {
	rdma := flag.Bool("rdma", false, "judge as if the plan had RDMA (NCCL_IB_HCA set)")
	mode := flag.String("mode", dataplane.Require, "require or warn")
	flag.Parse()
	var nodes []dataplane.Node
	for i, f := range flag.Args() {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		r := dataplane.Parse(string(b))
		n := dataplane.Node{Node: fmt.Sprintf("rank%d", i), Rank: i, Verbs: true, Output: r, Mapped: r.UVerbs}
		nodes = append(nodes, n)
		transport := r.Transport
		if transport == "" {
			transport = "(none said)"
		}
		fmt.Printf("rank %d: transport %s, HCAs [%s], bootstrap %s, memlock %s, ipc_lock %v, uverbs [%s], torch %s, nccl %s\n",
			i, transport, strings.Join(r.HCAs, " "), r.Bootstrap, r.Memlock, r.IPCLock, strings.Join(r.UVerbs, " "), r.Torch, r.NCCL)
		for _, s := range r.Sizes {
			fmt.Printf("  %10d bytes  %8.3f ms  algbw %7.2f GB/s  busbw %7.2f GB/s\n", s.Bytes, s.Seconds*1000, s.AlgBW, s.BusBW)
		}
		switch {
		case r.Error != "":
			fmt.Printf("  FAILED in %s: %s\n", r.Phase, r.Error)
		case r.Finished:
			fmt.Printf("  all_reduce sum %v (want %v): ok=%v\n", r.Got, r.Expected, r.SumOK)
		default:
			fmt.Printf("  no result line\n")
		}
		for _, w := range r.Warnings {
			fmt.Printf("  NCCL WARN %s\n", w)
		}
	}
	v := dataplane.Decide(dataplane.Expect{Mode: *mode, RDMA: *rdma, Rails: 1}, nodes)
	fmt.Printf("data plane: %s\n", v.Summary)
	for _, w := range v.Warnings {
		fmt.Printf("warning: %s\n", w)
	}
	if v.ErrType != "" {
		fmt.Printf("%s: %s\n", v.ErrType, v.Err)
		os.Exit(1)
	}
}
