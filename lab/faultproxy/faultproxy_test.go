//go:build integration

package faultproxy

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/tpdeploy/tpdeploy/internal/images"
)

// These tests run against this machine's real Docker engine (CI has one); without an
// engine they fail, never skip.

const testImage = "tpdeploy/faultproxy:test"

var (
	imageOnce sync.Once
	imageErr  error
)

// buildImage builds the chatter test program into a FROM-scratch image, with busybox for
// a stdin-echoing exec (cat).
func buildImage(eng *client.Client) error {
	imageOnce.Do(func() {
		ctx := context.Background()
		dir, err := os.MkdirTemp("", "tpd-fp-")
		if err != nil {
			imageErr = err
			return
		}
		defer os.RemoveAll(dir)
		bin, err := images.GoBinary(ctx, "./internal/testprog/chatter", dir)
		if err != nil {
			imageErr = err
			return
		}
		_, imageErr = images.Ensure(ctx, eng, images.Image{Tag: testImage,
			Files: map[string]string{"chatter": bin, "busybox": "/bin/busybox"}, Dirs: []string{"tmp"},
			Dockerfile: "FROM scratch\nCOPY chatter /\nCOPY busybox /bin/\nCOPY tmp /tmp\nENTRYPOINT [\"/chatter\"]\n"})
	})
	return imageErr
}

type fixture struct {
	p   *Proxy
	cli *client.Client // through the proxy
	eng *client.Client // straight to the engine, for checks and cleanup
	id  string         // makes this test's container names unique
}

