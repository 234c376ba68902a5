package dataplane

import (
	"fmt"
	"math"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// Modes of the spec's data_plane.
const (
	// Require fails the deploy when RDMA is planned and a rank is not on it.
	Require = "require"
	// Warn serves anyway and says so.
	Warn = "warn"
	// Skip runs no proof.
	Skip = "skip"
)

// DefaultMinFraction is the share of the link's speed below which the measured bus
// bandwidth is a warning: half, which one rail of two on a DGX Spark pair reaches at most
// (upstream.md §9).
const DefaultMinFraction = 0.5

// Node is one node's rank as the decision needs it: the parsed output and what the agent
// knows of its container.
type Node struct {
	Node string `json:"node"`
	Rank int    `json:"rank"`
	// HCAs are the HCA ports the plan gave this node (NCCL_IB_HCA), "mlx5_0:1".
	HCAs []string `json:"hcas,omitempty"`
	// Mapped are the verbs devices the agent mapped into the container
	// (/dev/infiniband/uverbsN); MapNote says why some or all were not.
	Mapped  []string `json:"mapped,omitempty"`
	MapNote string   `json:"map_note,omitempty"`
	// Verbs says the image holds libibverbs (release.Image.Verbs).
	Verbs bool `json:"verbs"`
	// EnvDisables names a setting of the node's env that turns RDMA off
	// (NCCL_IB_DISABLE=1, NCCL_NET=Socket), if any.
	EnvDisables string `json:"env_disables,omitempty"`
	// LinkGbps is the speed of the node's planned rails together (sysfs), Gb/s; 0 unknown.
	LinkGbps float64 `json:"link_gbps,omitempty"`
	// Output is the proof's output, parsed.
	Output Rank `json:"output"`
	// ExitCode is the program's.
	ExitCode int `json:"exit_code"`
}

// Expect is what the plan says the data plane should be.
type Expect struct {
	Mode string `json:"mode"`
	// RDMA: the plan lists HCAs (Rails of them, on every node).
	RDMA  bool `json:"rdma"`
	Rails int  `json:"rails"`
	// MinFraction of the link speed below which bandwidth is a warning (0: the default).
	MinFraction float64 `json:"min_fraction,omitempty"`
	// Links are the node pairs the proof's ring crosses where the data plane is a graph of
	// cables (a triangle, a ring) rather than rails every node shares; Shape names it
	// ("ring node-a-node-b-node-c-node-d"). Empty on rails.
	Links [][2]string `json:"links,omitempty"`
	Shape string      `json:"shape,omitempty"`
}

// LinkVerdict is the transport NCCL used between two nodes, as either end's channels say.
type LinkVerdict struct {
	A         string `json:"a"`
	B         string `json:"b"`
	Transport string `json:"transport"` // IB, Socket, or "unseen" (no channel line names it)
}

// Verdict is the decision.
type Verdict struct {
	// Transport is every rank's (IB, Socket), or "mixed: node-a IB, node-b Socket".
	Transport string `json:"transport"`
	// Rails is how many HCAs every rank's NCCL uses (the fewest).
	Rails int `json:"rails,omitempty"`
	// BusBW is the slowest rank's best bus bandwidth, GB/s: on a ring all_reduce, what
	// each hop carries.
	BusBW float64 `json:"busbw_gbs"`
	// Links are the transport per pair of Expect.Links.
	Links []LinkVerdict `json:"links,omitempty"`
	// Summary is status's line after "data plane: ".
	Summary string `json:"summary"`
	// Findings name each node that is not on the planned data plane, and the likely cause.
	Findings []string `json:"findings,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// ErrType and Err are the failure, when the mode makes the findings one.
	ErrType string `json:"err_type,omitempty"`
	Err     string `json:"err,omitempty"`
}

// Decide judges every rank's output against the plan.
func Decide(e Expect, nodes []Node) Verdict {
	var v Verdict
	if len(nodes) == 0 {
		v.Summary = "not proven (no ranks)"
		return v
	}
	var transports []string // distinct, in rank order (no map: workflows call Decide)
	var per []string
	v.Rails, v.BusBW = math.MaxInt, math.Inf(1)
	var failed, degraded []string
	for _, n := range nodes {
		o := n.Output
		t := o.Transport
		if t == "" {
			t = "none"
		}
		transports = appendNew(transports, t)
		per = append(per, n.Node+" "+t)
		v.Rails = min(v.Rails, len(o.HCAs))
		if o.Transport != IB {
			v.Rails = 0
		}
		v.BusBW = min(v.BusBW, o.BusBW)
		if e.RDMA && (o.Transport != IB || o.RegMR != "" || o.NoNetPlugin) {
			why := cause(n)
			if o.Error != "" {
				why += fmt.Sprintf(" [the proof failed in %s: %s]", o.Phase, o.Error)
			} else if !o.Finished && o.Transport == "" {
				why += fmt.Sprintf(" [the proof printed no NCCL line and no result; exit %d]", n.ExitCode)
			}
			degraded = append(degraded, fmt.Sprintf("%s (rank %d) is on %s, not RDMA: %s", n.Node, n.Rank, describeTransport(o), why))
			continue
		}
		switch {
		case o.Error != "":
			failed = append(failed, fmt.Sprintf("%s (rank %d) failed in %s: %s", n.Node, n.Rank, o.Phase, o.Error))
		case !o.Finished:
			failed = append(failed, fmt.Sprintf("%s (rank %d) printed no result (exit %d)", n.Node, n.Rank, n.ExitCode))
		case !o.SumOK:
			failed = append(failed, fmt.Sprintf("%s (rank %d): all_reduce gave %g, want %g", n.Node, n.Rank, o.Got, o.Expected))
		}
		if e.RDMA && o.Transport == IB && len(n.HCAs) > 0 && len(o.HCAs) < len(n.HCAs) {
			v.Warnings = append(v.Warnings, fmt.Sprintf("%s: NCCL uses %d of the %d planned HCAs (%s of %s)", n.Node, len(o.HCAs), len(n.HCAs), strings.Join(o.HCAs, ","), strings.Join(n.HCAs, ",")))
		}
		frac := e.MinFraction
		if frac == 0 {
			frac = DefaultMinFraction
		}
		// On rails every hop of the ring crosses all of a node's HCAs at once; on a graph of
		// cables (a triangle, a ring) a hop is one cable, one HCA port of the node's.
		gbps, of := n.LinkGbps, "its planned links'"
		if len(e.Links) > 0 && len(n.HCAs) > 1 {
			gbps, of = n.LinkGbps/float64(len(n.HCAs)), "one planned link's"
		}
		if gbps > 0 && o.Finished && o.BusBW*8 < frac*gbps {
			v.Warnings = append(v.Warnings, fmt.Sprintf("%s: bus bandwidth %.1f GB/s is below %.0f%% of %s %.0f Gb/s (%.1f GB/s)",
				n.Node, o.BusBW, frac*100, of, gbps, gbps/8))
		}
	}
	if math.IsInf(v.BusBW, 1) {
		v.BusBW = 0
	}
	if v.Rails == math.MaxInt {
		v.Rails = 0
	}
	switch {
	case len(transports) == 1:
		v.Transport = transports[0]
	default:
		v.Transport = "mixed: " + strings.Join(per, ", ")
	}
	v.Links = linkVerdicts(e, nodes)
	for _, l := range v.Links {
		if e.RDMA && l.Transport != IB && l.Transport != "unseen" {
			degraded = append(degraded, fmt.Sprintf("%s-%s is on %s, not RDMA", l.A, l.B, l.Transport))
		}
	}
	v.Summary = summary(v, e)
	v.Findings = append(degraded, failed...)
	switch {
	case len(degraded) > 0:
		v.ErrType = failure.DataPlaneDegraded
		on := fmt.Sprintf("%d rail(s)", e.Rails)
		if len(e.Links) > 0 {
			on = fmt.Sprintf("%d link(s)", len(e.Links))
		}
		v.Err = fmt.Sprintf("the plan has RDMA on %s but NCCL does not use it: %s", on, strings.Join(degraded, "; "))
		if len(failed) > 0 {
			v.Err += "; also " + strings.Join(failed, "; ")
		}
	case len(failed) > 0:
		v.ErrType = failure.DataPlaneFailed
		v.Err = "the data-plane proof's collective failed: " + strings.Join(failed, "; ")
	}
	if e.Mode == Warn && v.ErrType != "" {
		v.Warnings = append([]string{"data_plane: warn: " + v.ErrType + ": " + v.Err}, v.Warnings...)
		v.ErrType, v.Err = "", ""
	}
	return v
}

func describeTransport(o Rank) string {
	switch {
	case o.Transport != "":
		return o.Transport
	case o.Error != "":
		return "no network (NCCL failed to initialise)"
	}
	return "an unknown transport"
}

// linkVerdicts reads each pair's transport from its ends' channel lines.
func linkVerdicts(e Expect, nodes []Node) []LinkVerdict {
	if len(e.Links) == 0 {
		return nil
	}
	rank := map[string]int{}
	for _, n := range nodes {
		rank[n.Node] = n.Rank
	}
	var out []LinkVerdict
	for _, l := range e.Links {
		lv := LinkVerdict{A: l[0], B: l[1], Transport: "unseen"}
		for _, n := range nodes {
			other := ""
			switch n.Node {
			case l[0]:
				other = l[1]
			case l[1]:
				other = l[0]
			default:
				continue
			}
			for _, p := range n.Output.Peers {
				if r, ok := rank[other]; ok && p.Rank == r && (lv.Transport == "unseen" || lv.Transport == IB) {
					lv.Transport = p.Transport
				}
			}
		}
		out = append(out, lv)
	}
	return out
}

func summary(v Verdict, e Expect) string {
	bw := fmt.Sprintf("%.1f GB/s bus bandwidth", v.BusBW)
	if len(v.Links) > 0 && v.Transport == IB {
		ib := 0
		for _, l := range v.Links {
			if l.Transport == IB {
				ib++
			}
		}
		s := fmt.Sprintf("IB on %d %s", ib, plural(ib, "link", "links"))
		if e.Shape != "" {
			s += " (" + e.Shape + ")"
		}
		if unseen := len(v.Links) - ib; unseen > 0 {
			s += fmt.Sprintf(", %d not seen in NCCL's channel lines", unseen)
		}
		return fmt.Sprintf("%s, %.1f GB/s per hop", s, v.BusBW)
	}
	switch {
	case v.Transport == IB:
		return fmt.Sprintf("IB on %d %s, %s", v.Rails, plural(v.Rails, "rail", "rails"), bw)
	case v.Transport == Socket && e.RDMA:
		return "Socket: NCCL is NOT using RDMA (plain TCP sockets, although the plan has RDMA), " + bw
	case v.Transport == Socket:
		return "Socket (no RDMA planned), " + bw
	case v.Transport == "none":
		return "not proven: NCCL chose no network"
	case e.RDMA:
		return v.Transport + " (NCCL is NOT using RDMA on every node), " + bw
	}
	return v.Transport + ", " + bw
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// cause names the likely reason a rank is not on RDMA, most specific first.
func cause(n Node) string {
	o := n.Output
	switch {
	case o.NCCL == "" && o.Transport == "" && !o.Finished && o.Error == "" && (n.ExitCode == 126 || n.ExitCode == 127):
		// The shell's "not found" / "not executable": the program never ran, so nothing
		// was learnt about NCCL.
		return fmt.Sprintf("the proof's program did not run (exit %d: no python3 with torch in the image's PATH?); NCCL was never asked", n.ExitCode)
	case !n.Verbs:
		return "the image has no libibverbs (libibverbs.so.1), so NCCL cannot load verbs; use an image with libibverbs1 and its provider (libmlx5), as stock vLLM images have"
	case n.EnvDisables != "":
		return fmt.Sprintf("its env sets %s, which turns NCCL's RDMA off; remove it from the node's env", n.EnvDisables)
	case len(n.Mapped) == 0 || (o.UVerbs != nil && len(o.UVerbs) == 0) || (o.IBNoDevice && len(o.UVerbs) == 0):
		why := "no /dev/infiniband/uverbs* device in the container, so libibverbs finds no device (`NET/IB : No device found.`)"
		if n.MapNote != "" {
			why += ": " + n.MapNote
		}
		if o.NoNetPlugin {
			why += " (NCCL_NET forces IB: `Failed to initialize any NET plugin`)"
		}
		return why
	case o.RegMR != "" || (o.Memlock != "" && !o.MemlockUnlimited()):
		limit := o.Memlock
		if limit == "" {
			limit = "limited"
		} else if limit != "unlimited" {
			limit += " bytes"
		}
		w := fmt.Sprintf("memlock: RLIMIT_MEMLOCK is %s and the container lacks IPC_LOCK, so ibv_reg_mr cannot pin NCCL's buffers", limit)
		if o.RegMR != "" {
			w += " (NCCL: " + o.RegMR + ")"
		}
		return w + "; give the containers --ulimit memlock=-1:-1 (the agent's --ulimits) or IPC_LOCK"
	case o.IBNoDevice:
		return "libibverbs lists no device although the container has " + strings.Join(o.UVerbs, ",") + " (the HCAs' driver or provider, libmlx5, missing in the image?)"
	case len(o.HCAs) == 0 && len(n.HCAs) > 0:
		return fmt.Sprintf("NCCL_IB_HCA=%s matches none of the HCAs NCCL found (names are case-sensitive; `=` makes them exact)", strings.Join(n.HCAs, ","))
	}
	return "NCCL chose sockets for a reason the proof's lines do not show; read them (NCCL_DEBUG=INFO) in the proof's output"
}
