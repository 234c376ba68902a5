package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/tpdeploy/tpdeploy/internal/codec"
	"github.com/tpdeploy/tpdeploy/internal/connect"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/control"
	"github.com/tpdeploy/tpdeploy/internal/hostmem"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/release"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
	"github.com/tpdeploy/tpdeploy/workflows"
)

func helpOK(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func cmdDeploy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("deploy", "deploy -f spec.yaml [--watch]", stderr)
	file := c.fs.String("f", "", "cluster spec (YAML or JSON)")
	watch := c.fs.Bool("watch", false, "follow the deploy until it serves or fails")
	every := c.fs.Duration("report-every", 0, "how often the serving watch reports progress (default 10s)")
	if _, err := c.parse(args); err != nil {
		return helpOK(err)
	}
	s, ctl, closeFn, err := c.specAndController(*file)
	if err != nil {
		return err
	}
	defer closeFn()
	if s.Replicas > 1 {
		return rollDeploy(ctx, ctl, workflows.DeployRequest{Spec: s, Trigger: "cli", ReportEvery: spec.Duration(*every)}, stdout)
	}
	run, joined, err := ctl.DeployOrJoin(ctx, workflows.DeployRequest{Spec: s, Trigger: "cli", ReportEvery: spec.Duration(*every)})
	if err != nil {
		return err
	}
	if joined {
		fmt.Fprintf(stdout, "a deploy of the same spec of %s is running: joined workflow %s run %s\n", s.Name, run.GetID(), run.GetRunID())
	} else {
		fmt.Fprintf(stdout, "deploy of %s started: workflow %s run %s\n", s.Name, run.GetID(), run.GetRunID())
	}
	if !*watch {
		return nil
	}
	return watchDeploy(ctx, ctl, s.Name, stdout)
}

// rollDeploy deploys a spec's replicas one at a time (control.Roll), saying each as it
// serves; it waits for them all (the next replica starts only once the one before serves).
func rollDeploy(ctx context.Context, ctl control.Controller, req workflows.DeployRequest, stdout io.Writer) error {
	fmt.Fprintf(stdout, "deploying %s as %d replicas, one at a time: %s\n", req.Spec.Name, req.Spec.Replicas, strings.Join(memberNames(req.Spec), ", "))
	_, err := ctl.Roll(ctx, req, func(s control.RollStep) {
		if s.Err != nil {
			fmt.Fprintf(stdout, "replica %s failed after %s: %v\n", s.Member, s.Took.Round(time.Second), s.Err)
			return
		}
		fmt.Fprintf(stdout, "replica %s serves at %s (%s)\n", s.Member, s.Result.Endpoint, s.Took.Round(time.Second))
		if s.Result.Router != "" {
			fmt.Fprintf(stdout, "router: %s\n", s.Result.Router)
		}
	})
	return err
}

func memberNames(s spec.Cluster) []string {
	var out []string
	for _, m := range s.Members() {
		out = append(out, m.Name)
	}
	return out
}

