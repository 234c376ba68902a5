//go:build integration

package activities

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/contract"
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
