//go:build integration

package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/images"
)

// imageLike builds a FROM-scratch image laid out as a vLLM image is where the read looks:
// pip's dist-info directories and, when ray is set, a `ray` on PATH.
func imageLike(t testing.TB, eng *client.Client, tag, vllm, ray string, shell bool) {
	t.Helper()
	site := "usr/local/lib/python3.12/dist-packages/"
	img := images.Image{Tag: tag, Files: map[string]string{}, Dirs: []string{
		site + "vllm-" + vllm + ".dist-info", site + "torch-2.9.0+cu129.dist-info", site + "nvidia_nccl_cu12-2.27.3.dist-info",
	}}
	df := "FROM scratch\nCOPY usr /usr\n"
	if shell {
		img.Files["bin/busybox"] = "/bin/busybox"
		df += "COPY bin /bin\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\nENV PATH=/usr/local/bin:/usr/bin:/bin\n"
	}
	if ray != "" {
		img.Dirs = append(img.Dirs, site+"ray-"+ray+".dist-info")
		img.Files["usr/local/bin/ray"] = "/bin/busybox"
	}
	img.Dockerfile = df
	if _, err := images.Ensure(context.Background(), eng, img); err != nil {
		t.Fatalf("build %s: %v", tag, err)
	}
}

func TestReadImageOnTheEngine(t *testing.T) {
	eng := engineForTest(t)
	ctx := context.Background()
	imageLike(t, eng, "tpdeploy/test-image-read:ray", "0.17.1", "2.53.0", true)
	imageLike(t, eng, "tpdeploy/test-image-read:noray", "0.22.1", "", true)
	imageLike(t, eng, "tpdeploy/test-image-read:noshell", "0.22.1", "", false)
	b := testNode("node-b")

	got, err := b.Images.ReadImage(ctx, contract.ImageRequest{Node: "node-b", Image: "tpdeploy/test-image-read:ray"})
	if err != nil {
		t.Fatal(err)
	}
	if got.VLLM != "0.17.1" || got.Ray != "2.53.0" || !got.RayBin || got.Torch != "2.9.0+cu129" || got.NCCL != "2.27.3" ||
		got.Python != "3.12" || got.Node != "node-b" || !strings.HasPrefix(got.ID, "sha256:") || got.Cached {
		t.Fatalf("read %+v", got)
	}
	again, err := b.Images.ReadImage(ctx, contract.ImageRequest{Node: "node-b", Image: "tpdeploy/test-image-read:ray"})
	if err != nil || !again.Cached || again.VLLM != "0.17.1" || again.ID != got.ID {
		t.Fatalf("second read %+v, %v; want it from the cache", again, err)
	}

	noRay, err := b.Images.ReadImage(ctx, contract.ImageRequest{Node: "node-b", Image: "tpdeploy/test-image-read:noray"})
	if err != nil || noRay.HasRay() || noRay.VLLM != "0.22.1" {
		t.Fatalf("no-Ray image %+v, %v", noRay, err)
	}

	_, err = b.Images.ReadImage(ctx, contract.ImageRequest{Node: "node-b", Image: "tpdeploy/test-image-read:noshell"})
	if app := appError(t, err); app.Type() != contract.ErrImageUnreadable || !app.NonRetryable() || !strings.Contains(app.Message(), "/bin/sh") {
		t.Fatalf("image without a shell: %s %v: %s", app.Type(), app.NonRetryable(), app.Message())
	}
	_, err = b.Images.ReadImage(ctx, contract.ImageRequest{Node: "node-b", Image: "tpdeploy/test-image-read:absent"})
	if app := appError(t, err); app.Type() != contract.ErrImageMissing {
		t.Fatalf("absent image: %s: %s", app.Type(), app.Message())
	}
	_, err = b.Images.ReadImage(ctx, contract.ImageRequest{Node: "node-a", Image: "tpdeploy/test-image-read:ray"})
	if app := appError(t, err); app.Type() != contract.ErrWrongNode {
		t.Fatalf("another node's request: %s", app.Type())
	}

	// Nothing is left behind: every read container is removed, the failed ones too.
	left, err := eng.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelImageRead)})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Fatalf("%d image-read containers left", len(left.Items))
	}
}

// BenchmarkReadImage measures the preflight's added cost per node: the first read of an
// image (a container created, run and removed) and a read of an image already read (one
// inspect, answered from the cache by image ID).
func BenchmarkReadImage(b *testing.B) {
	eng, err := client.New(client.FromEnv)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	imageLike(b, eng, "tpdeploy/test-image-read:ray", "0.17.1", "2.53.0", true)
	ctx := context.Background()
	req := contract.ImageRequest{Node: "node-b", Image: "tpdeploy/test-image-read:ray"}
	var first, cached time.Duration
	for i := 0; i < b.N; i++ {
		n := testNode("node-b")
		start := time.Now()
		if _, err := n.Images.ReadImage(ctx, req); err != nil {
			b.Fatal(err)
		}
		first += time.Since(start)
		start = time.Now()
		if img, err := n.Images.ReadImage(ctx, req); err != nil || !img.Cached {
			b.Fatalf("cached read: %+v %v", img, err)
		}
		cached += time.Since(start)
	}
	b.ReportMetric(first.Seconds()/float64(b.N), "s/first-read")
	b.ReportMetric(cached.Seconds()/float64(b.N), "s/cached-read")
	b.ReportMetric(float64(first)/float64(max(cached, 1)), "first/cached")
}

// faultyReader is the engine with one call failing as engines and contexts fail: after the
// real call (an answer lost, a context cancelled meanwhile) or instead of it.
type faultyReader struct {
	*client.Client
	create, start, logs bool
	cancel              context.CancelFunc
}

