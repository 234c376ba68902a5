package activities

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// fixedPorts are the ports this node's containers will bind at a fixed number, each with
// the spec field that sets it: on the head, Ray's GCS (or torch's rendezvous in mp mode)
// and vLLM's API. Other nodes bind only ports their processes choose.
func fixedPorts(s spec.Cluster, node string) []namedPort {
	if s.Head().Name != node {
		return nil
	}
	if s.Executor == spec.ExecutorMP {
		return []namedPort{{"ports.master", s.Ports.MasterPort()}, {"ports.vllm", s.Ports.VLLM}}
	}
	return []namedPort{{"ports.ray", s.Ports.Ray}, {"ports.vllm", s.Ports.VLLM}}
}

type namedPort struct {
	Field string
	Port  int
}

// checkPortsFree refuses a deploy whose fixed ports something else on the node already
// listens on. Without it the head's `ray start` fails to bind its GCS port while the
// workers join whatever Ray answers there (another team's, or a cluster left running), and
// placement is judged from a stranger's node table. Only where the containers share the
// agent's network namespace ("host" on a real node, "container:NODE" in the lab) can a
// listen here answer for them, and only when the engine is this machine's (unix://). Ports held while this cluster's own containers run here
// are theirs: a redeploy adopts or replaces them.
func (cs *Containers) checkPortsFree(ctx context.Context, eng containerEngine, addr string, s spec.Cluster) error {
	mode := cs.docker.opts.Network
	if mode != "host" && !strings.HasPrefix(mode, "container:") || !strings.HasPrefix(addr, "unix://") {
		return nil
	}
	var busy []string
	for _, p := range fixedPorts(s, cs.name) {
		if p.Port <= 0 {
			continue
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p.Port))
		if err == nil {
			l.Close()
			continue
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			busy = append(busy, fmt.Sprintf("%d (%s)", p.Port, p.Field))
		}
	}
	if len(busy) == 0 {
		return nil
	}
	list, err := eng.ContainerList(ctx, client.ContainerListOptions{Filters: cs.docker.clusterFilter(s.Name)})
	if err != nil {
		return engineError(addr, "list containers", err)
	}
	if len(list.Items) > 0 {
		return nil // this cluster's own containers hold them
	}
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("port %s already in use on %s, and no container of cluster %s runs there: another Ray head, vLLM or service listens on it (ss -ltnp); stop it, or choose another port in the spec",
			strings.Join(busy, ", "), cs.name, s.Name), contract.ErrResourcesBusy, nil)
}
