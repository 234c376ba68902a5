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
}

func (s *saga) add(what string, run func(ctx workflow.Context) error) {
	s.steps = append(s.steps, compensation{what: what, run: run})
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