// watchDeploy follows the cluster's deploy until it closes, drawing progress.
func watchDeploy(ctx context.Context, ctl control.Controller, cluster string, stdout io.Writer) error {
	tty := isTerminal(stdout)
	last := ""
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := ctl.Status(ctx, cluster)
		if err != nil {
			return err
		}
		line := progressLine(st.State)
		if st.State.Phase == workflows.PhaseModelCopy && len(st.Copies) > 0 {
			parts := make([]string, len(st.Copies))
			for i, p := range st.Copies {
				parts[i] = copyLine(p)
			}
			line = strings.Join(parts, "; ")
		}
		if line != last {
			if tty {
				fmt.Fprintf(stdout, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(stdout, line)
			}
			last = line
		}
		if !st.Running {
			if tty {
				fmt.Fprintln(stdout)
			}
			if st.Teardown != nil {
				return printTornDown(stdout, cluster, st)
			}
			return printOutcome(stdout, st)
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(stdout, "\nstopped watching; the deploy goes on (starter status --watch %s)\n", cluster)
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// copyLine is a model download or copy in flight, from its heartbeat (the agents
// heartbeat every second; the server keeps one every few seconds): the bytes in place of
// the total on that node, and what crosses its link now.
func copyLine(p contract.SyncProgress) string {
	pct := 0
	if p.Total > 0 {
		pct = int(100 * p.Done / p.Total)
	}
	what := "copying the model to " + p.Node
	switch p.From {
	case "":
	case "hub":
		what = "downloading the model to " + p.Node + " from the hub"
	default:
		what += " from " + p.From
	}
	return fmt.Sprintf("%s: %s of %s (%d%%) at %.0f MB/s", what, weights.HumanSize(p.Done), weights.HumanSize(p.Total), pct, p.MBps)
}

// copiedLine is a model download or copy done.
func copiedLine(mc workflows.ModelCopy) string {
	what := "model copied to " + mc.Node
	switch mc.From {
	case "":
	case "hub":
		what = "model downloaded to " + mc.Node + " from the hub"
	default:
		what += " from " + mc.From
	}
	return fmt.Sprintf("%s: %d files, %s in %.1fs (%.0f MB/s)", what, mc.Files, weights.HumanSize(mc.Bytes), mc.Seconds, mc.MBps)
}

// progressLine is one line: the phase, and during loading a bar with shards and ETA.
func progressLine(s workflows.State) string {
	p := s.Progress
	if s.Phase == workflows.PhaseWaitingUntilServing && p.ShardsTotal > 0 && !p.Serving {
		const width = 30
		filled := width * p.ShardsLoaded / p.ShardsTotal
		bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
		line := fmt.Sprintf("loading weights %s %3d%% %d/%d shards", bar, p.Percent, p.ShardsLoaded, p.ShardsTotal)
		if p.ETA > 0 {
			line += fmt.Sprintf(", eta %s", p.ETA.Round(time.Second))
		}
		return line
	}
	if s.Details != "" {
		return s.Details
	}
	return s.Phase
}

func printOutcome(w io.Writer, st control.Status) error {
	if st.Result != nil {
		r := st.Result
		fmt.Fprintf(w, "serving: %s\n", r.Endpoint)
		fmt.Fprintf(w, "  models:  %s/v1/models\n", r.Endpoint)
		if r.Router != "" {
			// The fleet's one endpoint: every model routed there, this one included.
			fmt.Fprintf(w, "router: %s\n", r.Router)
		}
		if r.Plan.RayAddress != "" {
			fmt.Fprintf(w, "  subnet:  %s (ray at %s)\n", r.Plan.Subnet, r.Plan.RayAddress)
		} else {
			fmt.Fprintf(w, "  subnet:  %s\n", r.Plan.Subnet)
		}
		printEngine(w, "  ", r.Images, r.Engine)
		for _, warn := range r.Warnings {
			fmt.Fprintf(w, "  warning: %s\n", warn)
		}
		for _, mc := range r.ModelCopies {
			fmt.Fprintf(w, "  %s\n", copiedLine(mc))
		}
		printSteps(w, r.Steps)
		return nil
	}
	if len(st.State.Compensations) > 0 {
		fmt.Fprintf(w, "compensated: %s\n", strings.Join(st.State.Compensations, ", "))
	}
	if st.Err != nil {
		return st.Err
	}
	return fmt.Errorf("deploy %s", strings.ToLower(st.Closed))
}

// printSupervision shows the supervisor's view and every incident it recorded.
func printSupervision(w io.Writer, sv *workflows.Supervision) {
	if sv == nil {
		return
	}
	switch {
	case sv.Degraded:
		fmt.Fprintf(w, "  supervisor: DEGRADED: %s; next try %s, or sooner if a node reboots, a new spec serves or `starter redeploy %s`\n",
			sv.LastCause, clockOrDash(sv.NextTry), sv.Cluster)
	case sv.LastCheck.IsZero():
		fmt.Fprintf(w, "  supervisor: no check yet\n")
	default:
		health := "not serving"
		if sv.Healthy {
			health = "serving"
		}
		fmt.Fprintf(w, "  supervisor: %s at last check %s (%s)\n", health, clockOrDash(sv.LastCheck), sv.Detail)
	}
	if sv.Canary != "" {
		fmt.Fprintf(w, "  canary: %s\n", sv.Canary)
	}
	if sv.Refused != "" {
		fmt.Fprintf(w, "  supervisor: %s\n", sv.Refused)
	}
	fmt.Fprintf(w, "  supervisor: %d incidents, %d redeploys\n", len(sv.Incidents), sv.Redeploys)
	for _, inc := range sv.Incidents {
		where := ""
		if inc.Node != "" {
			where = " " + inc.Node
		}
		fmt.Fprintf(w, "  incident %s%s: %s%s -> %s; %s (took %s)\n", clockOrDash(inc.At), where, inc.CauseLabel(), inc.Seen, inc.Action, inc.OutcomeText(), inc.Took.Round(time.Second))
		if inc.RouterNote != "" {
			fmt.Fprintf(w, "    %s\n", inc.RouterNote)
		}
	}
	// What the nodes printed last before the latest recovery tore the cluster down.
	for i := len(sv.Incidents) - 1; i >= 0; i-- {
		inc := sv.Incidents[i]
		if len(inc.LastOutput) == 0 {
			continue
		}
		nodes := make([]string, 0, len(inc.LastOutput))
		for n := range inc.LastOutput {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		for _, n := range nodes {
			lines := strings.Split(strings.TrimRight(inc.LastOutput[n], "\n"), "\n")
			if len(lines) > 6 {
				lines = lines[len(lines)-6:]
			}
			fmt.Fprintf(w, "  last output on %s before the recovery of %s:\n", n, clockOrDash(inc.At))
			for _, l := range lines {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
		break
	}
}

func printSteps(w io.Writer, steps []workflows.StepTiming) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, s := range steps {
		fmt.Fprintf(tw, "  %s\t%s\n", s.Step, s.Duration.Round(time.Millisecond))
	}
	_ = tw.Flush()
}

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("status", "status CLUSTER [--watch] [--json]", stderr)
	watch := c.fs.Bool("watch", false, "follow a running deploy")
	asJSON := c.fs.Bool("json", false, "print the state as JSON")
	cluster, err := c.cluster(args)
	if err != nil {
		return helpOK(err)
	}
	ctl, closeFn, err := c.controller()
	if err != nil {
		return err
	}
	defer closeFn()
	if *watch {
		return watchDeploy(ctx, ctl, cluster, stdout)
	}
	st, err := ctl.Status(ctx, cluster)
	if err != nil {
		return err
	}
	if *asJSON {
		if st.Teardown != nil {
			return printTornDown(io.Discard, cluster, st)
		}
		return writeJSON(stdout, st.State)
	}
	return printStatus(stdout, cluster, st)
}

// printStatus shows the cluster's latest deploy, or the teardown that came after it.
func printStatus(stdout io.Writer, cluster string, st control.Status) error {
	if st.Teardown != nil {
		return printTornDown(stdout, cluster, st)
	}
	state := "running"
	if !st.Running {
		state = strings.ToLower(st.Closed)
	}
	fmt.Fprintf(stdout, "cluster %s: %s (workflow %s run %s)\n", cluster, state, st.WorkflowID, st.RunID)
	if r := st.Refused; r != nil {
		specHash := "?"
		if r.Spec != nil {
			specHash = r.Spec.Hash()
		}
		fmt.Fprintf(stdout, "  refused: deploy run %s of spec %s, staged beside this one, failed before it stopped anything; this one still serves.\n           %v\n",
			r.RunID, specHash, r.Err)
	}
	fmt.Fprintf(stdout, "  phase:   %s\n  details: %s\n", st.State.Phase, st.State.Details)
	if st.State.Router != "" && (st.Running || st.Result == nil) {
		fmt.Fprintf(stdout, "router: %s\n", st.State.Router) // printOutcome shows a result's
	}
	if sg := st.State.Staged; sg != nil {
		if sg.SwappedAt.IsZero() {
			fmt.Fprintf(stdout, "  staged:  beside deploy run %s (spec %s), which serves at %s until the swap\n", sg.Serving.RunID, sg.Serving.SpecHash, sg.Serving.Endpoint)
		} else {
			fmt.Fprintf(stdout, "  staged:  %s beside deploy run %s (spec %s), then replaced it at %s\n", sg.Took.Round(time.Millisecond), sg.Serving.RunID, sg.Serving.SpecHash, sg.SwappedAt.Format(time.RFC3339))
		}
	}
	if st.State.Plan != nil {
		ray := ""
		if st.State.Plan.RayAddress != "" {
			ray = " (ray at " + st.State.Plan.RayAddress + ")"
		}
		fmt.Fprintf(stdout, "  subnet:  %s%s\n", st.State.Plan.Subnet, ray)
	}
	if dp := st.State.DataPlane; dp != nil {
		fmt.Fprintf(stdout, "  data plane: %s\n", dp.Summary)
		for _, l := range dp.Links {
			if l.Transport != "IB" {
				fmt.Fprintf(stdout, "    %s-%s: %s\n", l.A, l.B, l.Transport)
			}
		}
	} else if st.State.Plan != nil && len(st.State.Plan.UsedRails()) > 0 && st.State.Plan.DataPlane == spec.DataPlaneSkip {
		fmt.Fprintf(stdout, "  data plane: not proven (data_plane: skip)\n")
	}
	if st.Running || st.Result == nil {
		printEngine(stdout, "  ", st.State.Images, st.State.Engine) // printOutcome shows a result's
	}
	if m := st.State.Progress.Memory; m != nil {
		when := "now"
		if !st.Running {
			when = "at the last report, " + m.At.Format(time.RFC3339)
		}
		lowest := ""
		if m.LowestBytes > 0 {
			lowest = fmt.Sprintf("lowest %s available during the load, ", hostmem.Human(m.LowestBytes))
		}
		fmt.Fprintf(stdout, "  host memory on %s: %s%s %s (guard floor %s, of %s)\n", m.Node, lowest, hostmem.Human(m.AvailableBytes), when, hostmem.Human(m.FloorBytes), hostmem.Human(m.TotalBytes))
	}
	if len(st.State.Containers) > 0 {
		// The deploy's own record: the agents are not asked here.
		fmt.Fprintf(stdout, "  containers the deploy run started:\n")
		for _, ctr := range st.State.Containers {
			fmt.Fprintf(stdout, "    %s on %s (%s)\n", ctr.Name, ctr.Node, ctr.Role)
		}
	}
	for _, p := range st.Copies {
		fmt.Fprintf(stdout, "  %s\n", copyLine(p))
	}
	if st.Running {
		for _, mc := range st.State.ModelCopies {
			fmt.Fprintf(stdout, "  %s\n", copiedLine(mc))
		}
	}
	printSupervision(stdout, st.Supervision)
	if st.Running {
		return nil
	}
	return printOutcome(stdout, st)
}

// printTornDown says that a teardown came after the cluster's latest deploy, and returns
// the reason to exit non-zero: nothing that deploy started is there to report (or, while
// the teardown runs or after it failed, what is there is being or was not removed).
func printTornDown(w io.Writer, cluster string, st control.Status) error {
	td := st.Teardown
	run := fmt.Sprintf("teardown workflow %s run %s", td.WorkflowID, td.RunID)
	var err error
	switch {
	case td.Running:
		fmt.Fprintf(w, "cluster %s: being torn down (%s, started %s)\n", cluster, run, clockOrDash(td.Started))
		err = fmt.Errorf("cluster %s is being torn down", cluster)
	case td.Err != nil || td.Closed != "Completed":
		why := td.Err
		if why == nil {
			why = errors.New(strings.ToLower(td.Closed))
		}
		fmt.Fprintf(w, "cluster %s: its teardown did not complete (%s, ended %s): %v\n  what it did not remove may remain: run `starter teardown %s` again\n",
			cluster, run, clockOrDash(td.Ended), why, cluster)
		err = fmt.Errorf("cluster %s: teardown %s: %w", cluster, strings.ToLower(td.Closed), why)
	default:
		fmt.Fprintf(w, "cluster %s: torn down at %s (%s; %d containers removed)\n", cluster, clockOrDash(td.Ended), run, td.Removed)
		err = fmt.Errorf("cluster %s was torn down at %s", cluster, clockOrDash(td.Ended))
	}
	state := "running"
	if !st.Running {
		state = strings.ToLower(st.Closed)
	}
	fmt.Fprintf(w, "  the deploy before it: workflow %s run %s (%s)\n", st.WorkflowID, st.RunID, state)
	return err
}

func cmdTeardown(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("teardown", "teardown CLUSTER [-f spec.yaml]", stderr)
	file := c.fs.String("f", "", "cluster spec; default: the spec of the cluster's latest deploy")
	cluster, err := c.cluster(args)
	if err != nil {
		return helpOK(err)
	}
	var s *spec.Cluster
	if *file != "" {
		got, err := readSpec(*file)
		if err != nil {
			return err
		}
		if got.Name != cluster {
			return fmt.Errorf("%s describes cluster %q, not %q", *file, got.Name, cluster)
		}
		s = &got
	}
	ctl, closeFn, err := c.controller()
	if err != nil {
		return err
	}
	defer closeFn()
	if s != nil && s.Replicas > 1 {
		// Each replica is a cluster of its own, torn down from its own latest deploy.
		for _, m := range memberNames(*s) {
			if err := teardownOne(ctx, ctl, m, nil, stdout); err != nil {
				return err
			}
		}
		return nil
	}
	return teardownOne(ctx, ctl, cluster, s, stdout)
}

func teardownOne(ctx context.Context, ctl control.Controller, cluster string, s *spec.Cluster, stdout io.Writer) error {
	res, err := ctl.Teardown(ctx, cluster, s)
	if err != nil {
		return err
	}
	if res.NeverDeployed {
		fmt.Fprintf(stdout, "cluster %s was never deployed: nothing to tear down\n", cluster)
		return nil
	}
	n := 0
	for _, r := range res.Removed {
		for _, name := range r.Removed {
			fmt.Fprintf(stdout, "removed %s on %s\n", name, r.Node)
			n++
		}
	}
	fmt.Fprintf(stdout, "cluster %s torn down (%d containers removed)\n", cluster, n)
	return nil
}

func cmdRedeploy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("redeploy", "redeploy CLUSTER [--reason TEXT]", stderr)
	reason := c.fs.String("reason", "operator", "what to record as the incident's cause")
	cluster, err := c.cluster(args)
	if err != nil {
		return helpOK(err)
	}
	ctl, closeFn, err := c.controller()
	if err != nil {
		return err
	}
	defer closeFn()
	if err := ctl.Redeploy(ctx, cluster, *reason); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "asked the supervisor of %s to redeploy; `starter status %s` shows the incident\n", cluster, cluster)
	return nil
}

func cmdPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// Planning over network namespaces of this host, without Temporal, was `plan --netns`;
	// it is `netns plan` (lab/netns) now, because it runs the agent's probe (netlink) in
	// this process and the operator's CLI links none of the agent's code (deps_test.go).
	c := newCommand("plan", "plan -f spec.yaml [--json]", stderr)
	file := c.fs.String("f", "", "cluster spec (YAML or JSON)")
	asJSON := c.fs.Bool("json", false, "print the report as JSON")
	if _, err := c.parse(args); err != nil {
		return helpOK(err)
	}
	var rep workflows.PlanReport
	s, ctl, closeFn, err := c.specAndController(*file)
	if err != nil {
		return err
	}
	defer closeFn()
	if rep, err = ctl.Plan(ctx, s); err != nil {
		return err
	}
	return reportPlan(stdout, s, rep, *asJSON)
}

// reportPlan prints a plan report as text or JSON; a report without a plan is an error.
func reportPlan(stdout io.Writer, s spec.Cluster, rep workflows.PlanReport, asJSON bool) error {
	if asJSON {
		if err := writeJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		printPlan(stdout, s, rep)
	}
	if rep.Error != "" {
		return errors.New(firstLine(rep.Error))
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// printEngine shows what the image holds on each node and the executor it decided.
func printEngine(w io.Writer, indent string, images []release.Image, m *release.Model) {
	if m != nil {
		for i, line := range m.Describe() {
			if i == 0 {
				fmt.Fprintf(w, "%sengine:  %s\n", indent, line)
			} else {
				fmt.Fprintf(w, "%s         %s\n", indent, line)
			}
		}
	}
	for _, img := range images {
		cached := ""
		if img.Cached {
			cached = " (cached)"
		}
		fmt.Fprintf(w, "%simage:   %s: %s, id %s%s\n", indent, img.Node, img.Summary(), shortImageID(img.ID), cached)
	}
}

func shortImageID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	return id[:min(12, len(id))]
}

// printHub lists model.source: hub's files: what the head downloads once and every node
// gets, at the commit the revision resolved to.
func printHub(w io.Writer, h contract.HubModel) {
	rev := h.Revision
	if rev == "" {
		rev = "main"
	}
	fmt.Fprintf(w, "Model from the hub\n  %s@%s = commit %s on %s: %d files, %s (%s; %d other files of the repository left out)\n",
		h.Repo, rev, h.Commit, h.Endpoint, len(h.Files), weights.HumanSize(h.Size()), h.Format, h.Skipped)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, f := range h.Files {
		fmt.Fprintf(tw, "  %s\t%s\n", f.Name, weights.HumanSize(f.Size))
	}
	_ = tw.Flush()
}

func printPlan(w io.Writer, s spec.Cluster, rep workflows.PlanReport) {
	if len(rep.Images) > 0 || rep.Engine != nil {
		fmt.Fprintf(w, "Image and engine\n")
		printEngine(w, "  ", rep.Images, rep.Engine)
		fmt.Fprintln(w)
	}
	if h := rep.Hub; h != nil {
		printHub(w, *h)
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "Interfaces\n")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  NODE\tLINK\tSTATE\tMTU\tSPEED\tADDRESSES\tNOTE\n")
	for _, p := range rep.Probes {
		for _, l := range p.Links {
			if l.Loopback {
				continue
			}
			state := "down"
			if l.Up {
				state = "up"
			}
			var addrs []string
			for _, a := range l.Addrs {
				if a.Addr().Is4() {
					addrs = append(addrs, a.String())
				}
			}
			note := ""
			if p.DefaultRoute != nil && p.DefaultRoute.Interface == l.Name {
				note = "default route (Ray's guess: " + p.DefaultRoute.Source.String() + ")"
			}
			for _, d := range p.RDMA {
				if d.Netdev == l.Name {
					note = strings.TrimSpace(note + " rdma " + d.Name)
				}
			}
			speed := "-"
			if l.SpeedMbps > 0 {
				speed = fmt.Sprintf("%dMb/s", l.SpeedMbps)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.Node, l.Name, state, l.MTU, speed, strings.Join(addrs, ","), note)
		}
	}
	_ = tw.Flush()

	fmt.Fprintf(w, "\nReachability (from → to)\n")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	matrix := slices.Clone(rep.Matrix)
	slices.SortStableFunc(matrix, func(a, b netplan.PairResult) int { return a.Subnet.Addr().Compare(b.Subnet.Addr()) })
	for _, r := range matrix {
		res := "ok " + r.RTT.Round(time.Microsecond).String()
		if !r.OK {
			res = "FAIL " + r.Error
		}
		fmt.Fprintf(tw, "  %s\t%s → %s\t%s\t%s\n", r.Subnet, r.From, r.To, r.Addr, res)
	}
	if len(matrix) == 0 {
		fmt.Fprintf(tw, "  (no subnet shared by every node to test)\n")
	}
	_ = tw.Flush()

	printMemory(w, s, rep)

	if rep.Plan == nil {
		fmt.Fprintf(w, "\nNo plan:\n  %s\n", strings.ReplaceAll(rep.Error, "\n", "\n  "))
		return
	}
	fmt.Fprintf(w, "\nDecision\n")
	for _, d := range rep.Plan.Decision {
		fmt.Fprintf(w, "  %s %s\n", d.Subnet, d.Reason)
	}
	if rep.Plan.RayAddress != "" {
		fmt.Fprintf(w, "\nEnvironment per node (ray head at %s)\n", rep.Plan.RayAddress)
	} else {
		fmt.Fprintf(w, "\nEnvironment per node (no Ray)\n")
	}
	for _, n := range rep.Plan.Nodes {
		fmt.Fprintf(w, "  %s (%s, %s on %s, %d GPU):\n", n.Name, n.Role, n.Address, n.Interface, n.GPUs)
		keys := make([]string, 0, len(n.Env))
		for k := range n.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "    %s=%s\n", k, n.Env[k])
		}
	}
	if f := rep.Plan.NCCL; f.Form != "" {
		fmt.Fprintf(w, "\nNCCL interface variables: %s\n  %s\n", f.Form, f.Reason)
	}
	printRails(w, *rep.Plan)
	if f := rep.Plan.Fabric; f != nil {
		fmt.Fprintln(w)
		for _, l := range f.Lines() {
			fmt.Fprintln(w, l)
		}
	}
	for _, warn := range rep.Plan.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if rep.Error != "" {
		fmt.Fprintf(w, "\nBut: %s\n", rep.Error)
	}
}

