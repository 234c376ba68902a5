// Command labctl builds the lab's images and brings a lab up or down (see lab/README.md).
//
//	labctl images [--temporal bin/temporal]
//	labctl up [--prefix tpd-lab] [--nodes 2] [--index 0] [--temporal bin/temporal]
//	labctl down [--prefix tpd-lab]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

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
	nodes := fs.Int("nodes", 2, "number of nodes")
	index := fs.Int("index", 0, "subnet index (10.231.I.0/24 ...); 0 finds a free one")
	temporal := fs.String("temporal", "bin/temporal", "the pinned Temporal CLI binary")
	if err := fs.Parse(args[1:]); err != nil {
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
		l, err := lab.Up(ctx, eng, *temporal, lab.Config{Prefix: *prefix, Nodes: *nodes, Index: *index})
		if err != nil {
			return err
		}
		fmt.Printf("TEMPORAL_ADDRESS=%s\nTEMPORAL_UI=%s\nTPDEPLOY_SIGN_KEY_FILE=%s\n", l.Temporal, l.UI, l.SignKeyFile)
		for _, n := range l.Nodes {
			fmt.Printf("# %s: container %s, fast %s, mgmt %s", n.Name, n.Container, n.Fast, n.Mgmt)
			if n.Ext.IsValid() {
				fmt.Printf(", external %s (default route)", n.Ext)
			}
			fmt.Println()
		}
		return nil
	case "down":
		return lab.Down(ctx, eng, *prefix)
	}
	return fmt.Errorf("unknown command %q: want images, up or down", args[0])
}
