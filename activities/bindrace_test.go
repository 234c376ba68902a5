package activities

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/policy"
	"github.com/tpdeploy/tpdeploy/internal/spec"
)

// Issue #36, item 1: the agent checks a bind source, then hands the engine the path as a
// string, which the engine resolves again when it starts the container. A container that
// binds a directory above the source read-write (every cluster's container binds its
// hf_cache so) can swap the source for a link to / in between; the next container would
// start with the host's root mounted. So a bind source is refused wherever a container
// could write the directory it lies in, before anything reaches the engine: hf_cache
// must be an allowed mount itself, and model.host_dir an allowed mount or a directory
// below one given with ":ro".
func TestBindSourcesAreOnlyWhereNoContainerCanSwapThem(t *testing.T) {
	cache, models := t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Join(cache, "cluster-x"), filepath.Join(cache, "hub", "m"), filepath.Join(models, "m")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	yaml := "allowed_images: [\"tpdeploy/*:*\"]\nallowed_mounts: [" + cache + ", \"" + models + ":ro\"]\n"
	pol, err := policy.Parse([]byte(yaml), "/etc/tpdeploy/policy.yaml", policy.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{Name: "node-a", Policy: &pol, Containers: ContainerOptions{Network: "none", StopTimeout: time.Second}})
	d := a.Containers.docker
	base := spec.Cluster{Name: "tpdtest-bind", Image: "tpdeploy/sim:x", Model: spec.Model{Path: "/models/m"}, Parallel: spec.Parallel{Tensor: 1},
		Nodes: []spec.Node{{Name: "node-a", Role: spec.RoleHead}}, HFCache: cache}.WithDefaults()
	for _, tc := range []struct {
		name, hfCache, hostDir string
		want                   []string // substrings of the refusal; none: allowed
	}{
		{"the cache an allowed mount, the model below a read-only one", cache, filepath.Join(models, "m"), nil},
		{"the read-only mount itself", cache, models, nil},
		{"an hf_cache below the allowed mount", filepath.Join(cache, "cluster-x"), "", []string{"bind source", "cluster-x", "may mount read-write", "allowed_mounts"}},
		{"an hf_cache that is a read-only mount", models, "", []string{"read-write bind source", "allowed only read-only", models + ":ro"}},
		{"a host_dir below the read-write cache", cache, filepath.Join(cache, "hub", "m"), []string{"bind source", filepath.Join(cache, "hub", "m"), "may mount read-write"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.HFCache, c.Model.HostDir = tc.hfCache, tc.hostDir
			s := rayHeadSpec(contract.StartRayRequest{Node: "node-a", Deployment: contract.Deployment{Cluster: c.Name, ID: "d"}, Spec: c}, d.opts)
			err := d.containerAllowed(s)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("allowed %v; want a refusal before the engine sees it", s.Binds)
			}
			if app := appError(t, err); app.Type() != contract.ErrPolicyDenied {
				t.Errorf("not PolicyDenied: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
			// The preflight refuses the same spec before anything starts.
			if err := a.Containers.specAllowed(c); err == nil {
				t.Errorf("preflight allowed hf_cache %s, host_dir %q", c.HFCache, c.Model.HostDir)
			}
		})
	}
}
