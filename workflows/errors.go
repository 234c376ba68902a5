package workflows

import (
	"errors"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// nonRetryable are the error types no retry can fix (failure.All says which): activities
// raise them as non-retryable, and the retry policies list them too so a type cannot slip
// through.
var nonRetryable = failure.NonRetryable()

// stepError is a failed step, with the node it failed on and the classified type. It
// wraps the activity's error it was classified from, if any, so errors.As and errors.Is
// see the SDK's error beneath it.
type stepError struct {
	Step string
	Node string
	Type string
	Msg  string
	// joined errors carry their nodes' prefixes in Msg already.
	joined bool
	err    error
}

func (e *stepError) Unwrap() error { return e.err }

func (e *stepError) Error() string {
	if e.joined {
		return e.Msg
	}
	if e.Node == "" {
		return e.Step + ": " + e.Msg
	}
	return e.Node + ": " + e.Step + ": " + e.Msg
}

// classify turns an activity failure into a stepError. A task that no agent picked up in
// time means the node's agent is down; that is said in plain words with the node's name.
func classify(step, node string, err error) *stepError {
	se := &stepError{Step: step, Node: node, Type: contract.ErrStepTimeout, Msg: message(err), err: err}
	var timeout *temporal.TimeoutError
	var app *temporal.ApplicationError
	switch {
	case temporal.IsCanceledError(err):
		se.Type, se.Msg = contract.ErrCanceled, "canceled"
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
		se.Type = contract.ErrNodeAgentDown
		se.Msg = fmt.Sprintf("node agent is not serving task queue %s (no agent picked the task up in time; is `worker --node %s` running?)",
			contract.NodeQueue(node), node)
	case errors.As(err, &timeout):
		se.Type = contract.ErrStepTimeout
		se.Msg = fmt.Sprintf("timed out (%s)", strings.ToLower(strings.TrimPrefix(timeout.TimeoutType().String(), "TIMEOUT_TYPE_")))
	case errors.As(err, &app):
		se.Type = app.Type()
		// Untyped (or Go-typed) errors are retryable ones the retry policy gave up on.
		if se.Type == "" || strings.HasPrefix(se.Type, "*") {
			se.Type = contract.ErrRetriesExhausted
		}
	}
	return se
}

// message is the innermost useful text of an error: the application error's own message
// rather than the SDK's "activity error (type: ..., scheduledEventID: ...)" wrapper.
func message(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return timeout.Error()
	}
	return err.Error()
}

// joinStepErrors combines the failures of a step that ran on several nodes at once. The
// type is the first node's (in spec order), so it is deterministic.
func joinStepErrors(errs []*stepError) *stepError {
	if len(errs) == 1 {
		return errs[0]
	}
	msgs := make([]string, len(errs))
	each := make([]error, len(errs))
	for i, e := range errs {
		msgs[i], each[i] = e.Error(), e
	}
	return &stepError{Step: errs[0].Step, Type: errs[0].Type, Msg: strings.Join(msgs, "; "), joined: true, err: errors.Join(each...)}
}

// toFailure makes the workflow's error: a non-retryable application error whose type is the
// classified one, so the starter and callers can branch on it.
// A staged deploy refused before the swap says that the serving deployment still serves,
// in its message and in its details (contract.StagedRefusal), which `starter status` and
// the agents' reconcile read.
func toFailure(e *stepError, compensationErr error, refused *contract.StagedRefusal) *temporal.ApplicationError {
	msg := e.Error()
	typ := e.Type
	if compensationErr != nil {
		msg += "; compensation failed: " + compensationErr.Error()
		if typ == contract.ErrCanceled {
			typ = contract.ErrCompensationFailed
		}
	}
	var details []any
	if refused != nil {
		msg += "; " + refused.Said()
		details = append(details, *refused)
	}
	var app *temporal.ApplicationError
	errors.As(temporal.NewNonRetryableApplicationError(msg, typ, nil, details...), &app)
	return app
}
