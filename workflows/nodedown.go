package workflows

import (
	"fmt"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// nodeDownCause names a node that went down as the failure's cause: a step whose agent
// stopped answering after it had answered in this run, or a failure after which a node's
// agent did not answer. Its type is NodeDown; the message keeps what failed.
func (d *deployment) nodeDownCause(se *stepError) *stepError {
	if se.Type == contract.ErrNodeAgentDown && se.Node != "" && d.answered[se.Node] {
		d.down[se.Node] = "its agent stopped answering"
	}
	var nodes []string
	for _, n := range d.spec.Nodes {
		if d.down[n.Name] != "" {
			nodes = append(nodes, n.Name)
		}
	}
	if len(nodes) == 0 || se.Type == contract.ErrCanceled {
		return se
	}
	var why []string
	for _, n := range nodes {
		why = append(why, n+": "+d.down[n])
	}
	return &stepError{Step: se.Step, Node: nodes[0], Type: contract.ErrNodeDown,
		Msg: fmt.Sprintf("%s went down during the deploy (%s); what failed: %s", strings.Join(nodes, ", "), strings.Join(why, "; "), se.Error())}
}

// leftToAgent is what a compensation returns when it leaves its work to the node's agent:
// the node is down, and the agent removes the cluster's containers that are no longer
// current when it starts. The saga records it as deferred, not as failed.
type leftToAgent struct{ why string }

func (e *leftToAgent) Error() string { return "deferred: " + e.why }
