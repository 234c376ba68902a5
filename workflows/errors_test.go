package workflows

import (
	"errors"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/failure"
	"github.com/tpdeploy/tpdeploy/internal/fakeagents"
)

// TestRetryPolicyFollowsFailureList: an activity that fails with a type, raised
// retryable, is retried exactly when failure.All says the type is retryable; the retry
// policies' list is what stops the rest.
func TestRetryPolicyFollowsFailureList(t *testing.T) {
	const key = "ProbeNode node-b"
	for _, ft := range failure.All {
		t.Run(ft.Type, func(t *testing.T) {
			f := fakeagents.New()
			f.Failures[key] = temporal.NewApplicationError("probe failed", ft.Type)
			env := newEnv(t, f)
			executeDeploy(env, DeployRequest{Spec: fakeagents.SeedSpec()})
			if env.GetWorkflowError() == nil {
				t.Fatal("deploy succeeded")
			}
			want := 1
			if ft.Retryable {
				want = stepAttempts
			}
			if got := fakeagents.Attempts(f, key); got != want {
				t.Errorf("%s attempted %d times, want %d (retryable: %v)", key, got, want, ft.Retryable)
			}
		})
	}
}

// TestStepErrorUnwraps: a classified step keeps the activity's error beneath it, one
// node's or several's, so errors.As finds the SDK's error and errors.Is its cause.
func TestStepErrorUnwraps(t *testing.T) {
	cause := errors.New("engine said no")
	app := temporal.NewNonRetryableApplicationError("refused", contract.ErrPolicyDenied, cause)
	a := classify("start ray head", "node-a", app)
	b := classify("join ray worker", "node-b", temporal.NewApplicationError("gone", contract.ErrDocker))
	for _, err := range []error{a, joinStepErrors([]*stepError{a, b})} {
		var got *temporal.ApplicationError
		if !errors.As(err, &got) || got.Type() != contract.ErrPolicyDenied {
			t.Errorf("errors.As(%v) found %v, want the PolicyDenied application error", err, got)
		}
		if !errors.Is(err, cause) {
			t.Errorf("errors.Is(%v, cause) = false", err)
		}
		var se *stepError
		if !errors.As(err, &se) || se.Type != contract.ErrPolicyDenied {
			t.Errorf("errors.As(%v) found step error %v, want the PolicyDenied one", err, se)
		}
	}
	var docker *temporal.ApplicationError
	joined, ok := joinStepErrors([]*stepError{a, b}).Unwrap().(interface{ Unwrap() []error })
	if !ok || len(joined.Unwrap()) != 2 || !errors.As(joined.Unwrap()[1], &docker) || docker.Type() != contract.ErrDocker {
		t.Errorf("the joined step error does not hold node-b's DockerError: %v", joined)
	}
	if (&stepError{Step: "validate spec", Type: contract.ErrSpecInvalid}).Unwrap() != nil {
		t.Error("a step error the workflow raised itself wraps something")
	}
}