var errInjected = errors.New("injected")

func (f faultyReader) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	r, err := f.Client.ContainerCreate(ctx, o)
	if f.create && err == nil {
		return client.ContainerCreateResult{}, fmt.Errorf("create's answer lost: %w", context.DeadlineExceeded)
	}
	return r, err
}

func (f faultyReader) ContainerStart(ctx context.Context, id string, o client.ContainerStartOptions) (client.ContainerStartResult, error) {
	if f.start {
		return client.ContainerStartResult{}, errInjected
	}
	r, err := f.Client.ContainerStart(ctx, id, o)
	if f.cancel != nil {
		f.cancel()
	}
	return r, err
}

func (f faultyReader) ContainerLogs(ctx context.Context, id string, o client.ContainerLogsOptions) (client.ContainerLogsResult, error) {
	if f.logs {
		return nil, errInjected
	}
	return f.Client.ContainerLogs(ctx, id, o)
}

// shortLivedOf lists node's containers that carry label (whatever its value).
func shortLivedOf(t *testing.T, eng *client.Client, node, label string) []string {
	t.Helper()
	list, err := eng.ContainerList(context.Background(), client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", LabelNode+"="+node).Add("label", label)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list.Items {
		names = append(names, strings.TrimPrefix(c.Names[0], "/")+" ("+string(c.State)+")")
	}
	return names
}

// A read that fails at any point after the container was made leaves no container: the
// create's answer lost (the engine made it all the same), the start refused, the activity
// cancelled while the script runs, the output unreadable.
func TestFailedImageReadLeavesNoContainer(t *testing.T) {
	eng, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	imageLike(t, eng, "tpdeploy/test-image-read:ray", "0.17.1", "2.53.0", true)
	const node = "status-read"
	im := testNode(node).Images
	for _, tt := range []struct {
		name  string
		fault func(f *faultyReader, cancel context.CancelFunc)
	}{
		{"create's answer lost", func(f *faultyReader, _ context.CancelFunc) { f.create = true }},
		{"start failed", func(f *faultyReader, _ context.CancelFunc) { f.start = true }},
		{"cancelled while it runs", func(f *faultyReader, cancel context.CancelFunc) { f.cancel = cancel }},
		{"logs failed", func(f *faultyReader, _ context.CancelFunc) { f.logs = true }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := faultyReader{Client: eng}
			tt.fault(&f, cancel)
			if _, err := im.runImageRead(ctx, f, "tpdeploy/test-image-read:ray", "sha256:test"); err == nil && tt.name != "cancelled while it runs" {
				t.Fatal("the read succeeded")
			}
			if left := shortLivedOf(t, eng, node, LabelImageRead); len(left) != 0 {
				t.Errorf("left %v", left)
				for _, name := range left {
					_, _ = eng.ContainerRemove(context.Background(), strings.Fields(name)[0], client.ContainerRemoveOptions{Force: true})
				}
			}
		})
	}
}

// The agent's start-up sweep removes its own node's leftover image reads and proofs, never
// started or exited, and nothing else: not another node's (several agents share the lab's
// engine), not another lab's node of the same name (another network mode), not its node's
// cluster containers (Reconcile decides those).
func TestSweepRemovesOnlyThisNodesShortLivedLeftovers(t *testing.T) {
	eng, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	imageLike(t, eng, "tpdeploy/test-image-read:ray", "0.17.1", "2.53.0", true)
	ctx := context.Background()
	const mine, theirs = "status-sweep-a", "status-sweep-b"
	plant := func(name string, labels map[string]string, start bool) {
		t.Helper()
		_, _ = eng.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
		c, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name,
			Config:     &container.Config{Image: "tpdeploy/test-image-read:ray", Entrypoint: []string{"/bin/true"}, Labels: labels},
			HostConfig: &container.HostConfig{NetworkMode: "none"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = eng.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}) })
		if start {
			if _, err := eng.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	plant("status-sweep-a-read", map[string]string{LabelImageRead: "sha256:x", LabelNode: mine, LabelNetwork: "none"}, false)
	plant("status-sweep-a-proof", map[string]string{LabelCluster: "status-c", LabelRole: contract.RoleProof, LabelNode: mine, LabelNetwork: "none"}, true)
	plant("status-sweep-a-ray-head", map[string]string{LabelCluster: "status-c", LabelRole: contract.RoleRayHead, LabelNode: mine, LabelNetwork: "none"}, false)
	plant("status-sweep-b-read", map[string]string{LabelImageRead: "sha256:x", LabelNode: theirs, LabelNetwork: "none"}, false)
	plant("status-sweep-a-other-lab", map[string]string{LabelCluster: "status-c", LabelRole: contract.RoleProof, LabelNode: mine, LabelNetwork: "container:another-lab-node"}, false)
	plant("status-sweep-b-proof", map[string]string{LabelCluster: "status-c", LabelRole: contract.RoleProof, LabelNode: theirs, LabelNetwork: "none"}, false)

	removed, err := SweepShortLived(ctx, testNode(mine).Containers, "")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{"status-sweep-a-proof", "status-sweep-a-read"}; !slices.Equal(removed, want) {
		t.Errorf("swept %v, want %v", removed, want)
	}
	list, err := eng.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("name", "status-sweep-")})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, c := range list.Items {
		left = append(left, strings.TrimPrefix(c.Names[0], "/"))
	}
	slices.Sort(left)
	if want := []string{"status-sweep-a-other-lab", "status-sweep-a-ray-head", "status-sweep-b-proof", "status-sweep-b-read"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}
