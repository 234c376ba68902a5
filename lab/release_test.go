//go:build integration

package lab

import (
	"strings"
	"testing"
	"time"
)

// What a filesystem-only preflight reads in each release's image: a short-lived container
// whose entrypoint is /bin/sh -c with shell builtins and globs only.
func TestEachImageShowsItsReleaseOnTheFilesystem(t *testing.T) {
	l, eng := upLab(t)
	script := `for d in ` + SitePackages + `/*.dist-info; do echo "dist $d"; while read -r line; do case "$line" in Version:*) echo "$line";; esac; done <"$d/METADATA"; done
for f in /usr/local/bin/* /usr/lib/python3.*/ /usr/lib/x86_64-linux-gnu/libibverbs.so.1; do [ -e "$f" ] && echo "path $f"; done`
	for _, r := range Releases {
		t.Run(r.Name, func(t *testing.T) {
			id := dockerRun(t, withImage(l, r), eng, "node-a", r.Name+"-probe", nil, "/bin/sh", "-c", script)
			if code := containerExit(t, eng, id, 10*time.Second); code != 0 {
				t.Fatalf("probe exit %d: %s", code, logsOf(t, eng, id))
			}
			out := logsOf(t, eng, id)
			want := []string{
				"dist " + SitePackages + "/vllm-" + r.VLLM + ".dist-info\nVersion: " + r.VLLM + "\n",
				"dist " + SitePackages + "/torch-" + r.Torch + ".dist-info\nVersion: " + r.Torch + "\n",
				"dist " + SitePackages + "/" + r.NCCLDist + "-" + r.NCCL + ".dist-info\nVersion: " + r.NCCL + "\n",
				"path /usr/local/bin/vllm\n", "path /usr/lib/python3.12/\n", "path /usr/lib/x86_64-linux-gnu/libibverbs.so.1\n",
			}
			if r.Ray != "" {
				want = append(want, "dist "+SitePackages+"/ray-"+r.Ray+".dist-info\nVersion: "+r.Ray+"\n", "path /usr/local/bin/ray\n")
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("probe lacks %q:\n%s", w, out)
				}
			}
			if r.Ray == "" && (strings.Contains(out, "/ray-") || strings.Contains(out, "/usr/local/bin/ray")) {
				t.Errorf("an image without Ray shows Ray:\n%s", out)
			}
			v := dockerRun(t, withImage(l, r), eng, "node-a", r.Name+"-version", nil, "vllm", "--version")
			if code := containerExit(t, eng, v, 10*time.Second); code != 0 || logsOf(t, eng, v) != r.VLLM+"\n" {
				t.Errorf("vllm --version: exit %d %q", code, logsOf(t, eng, v))
			}
		})
	}
}

// A stock current image has no Ray: the engine refuses a container whose entrypoint is
// ray, and vLLM's Ray backend fails with vLLM's import error.
func TestStockImageHasNoRay(t *testing.T) {
	l, eng := upLab(t)
	l = withImage(l, release(t, "vllm-0.22.1"))
	_, err := tryDockerRun(t, l, eng, l.Image, "node-a", "ray-head", nil, "ray", "start", "--head", "--block")
	if err == nil || !strings.Contains(err.Error(), `exec: "ray": executable file not found in $PATH`) {
		t.Fatalf("ray entrypoint on an image without Ray: %v", err)
	}
	v := dockerRun(t, l, eng, "node-a", "vllm", nil, serveArgs...)
	waitLogs(t, eng, v, 10*time.Second, "pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig",
		"Value error, Failed to import Ray: No module named 'ray'.Please install Ray with `pip install ray`.")
	if code := containerExit(t, eng, v, 10*time.Second); code == 0 {
		t.Error("vllm exited 0")
	}
}
