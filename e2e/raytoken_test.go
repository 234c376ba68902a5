//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/lab"
)

// Ray 2.59's token authentication (Ray PR #64755): on an image that holds a token at
// ~/.ray/auth_token (as one whose build ran a bare ray.init() does), `ray start --head`
// turns it on by itself. With secrets.ray_token the deploy serves: the Ray containers run
// with RAY_AUTH_MODE=token and the token in a file, and the agents' GCS calls send it; the
// token is in no history and no `docker inspect`. Without it the deploy fails
// RayAuthRequired at the placement check, naming the fix, and leaves nothing running.
func TestRayTokenAuthentication(t *testing.T) {
	img := lab.RayTokenRelease.Image()
	t.Run("with the token it serves", func(t *testing.T) {
		s := labSpec(t, "e2e-raytoken")
		s.Image, s.Executor = img, spec.ExecutorRay
		s.Secrets.RayToken = &spec.SecretRef{Env: "RAY_AUTH_TOKEN"}
		deployServing(t, s)
		defer teardown(t, s.Name)
		if err := endpointServes(t, s); err != nil {
			t.Fatal(err)
		}
		for _, c := range containersOf(t, s.Name) {
			info, err := eng.ContainerInspect(context.Background(), c, client.ContainerInspectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(info.Container)
			if strings.Contains(string(b), theLab.RayToken) {
				t.Errorf("docker inspect %s shows Ray's token", c)
			}
			if strings.HasSuffix(c, "_"+contract.RoleRayHead) || strings.HasSuffix(c, "_"+contract.RoleRayWorker) {
				got, err := execOut(c, "cat", "/run/tpdeploy/ray_token")
				if err != nil || strings.TrimSpace(got) != theLab.RayToken {
					t.Errorf("%s: the token file holds %d bytes (%v), want the lab's token", c, len(got), err)
				}
			}
		}
		if historyHolds(t, contract.DeployWorkflowID(s.Name), theLab.RayToken) {
			t.Error("the deploy's history holds Ray's token")
		}
	})
	t.Run("without it fails RayAuthRequired", func(t *testing.T) {
		s := labSpec(t, "e2e-raytoken-none")
		s.Image, s.Executor = img, spec.ExecutorRay
		f, took := failure(t, deployFor(t, s))
		if f.Type != contract.ErrRayAuthRequired {
			t.Fatalf("failure %s: %s", f.Type, f.Message)
		}
		for _, w := range []string{"node-a", "Unauthenticated", "secrets.ray_token"} {
			if !strings.Contains(f.Message, w) {
				t.Errorf("message lacks %q: %s", w, f.Message)
			}
		}
		if left := containersOf(t, s.Name); len(left) != 0 {
			t.Errorf("containers left: %v", left)
		}
		t.Logf("%s after %.1fs: %s", f.Type, took.Seconds(), f.Message)
	})
}
