// Command labctl builds the lab's images and brings a lab up or down (see lab/README.md).
//
//	labctl images [--temporal bin/temporal]
//	labctl up [--prefix tpd-lab] [--topology spark] [--nodes N] [--index 0] [--temporal bin/temporal]
//	labctl down [--prefix tpd-lab]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/lab"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "labctl:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: labctl images|up|down [flags]")
	}
	fs := flag.NewFlagSet("labctl "+args[0], flag.ContinueOnError)
	prefix := fs.String("prefix", "tpd-lab", "name prefix of the lab's containers and networks")
	nodes := fs.Int("nodes", 0, "number of nodes (0: the topology's; triangle and ring4 are 3 and 4)")
	topology := fs.String("topology", lab.TopologyPair, "the lab's networks: "+strings.Join(lab.Topologies, ", ")+" (lab/README.md)")
	index := fs.Int("index", 0, "subnet index (10.231.I.0/24 ...); 0 finds a free one")
	temporal := fs.String("temporal", "bin/temporal", "the pinned Temporal CLI binary")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := lab.CheckTopology(*topology); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	eng, err := client.New(client.FromEnv)
	if err != nil {
		return err
	}
	defer eng.Close()
	switch args[0] {
	case "images":
		return lab.BuildImages(ctx, eng, *temporal)
	case "up":
		start := time.Now()
		l, err := lab.Up(ctx, eng, *temporal, lab.Config{Prefix: *prefix, Nodes: *nodes, Index: *index, Topology: *topology})
		if err != nil {
			return err
		}
		fmt.Printf("TEMPORAL_ADDRESS=%s\nTEMPORAL_UI=%s\nTPDEPLOY_SIGN_KEY_FILE=%s\n", l.Temporal, l.UI, l.SignKeyFile)
		fmt.Printf("# topology %s, up in %s\n", *topology, time.Since(start).Round(100*time.Millisecond))
		fmt.Printf("# hub %s (HF_ENDPOINT): %s, and gated %s (secrets.hf_token {env: LAB_HF_TOKEN})\n", l.Hub, lab.HubRepo, lab.HubGatedRepo)
		fmt.Printf("# controller: container %s (worker --role controller: the workflows; the nodes' agents run --role agent)\n", l.Controller)
		fmt.Printf("# gate: %s, the nodes' only way to Temporal (each agent with its own API key; the frontend is on ctl %s)\n", l.Gate, l.Ctl)
		for _, n := range l.Nodes {
			var addrs []string
			for _, net := range l.Nets {
				if a := n.Addr(net.Name); a.IsValid() {
					addrs = append(addrs, net.Name+" "+a.String())
				}
			}
			line := fmt.Sprintf("# %s: container %s, %s", n.Name, n.Container, strings.Join(addrs, ", "))
			if n.Ext.IsValid() {
				line += " (external: default route)"
			}
			for _, h := range n.HCAs {
				line += fmt.Sprintf(", HCA %s on %s", h.HCA, h.Network)
			}
			fmt.Println(line)
		}
		return nil
	case "down":
		return lab.Down(ctx, eng, *prefix)
	}
	return fmt.Errorf("unknown command %q: want images, up or down", args[0])
}
