// Command sim imitates the parts of Ray and vLLM that tpdeploy drives, for the lab: one
// static binary installed as both `ray` and `vllm`, with their flags, their output texts
// and their causal behaviour on real sockets (node-IP auto-detection, GCS registration,
// `node:<ip>` placement pinning, the c10d rendezvous dialled from each node's own network
// namespace, NCCL/Gloo interface resolution, shard loading, the OpenAI endpoints).
// What is and is not modelled: lab/README.md.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if err := run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		var ex *exitError
		if errors.As(err, &ex) {
			os.Exit(ex.code)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	if role, input := childRole(); role != "" {
		return runChild(role, input)
	}
	name := filepath.Base(args[0])
	rest := args[1:]
	if name != "ray" && name != "vllm" && name != "python3" && name != "vllm-rs" && len(rest) > 0 {
		// `sim ray start ...` works too, for running outside an image.
		name, rest = rest[0], rest[1:]
	}
	switch name {
	case "ray":
		return rayMain(rest)
	case "vllm":
		return vllmMain(rest)
	case "python3":
		return pythonMain(rest) // only the data-plane proof (proof.go)
	case "vllm-rs":
		return vllmRsMain(rest) // the Rust front end (rustfrontend.go)
	}
	return fmt.Errorf("usage: ray start|status ... or vllm serve ... (invoked as %q)", name)
}
