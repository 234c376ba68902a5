package activities

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// lastOutputLines is how many lines of each container's output LastOutput keeps, and
// lastOutputMax bounds one node's answer (it is recorded in the supervisor's history).
const (
	lastOutputLines = 20
	lastOutputMax   = 6 << 10
)

// LastOutput is what the cluster's containers on this node printed last (the tail of
// their logs) and, in a running Ray head's container or an mp rank's container, the tail
// of vLLM's output file: what a recovery keeps before it tears the cluster
// down, so the incident says what the engine and the ranks said before they were stopped.
func (cs *Containers) LastOutput(ctx context.Context, req contract.LastOutputRequest) (string, error) {
	if err := cs.checkNode(req.Node); err != nil {
		return "", err
	}
	eng, addr, err := cs.docker.engine(req.DockerHost)
	if err != nil {
		return "", err
	}
	list, err := eng.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: cs.docker.clusterFilter(req.Cluster)})
	if err != nil {
		return "", engineError(addr, "list containers", err)
	}
	var b strings.Builder
	for _, c := range list.Items {
		name := c.ID
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		fmt.Fprintf(&b, "== %s (%s)\n", name, c.State)
		logs, err := eng.ContainerLogs(ctx, c.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: fmt.Sprint(lastOutputLines)})
		if err == nil {
			var out bytes.Buffer
			_, _ = stdcopy.StdCopy(&out, &out, io.LimitReader(logs, 1<<20))
			logs.Close()
			b.WriteString(out.String())
		} else {
			fmt.Fprintf(&b, "(logs: %v)\n", err)
		}
		// vLLM's output is its wrapper's file, not the container's log, in the Ray head's
		// container and in an mp rank's own (whose container outlives the vLLM that exited).
		if role := c.Labels[LabelRole]; (role == contract.RoleRayHead || role == contract.RoleVLLM) && c.State == "running" {
			r, err := execIn(ctx, eng, name, shScript(`[ -f "$1" ] && tail -n "$2" "$1"; exit 0`, vllmDir+"/log", fmt.Sprint(lastOutputLines)), nil)
			if err == nil && r.Stdout != "" {
				fmt.Fprintf(&b, "== vllm in %s\n%s", name, r.Stdout)
			}
		}
	}
	s := b.String()
	if len(s) > lastOutputMax {
		s = "…" + s[len(s)-lastOutputMax:]
	}
	return s, nil
}
