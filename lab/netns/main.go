// Command netns builds or removes the seed topology in network namespaces (see
// internal/labnet): `netns up --prefix tpd-demo --nodes 2`, `netns down --prefix tpd-demo`,
// runs a command in one: `netns exec tpd-demo-a -- python3 ...` (no iproute2 needed), and
// plans a spec over namespaces without Temporal: `netns plan -f spec.yaml --map node-a=NS,...`
// (plan.go).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/tpdeploy/tpdeploy/internal/labnet"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "netns:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) >= 3 && args[0] == "exec" && args[2] == "--" && len(args) > 3 {
		return labnet.Exec(args[1], args[3:])
	}
	if len(args) > 0 && args[0] == "plan" {
		return cmdPlan(args[1:], os.Stdout)
	}
	if len(args) == 0 || (args[0] != "up" && args[0] != "down") {
		return errors.New("usage: netns up|down [--prefix P] [--nodes N], netns exec NAME -- COMMAND..., or netns plan -f spec.yaml --map node=NS[,node=NS]")
	}
	fs := flag.NewFlagSet("netns "+args[0], flag.ContinueOnError)
	prefix := fs.String("prefix", "tpd-demo", "namespace name prefix")
	nodes := fs.Int("nodes", 2, "number of nodes (up)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := labnet.Destroy(*prefix); err != nil {
		return err
	}
	if args[0] == "down" {
		return nil
	}
	t, err := labnet.Seed(*prefix, *nodes)
	if err != nil {
		return err
	}
	for _, n := range t.Nodes {
		ext := ""
		if n.ExtIface != "" {
			ext = fmt.Sprintf(" ext=%s %s (default route)", n.ExtIface, n.ExtAddr)
		}
		fmt.Printf("%s netns=%s fast=%s %s%s\n", n.Name, n.NetNS, n.FastIface, n.FastAddr, ext)
	}
	return nil
}