// printMemory shows each node's host memory and the budget the spec would take of it
// (hostmem.Decide, as the node's preflight decides it; the model's size is counted there,
// from the node's files, so here only where unified memory's utilization share covers it).
func printMemory(w io.Writer, s spec.Cluster, rep workflows.PlanReport) {
	util, err := hostmem.UtilizationFromArgs(s.Model.ExtraArgs)
	if err != nil {
		util = 0
	}
	printed := false
	for _, p := range rep.Probes {
		if p.Memory == nil {
			continue
		}
		if !printed {
			fmt.Fprintf(w, "\nHost memory (admission at preflight; estimates marked)\n")
			printed = true
		}
		f := *p.Memory
		if f.Error != "" {
			fmt.Fprintf(w, "  %s: unknown (%s)\n", p.Node, f.Error)
			continue
		}
		if n, ok := s.Node(p.Node); ok && n.UnifiedMemory != nil {
			f.Unified, f.UnifiedSource = *n.UnifiedMemory, "spec"
		}
		b := hostmem.Decide(hostmem.Input{Node: p.Node, Facts: f, Ranks: netplan.RanksOn(s, rep.Plan, p.Node), WorldSize: s.WorldSize(),
			GPUMemoryUtilization: util, MultiNode: len(s.Nodes) > 1})
		verdict := "fits"
		if !b.Fits {
			verdict = "DOES NOT FIT: " + b.Fix()
		}
		mem := "discrete GPU memory"
		if f.Unified {
			mem = "unified memory (" + f.UnifiedSource + ")"
		}
		psi := ""
		if f.PSISome != nil {
			psi = fmt.Sprintf(", pressure some %.2f%%", *f.PSISome)
		}
		fmt.Fprintf(w, "  %s: %s, %s%s: %s; %s\n", p.Node, mem, f.Source, psi, b.Summary(), verdict)
	}
}

