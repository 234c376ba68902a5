package workflows

import (
	"strings"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
)

// Incident is one thing the supervisor saw and what it did about it.
type Incident struct {
	At   time.Time `json:"at"`
	Node string    `json:"node,omitempty"`
	// Cause is why the incident was opened; Seen says what was seen, in words.
	Cause  IncidentCause `json:"cause,omitempty"`
	Seen   string        `json:"seen"`
	Action string        `json:"action"`
	// Attempts is how many redeploys the recovery started; Outcome how it ended, and
	// Error what ended the last redeploy when it failed.
	Attempts int             `json:"attempts"`
	Outcome  IncidentOutcome `json:"outcome"`
	Error    string          `json:"error,omitempty"`
	Took     time.Duration   `json:"took"`
	// LastOutput is what each node's vLLM and Ray printed last, collected before the
	// recovery tore the cluster down.
	LastOutput map[string]string `json:"last_output,omitempty"`
	// RouterNote says whether the supervisor took the cluster's replica out of the
	// router's traffic when the incident began (routed clusters only).
	RouterNote string `json:"router_note,omitempty"`
	// rollbackOf is the failed deploy run that asked for this rollback: recover waits for
	// it to close rather than mistake it for a deploy someone else started.
	rollbackOf string
}

// IncidentCause is why the supervisor opened an incident. It is decided where the
// incident is made, never read back from the Seen text; it is the incidents metric's
// label (a few values, never free text) and what tests and `starter status` branch on.
type IncidentCause string

// The causes of an incident.
const (
	// CauseReboot: a node reported a new boot ID. Its addresses may have changed, so the
	// recovery re-probes.
	CauseReboot IncidentCause = "reboot"
	// CauseUnhealthy: the watch saw the endpoint fail its readiness check Unhealthy times
	// in a row, or the cool-down of a degraded (still not serving) cluster passed.
	CauseUnhealthy IncidentCause = "unhealthy"
	// CauseEngineWedged: the canary's completions went unanswered while /health and
	// /v1/models answered (the watch names it: contract.IncidentEngineWedged).
	CauseEngineWedged IncidentCause = contract.IncidentEngineWedged
	// CauseRollback: a deploy of another spec failed after touching the cluster; the spec
	// that served goes back.
	CauseRollback IncidentCause = "rollback"
	// CauseRequested: an operator asked for a redeploy (`starter redeploy`).
	CauseRequested IncidentCause = "requested"
	// CauseHostMemoryPressure: the watch saw the endpoint fail and a node's memory guard
	// says it stopped the cluster's engines (host memory below its floor); Seen is the
	// guard's message. The redeploys are refused at preflight (HostMemoryInsufficient)
	// while the memory is still taken, and the breaker bounds them.
	CauseHostMemoryPressure IncidentCause = contract.ErrHostMemoryPressure
)

// watchCause is the cause of an unhealthy watch: the one it names, else not serving.
func watchCause(h string) IncidentCause {
	if h == "" {
		return CauseUnhealthy
	}
	return IncidentCause(h)
}

// engineOutputTells says whether what the nodes printed last can explain the incident:
// it can when the engine ran and stopped serving, not when a node rebooted or the
// operator asked. The recovery collects it before its redeploy replaces the containers.
func (c IncidentCause) engineOutputTells() bool {
	return c == CauseUnhealthy || c == CauseEngineWedged || c == CauseHostMemoryPressure
}

// CauseLabel is what `starter status` writes before an incident's Seen text: the cause
// where Seen does not already say it. A reboot's, a rollback's, a request's and a plain
// not serving's Seen text say them in words; a cause the watch names starts its detail.
func (inc Incident) CauseLabel() string {
	switch inc.Cause {
	case "", CauseReboot, CauseUnhealthy, CauseRollback, CauseRequested:
		return ""
	}
	if strings.HasPrefix(inc.Seen, string(inc.Cause)) {
		return ""
	}
	return string(inc.Cause) + ": "
}

// IncidentOutcome is how an incident's recovery ended. The values are the words
// operators read in `starter status`; the ones that failed come with the error
// (Incident.Error, and Incident.OutcomeText).
type IncidentOutcome string

// The outcomes of a recovery.
const (
	// OutcomeServing: a redeploy reached serving. The circuit breaker closes.
	OutcomeServing IncidentOutcome = "serving again"
	// OutcomeLeftToDeploy: a deploy someone else started (the UI, the CLI, a schedule)
	// was running, so none was started beside it; it decides. The breaker closes.
	OutcomeLeftToDeploy IncidentOutcome = "left to the running deploy"
	// OutcomeNotStarted: the last redeploy could not be started. The cluster is degraded.
	OutcomeNotStarted IncidentOutcome = "redeploy did not start"
	// OutcomeFailed: the last redeploy failed. The cluster is degraded.
	OutcomeFailed IncidentOutcome = "redeploy failed"
)

// closesBreaker says whether recovery keeps its full budget after this outcome: the
// cluster serves, or a deploy that is not the supervisor's own decides.
func (o IncidentOutcome) closesBreaker() bool {
	return o == OutcomeServing || o == OutcomeLeftToDeploy
}

// OutcomeText is the outcome as operators read it: with the error that ended the last
// redeploy, when one did.
func (inc Incident) OutcomeText() string {
	if inc.Error == "" {
		return string(inc.Outcome)
	}
	return string(inc.Outcome) + ": " + inc.Error
}
