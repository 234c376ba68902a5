package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/workflow"
)

// saga is a stack of compensations, run last-in first-out when a deploy fails or is
// cancelled.
type saga struct {
	steps []compensation
	// ran records what was compensated, in order, for the state query and the result.
	ran []string
}

type compensation struct {
	what string
	run  func(ctx workflow.Context) error
	// resumable work (a model copy's partial files) is what the deploy's next attempt
	// resumes from: a restart keeps it (keepResumable), a failure removes it.
	resumable bool
}

func (s *saga) add(what string, run func(ctx workflow.Context) error) {
	s.steps = append(s.steps, compensation{what: what, run: run})
}

// addResumable adds a compensation of resumable work, once: a restart keeps it on the
// stack (not run), and the next attempt's own is then not added again.
func (s *saga) addResumable(what string, run func(ctx workflow.Context) error) {
	for _, c := range s.steps {
		if c.resumable && c.what == what {
			return
		}
	}
	s.steps = append(s.steps, compensation{what: what, run: run, resumable: true})
}

// restartKeepsPartialModel: from here on, a deploy that starts over (a node rebooted
// mid-copy) keeps the model copy's partial files for its next attempt to resume from,
// and removes them only if the deploy fails.
const restartKeepsPartialModel = "restart-keeps-partial-model"

// compensateForRestart is compensate for a deploy that starts over: resumable work stays
// (its compensations stay on the stack for a failure later).
func (s *saga) compensateForRestart(ctx workflow.Context) error {
	var kept, rest []compensation
	for _, c := range s.steps {
		if c.resumable {
			kept = append(kept, c)
		} else {
			rest = append(rest, c)
		}
	}
	s.steps = rest
	err := s.compensate(ctx)
	s.steps = kept
	return err
}

// compensate runs every compensation in reverse order on a disconnected context, so a
// cancelled deploy still tears down. One failing compensation does not stop the others;
// their errors are joined.
func (s *saga) compensate(ctx workflow.Context) error {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	var errs []error
	for i := len(s.steps) - 1; i >= 0; i-- {
		c := s.steps[i]
		if err := c.run(dctx); err != nil {
			var left *leftToAgent
			if errors.As(err, &left) {
				s.ran = append(s.ran, c.what+" ("+left.Error()+")")
				continue
			}
			s.ran = append(s.ran, c.what+" (failed)")
			errs = append(errs, fmt.Errorf("%s: %s", c.what, message(err)))
			continue
		}
		s.ran = append(s.ran, c.what)
	}
	s.steps = nil
	return errors.Join(errs...)
}