// printRails shows the rails NCCL's RDMA transport may use (NCCL_IB_HCA) and those left
// out, and what the data-plane proof will decide.
func printRails(w io.Writer, p netplan.Plan) {
	if f := p.Fabric; f != nil && f.Used && len(p.UsedRails()) == 0 {
		// A triangle or a ring: no rail spans every node, the links are the data plane.
		fmt.Fprintf(w, "\nRDMA over the links: no rail spans every node; each node's NCCL_IB_HCA lists its HCAs on its links, NCCL_SOCKET_IFNAME stays on the bootstrap subnet %s\n", p.Subnet)
		fmt.Fprintf(w, "  data plane: %s over %d link(s)\n", p.DataPlane, len(f.Graph.Links))
		return
	}
	if len(p.Rails) == 0 {
		if p.Subnet.IsValid() {
			fmt.Fprintf(w, "\nRDMA rails: none (no subnet where every node has an ACTIVE HCA port): NCCL will use sockets\n")
		}
		return
	}
	fmt.Fprintf(w, "\nRDMA rails (NCCL_IB_HCA; NCCL_SOCKET_IFNAME stays the chosen interface, for NCCL's bootstrap)\n")
	for _, r := range p.Rails {
		fmt.Fprintf(w, "  %s %s\n", r.Subnet, r.Reason)
	}
	fmt.Fprintf(w, "  data plane: %s (%d rail(s) used); the proof runs one NCCL all_reduce before vLLM starts\n", p.DataPlane, len(p.UsedRails()))
}

