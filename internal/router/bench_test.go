package router

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// benchEngine answers a completion at once: what is measured is the HTTP path, not a model.
func benchEngine(b *testing.B) *httptest.Server {
	body := []byte(`{"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,"text":"hello world","finish_reason":"length"}],"usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4}}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// benchRouter is the router under measure: in this process, or with TPDEPLOY_ROUTER_BIN the
// router binary in a process of its own, with TPDEPLOY_ROUTER_CPUS (e.g. "0") naming the
// cores taskset gives it and GOMAXPROCS their count, so that "one router on one core" is
// measured with the clients and the engine elsewhere.
func benchRouter(b *testing.B, engine string) string {
	routes := Routes{Models: []Model{{ID: "m", Replicas: []Replica{{Name: "r", URL: engine}}}}}
	if bin := os.Getenv("TPDEPLOY_ROUTER_BIN"); bin != "" {
		return routerProcess(b, bin, routes)
	}
	tb := NewTable(256)
	if err := tb.Set(routes); err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(tb, Options{Keys: []string{"sk-bench"}, Metrics: NewMetrics(tb)}))
	b.Cleanup(srv.Close)
	return srv.URL
}

func routerProcess(b *testing.B, bin string, routes Routes) string {
	dir := b.TempDir()
	state, _ := MarshalRoutes(routes)
	if err := errors.Join(os.WriteFile(filepath.Join(dir, "routes.json"), state, 0o600), os.WriteFile(filepath.Join(dir, "key"), []byte("sk-bench\n"), 0o600)); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	args := []string{bin, "--listen", addr, "--admin", "unix:" + filepath.Join(dir, "admin.sock"), "--state", filepath.Join(dir, "routes.json"),
		"--api-key-file", filepath.Join(dir, "key"), "--log-level", "warn"}
	env := os.Environ()
	if cpus := os.Getenv("TPDEPLOY_ROUTER_CPUS"); cpus != "" {
		args = append([]string{"taskset", "-c", cpus}, args...)
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", len(strings.Split(cpus, ","))))
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env, cmd.Stderr = env, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			b.Fatalf("the router binary does not listen on %s", addr)
		}
	}
}

const benchBody = `{"model": "m", "prompt": "Say hello", "max_tokens": 2}`

func benchClient() *http.Client { return &http.Client{Transport: NewTransport()} }

func once(b *testing.B, c *http.Client, url string) time.Duration {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(benchBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
	return d
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkRouterAddedLatency is one client's request on loopback, straight to the engine
// and through the router, alternated so that both see the same machine; it reports the
// p50 and p99 of each and the router's addition (the differences).
func BenchmarkRouterAddedLatency(b *testing.B) {
	engine := benchEngine(b)
	router := benchRouter(b, engine.URL)
	c := benchClient()
	for range 200 { // warm the connections
		once(b, c, engine.URL+"/v1/completions")
		once(b, c, router+"/v1/completions")
	}
	direct := make([]time.Duration, 0, b.N)
	routed := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		direct = append(direct, once(b, c, engine.URL+"/v1/completions"))
		routed = append(routed, once(b, c, router+"/v1/completions"))
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(percentile(direct, 0.5)), "direct-p50-µs")
	b.ReportMetric(us(percentile(direct, 0.99)), "direct-p99-µs")
	b.ReportMetric(us(percentile(routed, 0.5)), "routed-p50-µs")
	b.ReportMetric(us(percentile(routed, 0.99)), "routed-p99-µs")
	b.ReportMetric(us(percentile(routed, 0.5)-percentile(direct, 0.5)), "added-p50-µs")
	b.ReportMetric(us(percentile(routed, 0.99)-percentile(direct, 0.99)), "added-p99-µs")
}

// BenchmarkRouterThroughput is requests per second through one router from parallel
// clients (GOMAXPROCS × -test.parallelism goroutines); the clients and the engine share the
// process, so with -cpu 1 the router has less than one core.
func BenchmarkRouterThroughput(b *testing.B) {
	engine := benchEngine(b)
	router := benchRouter(b, engine.URL)
	c := benchClient()
	b.SetParallelism(8)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			once(b, c, router+"/v1/completions")
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}

// BenchmarkRouterThroughputDirect is the same load straight to the engine: the ceiling the
// router's figure is read against.
func BenchmarkRouterThroughputDirect(b *testing.B) {
	engine := benchEngine(b)
	c := benchClient()
	b.SetParallelism(8)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			once(b, c, engine.URL+"/v1/completions")
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}
