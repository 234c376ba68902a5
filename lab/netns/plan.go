package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/tpdeploy/tpdeploy/activities"
	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/netplan"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/workflows"
)

// `netns plan -f spec.yaml --map node-a=NS,node-b=NS` prints, as JSON, the plan report
// PlanCluster makes, without Temporal: each node is a network namespace on this host and the
// node activities run in this process. It is for checks on one machine — a lab, or the
// real-NCCL check (scripts/nccl-check.sh) that takes the plan's environment for a namespace
// topology — not for real nodes, whose agents probe their own machines.
//
// It was `starter plan --netns`. It lives here, not in the operator's CLI, because probing
// a node is the agent's code (netlink, network namespaces): the starter links none of it
// (starter/deps_test.go), and this lab tool already needs both.
func cmdPlan(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("netns plan", flag.ContinueOnError)
	file := fs.String("f", "", "cluster spec (YAML or JSON)")
	mapping := fs.String("map", "", "each node's network namespace: node=netns,...")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *file == "" || *mapping == "" {
		return errors.New("usage: netns plan -f spec.yaml --map node-a=NS,node-b=NS")
	}
	b, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	s, err := spec.Parse(b)
	if err != nil {
		return err
	}
	spaces := map[string]string{}
	for _, kv := range strings.Split(*mapping, ",") {
		node, ns, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || node == "" || ns == "" {
			return fmt.Errorf("--map %q: want node=netns[,node=netns]", *mapping)
		}
		spaces[node] = ns
	}
	rep, err := planLocal(context.Background(), s, spaces)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	if rep.Error != "" {
		first, _, _ := strings.Cut(rep.Error, "\n")
		return errors.New(first)
	}
	return nil
}

// planLocal is PlanCluster's probe, all-pairs reachability and choice, in this process.
func planLocal(ctx context.Context, s spec.Cluster, netns map[string]string) (workflows.PlanReport, error) {
	var rep workflows.PlanReport
	agents := map[string]*activities.Agent{}
	for _, n := range s.Nodes {
		ns, ok := netns[n.Name]
		if !ok {
			return rep, fmt.Errorf("node %s: no network namespace given for it", n.Name)
		}
		agents[n.Name] = activities.New(activities.Config{Name: n.Name, NetNS: ns})
	}
	for _, n := range s.Nodes {
		p, err := agents[n.Name].Probe.ProbeNode(ctx, contract.ProbeRequest{Node: n.Name, SpecGPUs: n.GPUs, DockerHost: n.DockerHost})
		if err != nil {
			return rep, fmt.Errorf("%s: probe: %w", n.Name, err)
		}
		rep.Probes = append(rep.Probes, p)
	}
	addrs := netplan.ReachAddrs(s, rep.Probes)
	listeners := map[string]contract.ListenResult{}
	defer func() {
		for node, l := range listeners {
			_ = agents[node].Reachability.CloseProbeListeners(context.Background(), contract.CloseRequest{Node: node, Token: l.Token})
		}
	}()
	for _, n := range s.Nodes {
		l, err := agents[n.Name].Reachability.OpenProbeListeners(ctx, contract.ListenRequest{Node: n.Name, Addrs: addrs[n.Name], TTL: time.Minute})
		if err != nil {
			return rep, fmt.Errorf("%s: open reachability listeners: %w", n.Name, err)
		}
		listeners[n.Name] = l
	}
	for i, n := range s.Nodes {
		var targets []netplan.Target
		for _, peer := range s.Nodes {
			if peer.Name != n.Name {
				targets = append(targets, listeners[peer.Name].Targets...)
			}
		}
		targets = netplan.DialTargets(rep.Probes[i], targets) // probed in the spec's order
		r, err := agents[n.Name].Reachability.DialPeers(ctx, contract.DialRequest{Node: n.Name, Targets: targets, Timeout: 2 * time.Second})
		if err != nil {
			return rep, fmt.Errorf("%s: dial peers: %w", n.Name, err)
		}
		rep.Matrix = append(rep.Matrix, r...)
	}
	plan, err := netplan.Choose(s, rep.Probes, rep.Matrix)
	var pe *netplan.Error
	switch {
	case err == nil:
		rep.Plan = &plan
	case errors.As(err, &pe):
		rep.Error = pe.Error()
	default:
		return rep, err
	}
	return rep, nil
}