func setup(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eng, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { eng.Close() })
	if _, err := eng.Ping(ctx, client.PingOptions{}); err != nil {
		t.Fatalf("these tests need this machine's Docker engine: %v", err)
	}
	if err := buildImage(eng); err != nil {
		t.Fatalf("build %s: %v", testImage, err)
	}

	upstream := os.Getenv("DOCKER_HOST")
	if upstream == "" {
		upstream = client.DefaultDockerHost
	}
	p := New(upstream)
	sock := filepath.Join(t.TempDir(), "docker.sock")
	if err := p.ListenUnix(sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	cli, err := client.New(client.WithHost("unix://" + sock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	// Negotiate the API version now, so later calls are exactly the calls under test.
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		t.Fatalf("ping through the proxy: %v", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &fixture{p: p, cli: cli, eng: eng, id: hex.EncodeToString(b)}
}

// name returns a container name for this test and removes the container at cleanup,
// whether or not the create through the proxy reports success.
func (f *fixture) name(t *testing.T, role string) string {
	name := "tpd-fp-" + f.id + "-" + role
	t.Cleanup(func() {
		_, _ = f.eng.ContainerRemove(context.Background(), name, client.ContainerRemoveOptions{Force: true})
	})
	return name
}

// chatty is a container printing a line every 100 ms for hours.
func chatty(name string, env ...string) client.ContainerCreateOptions {
	return client.ContainerCreateOptions{Name: name,
		Config: &container.Config{Image: testImage,
			Env: append([]string{"CHATTER_LINES=100000", "CHATTER_EVERY=100ms"}, env...)},
		HostConfig: &container.HostConfig{NetworkMode: "none"}}
}

func (f *fixture) create(t *testing.T, role string) string {
	t.Helper()
	res, err := f.cli.ContainerCreate(context.Background(), chatty(f.name(t, role)))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return res.ID
}

func (f *fixture) running(t *testing.T, id string) bool {
	t.Helper()
	info, err := f.eng.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	return info.Container.State.Running
}

func TestForwardsTheEngineAPI(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, err := f.cli.Ping(ctx, client.PingOptions{}); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if _, err := f.cli.ContainerList(ctx, client.ContainerListOptions{All: true}); err != nil {
		t.Fatalf("list: %v", err)
	}

	// The events stream must deliver events as they happen, not when it ends.
	evCtx, evCancel := context.WithCancel(ctx)
	defer evCancel()
	name := f.name(t, "fwd")
	filters := client.Filters{}
	filters.Add("container", name)
	events := f.cli.Events(evCtx, client.EventsListOptions{Filters: filters})

	res, err := f.cli.ContainerCreate(ctx, chatty(name))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := f.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start: %v", err)
	}
	for _, want := range []string{"create", "start"} {
		select {
		case m := <-events.Messages:
			if string(m.Action) != want {
				t.Fatalf("event %q, want %q", m.Action, want)
			}
		case err := <-events.Err:
			t.Fatalf("events: %v", err)
		case <-ctx.Done():
			t.Fatalf("no %q event through the proxy", want)
		}
	}

	t.Run("logs follow streams", func(t *testing.T) {
		lctx, lcancel := context.WithTimeout(ctx, 15*time.Second)
		defer lcancel()
		logs, err := f.cli.ContainerLogs(lctx, res.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: true})
		if err != nil {
			t.Fatalf("logs: %v", err)
		}
		defer logs.Close()
		// The container never stops, so seeing line 5 means each line was flushed.
		var got []byte
		buf := make([]byte, 4096)
		for !bytes.Contains(got, []byte("line 5\n")) {
			n, err := logs.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				t.Fatalf("logs: %v after %q", err, got)
			}
		}
	})

	t.Run("exec hijacks both ways", func(t *testing.T) {
		ex, err := f.cli.ExecCreate(ctx, res.ID, client.ExecCreateOptions{Cmd: []string{"/bin/busybox", "cat"},
			AttachStdin: true, AttachStdout: true, AttachStderr: true})
		if err != nil {
			t.Fatalf("exec create: %v", err)
		}
		hj, err := f.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
		if err != nil {
			t.Fatalf("exec attach: %v", err)
		}
		defer hj.Close()
		_ = hj.Conn.SetDeadline(time.Now().Add(20 * time.Second))
		const in = "through the proxy and back\n"
		if _, err := io.WriteString(hj.Conn, in); err != nil {
			t.Fatal(err)
		}
		// cat ends at the end of its stdin: the half-close must reach the engine.
		if err := hj.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if _, err := stdcopy.StdCopy(&stdout, &stderr, hj.Reader); err != nil {
			t.Fatalf("exec output: %v", err)
		}
		if stdout.String() != in || stderr.Len() != 0 {
			t.Fatalf("exec: stdout %q stderr %q", stdout.String(), stderr.String())
		}
	})

	t.Run("archive in and out", func(t *testing.T) {
		var tarball bytes.Buffer
		tw := tar.NewWriter(&tarball)
		content := strings.Repeat("archive through the proxy\n", 10000)
		_ = tw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: int64(len(content))})
		_, _ = tw.Write([]byte(content))
		_ = tw.Close()
		if _, err := f.cli.CopyToContainer(ctx, res.ID, client.CopyToContainerOptions{DestinationPath: "/tmp", Content: &tarball}); err != nil {
			t.Fatalf("copy to: %v", err)
		}
		out, err := f.cli.CopyFromContainer(ctx, res.ID, client.CopyFromContainerOptions{SourcePath: "/tmp/hello.txt"})
		if err != nil {
			t.Fatalf("copy from: %v", err)
		}
		defer out.Content.Close()
		tr := tar.NewReader(out.Content)
		if _, err := tr.Next(); err != nil {
			t.Fatal(err)
		}
		if got, _ := io.ReadAll(tr); string(got) != content {
			t.Fatalf("copied back %d bytes, want %d", len(got), len(content))
		}
	})

	t.Run("keep-alive", func(t *testing.T) {
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(f.cli.DaemonHost(), "unix://"))
		}}}
		reused := 0
		for range 3 {
			trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
				if i.Reused {
					reused++
				}
			}}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), "GET", "http://docker/_ping", nil)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if reused != 2 {
			t.Fatalf("%d of 3 requests reused the connection, want 2", reused)
		}
	})
}

func TestFailAnswersAsTheEngine(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	worker := f.name(t, "ray-worker")
	id := f.p.Add(Rule{Method: "POST", Path: `^/containers/create$`, Query: map[string]string{"name": worker},
		Action: Fail{Status: 500, Message: "injected: no space left on device"}})

	_, err := f.cli.ContainerCreate(ctx, chatty(worker))
	if err == nil || !strings.Contains(err.Error(), "injected: no space left on device") || !cerrdefs.IsInternal(err) {
		t.Fatalf("create: %v, want the injected error", err)
	}
	// Another name is not matched.
	f.create(t, "ray-head")

	var failed []Call
	for _, c := range f.p.Calls() {
		if c.Rule == id {
			failed = append(failed, c)
		}
	}
	if len(failed) != 1 || failed[0].Status != 500 || failed[0].Path != "/containers/create" {
		t.Fatalf("calls failed by the rule: %+v", failed)
	}
}