// cmdCodecServer serves the codec key file's keys as a codec server, the endpoint the
// Temporal UI (Settings → Codec Server) and `temporal --codec-endpoint` decode through.
func cmdCodecServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("codec-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: starter codec-server --codec-key-file FILE [--addr 127.0.0.1:8081] [--ui-origin URL] [--host NAME] [--allow-encode]\n\n"+
			"Whoever reaches this server can decrypt payloads: keep it on loopback or behind the UI's access control.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:8081", "address to listen on")
	keyFile := fs.String("codec-key-file", connect.EnvOr(codec.KeyFileEnv, ""), "the agents' codec key file (env "+codec.KeyFileEnv+")")
	origins := fs.String("ui-origin", codec.DefaultUIOrigin, "comma-separated browser origins of the Temporal UI allowed to call it (CORS); a request from another origin is refused")
	hosts := fs.String("host", "", "comma-separated host names (or host:port) it answers besides loopback's, e.g. the name the UI reaches it by; any other Host header is refused (DNS rebinding)")
	encode := fs.Bool("allow-encode", false, "answer /encode too (the UI's Start Workflow and Signal forms): whoever reaches it can then make payloads every agent accepts")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if *keyFile == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	c, err := codec.Load(*keyFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("codec server: %w", err)
	}
	o := codec.HandlerOptions{Origins: strings.Split(*origins, ","), Encode: *encode}
	if *hosts != "" {
		o.Hosts = strings.Split(*hosts, ",")
	}
	srv := &http.Server{Handler: codec.NewHTTPHandler(c.AllowPlaintext(), o), ReadHeaderTimeout: 10 * time.Second}
	what := "decoding only"
	if *encode {
		what = "encoding with key " + c.KeyID() + " and decoding"
	}
	fmt.Fprintf(stdout, "codec server on http://%s (%s; UI origins %s)\n", ln.Addr(), what, *origins)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("codec server: %w", err)
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	}
}