func TestBodyMatch(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.p.Add(Rule{Method: "POST", Path: `^/containers/create$`, Body: "TPD_MARK=vllm", Action: Fail{Status: 409, Message: "marked"}})

	_, err := f.cli.ContainerCreate(ctx, chatty(f.name(t, "vllm"), "TPD_MARK=vllm"))
	if err == nil || !strings.Contains(err.Error(), "marked") || !cerrdefs.IsConflict(err) {
		t.Fatalf("create with the marker: %v", err)
	}
	// Unmatched, the buffered body still reaches the engine whole.
	if _, err := f.cli.ContainerCreate(ctx, chatty(f.name(t, "other"), "TPD_MARK=ray")); err != nil {
		t.Fatalf("create without the marker: %v", err)
	}
}

func TestPauseHoldsUntilRelease(t *testing.T) {
	f := setup(t)
	id := f.create(t, "paused")
	rule := f.p.Add(Rule{Method: "POST", Path: `^/containers/[^/]+/start$`, Action: Pause{}})

	done := make(chan error, 1)
	go func() {
		_, err := f.cli.ContainerStart(context.Background(), id, client.ContainerStartOptions{})
		done <- err
	}()
	select {
	case <-f.p.Reached(rule):
	case <-time.After(10 * time.Second):
		t.Fatal("the start never reached the barrier")
	}
	// Held: not answered and not started, however long the test takes here.
	select {
	case err := <-done:
		t.Fatalf("start returned while paused: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if f.running(t, id) {
		t.Fatal("container started while its start was paused")
	}
	f.p.Release(rule)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("start after release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("start still held after Release")
	}
	if !f.running(t, id) {
		t.Fatal("not running after release")
	}
}

func TestPauseThenInjectAFault(t *testing.T) {
	f := setup(t)
	id := f.create(t, "paused")
	pause := f.p.Add(Rule{Method: "POST", Path: `^/containers/[^/]+/start$`, Action: Pause{}})

	done := make(chan error, 1)
	go func() {
		_, err := f.cli.ContainerStart(context.Background(), id, client.ContainerStartOptions{})
		done <- err
	}()
	<-f.p.Reached(pause)
	// Rules added while a request is held apply to it once it goes on.
	f.p.Add(Rule{Method: "POST", Path: `^/containers/[^/]+/start$`, Action: Fail{Status: 500, Message: "node rebooted"}})
	f.p.Release(pause)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "node rebooted") {
		t.Fatalf("start: %v, want the fault injected while paused", err)
	}
	if f.running(t, id) {
		t.Fatal("started although failed")
	}
}

func TestHangUntilTheClientGivesUp(t *testing.T) {
	f := setup(t)
	rule := f.p.Add(Rule{Method: "GET", Path: `^/containers/json$`, Action: Hang{}})

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := f.cli.ContainerList(ctx, client.ContainerListOptions{})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < time.Second {
		t.Fatalf("list: %v after %v, want a timeout after 1s", err, time.Since(start))
	}
	// The proxy notices the client leaving and logs the call as unanswered.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := f.p.Calls()
		last := c[len(c)-1]
		if last.Path == "/containers/json" && last.Err != "" && last.Status == 0 && last.Rule == rule {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hung call not logged as ended: %+v", last)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A hung call goes on when its rule is removed.
	done := make(chan error, 1)
	go func() {
		_, err := f.cli.ContainerList(context.Background(), client.ContainerListOptions{})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	f.p.Remove(rule)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("list after remove: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still hung after Remove")
	}
}

func TestDropClosesTheConnection(t *testing.T) {
	f := setup(t)
	f.p.Add(Rule{Method: "GET", Path: `^/containers/json$`, Action: Drop{}})
	_, err := f.cli.ContainerList(context.Background(), client.ContainerListOptions{})
	// No answer at all: the client reads EOF where the status line should be.
	if !errors.Is(err, io.EOF) {
		t.Fatalf("list: %v, want a connection error", err)
	}
	f.p.Clear()
	if _, err := f.cli.ContainerList(context.Background(), client.ContainerListOptions{}); err != nil {
		t.Fatalf("list after Clear: %v", err)
	}
}

func TestTimesAndDelay(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.p.Add(Rule{Method: "GET", Path: `^/containers/json$`, Action: Fail{Status: 503, Message: "once"}, Times: 1})
	if _, err := f.cli.ContainerList(ctx, client.ContainerListOptions{}); err == nil || !strings.Contains(err.Error(), "once") {
		t.Fatalf("first list: %v", err)
	}
	if _, err := f.cli.ContainerList(ctx, client.ContainerListOptions{}); err != nil {
		t.Fatalf("second list: %v", err)
	}

	f.p.Add(Rule{Path: `^/_ping$`, Action: Delay{D: 300 * time.Millisecond}, Times: 1})
	start := time.Now()
	if _, err := f.cli.Ping(ctx, client.PingOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("delayed ping took %v", d)
	}
}
