package release

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// stockRead is what ReadScript prints on an image laid out as vLLM's stock images are
// (Ubuntu, pip's dist-packages under /usr/local, Debian's python3 dist-packages beside).
func stockRead(vllm, ray string) string {
	var b strings.Builder
	site := "/usr/local/lib/python3.12/dist-packages"
	b.WriteString("dist " + site + " vllm-" + vllm + ".dist-info\n")
	b.WriteString("dist " + site + " torch-2.9.0+cu129.dist-info\n")
	b.WriteString("dist " + site + " nvidia_nccl_cu12-2.27.3.dist-info\n")
	b.WriteString("dist " + site + " transformers-4.57.1.dist-info\n")
	if ray != "" {
		b.WriteString("dist " + site + " ray-" + ray + ".dist-info\n")
	}
	b.WriteString("dist /usr/lib/python3/dist-packages distro-1.9.0.dist-info\n")
	b.WriteString("bin vllm\n")
	if ray != "" {
		b.WriteString("bin ray\n")
	}
	b.WriteString("bin python3\nlib libibverbs\nend\n")
	return b.String()
}

func TestParseReadStockImage(t *testing.T) {
	img, err := ParseRead(stockRead("0.17.1", "2.53.0"))
	if err != nil {
		t.Fatal(err)
	}
	want := Image{VLLM: "0.17.1", Ray: "2.53.0", Torch: "2.9.0+cu129", NCCL: "2.27.3", Python: "3.12", RayBin: true, VLLMBin: true, Verbs: true}
	if !reflect.DeepEqual(img, want) {
		t.Fatalf("got %+v\nwant %+v", img, want)
	}
	if !img.HasRay() {
		t.Fatal("an image with ray installed and on PATH has Ray")
	}
	noRay, err := ParseRead(stockRead("0.22.1", ""))
	if err != nil {
		t.Fatal(err)
	}
	if noRay.HasRay() || noRay.Ray != "" {
		t.Fatalf("no-Ray image read as having Ray: %+v", noRay)
	}
}

func TestParseReadRefusesGarbage(t *testing.T) {
	for name, out := range map[string]string{
		"cut short":     "dist /usr/local/lib/python3.12/dist-packages vllm-0.17.1.dist-info\n",
		"no vllm":       "dist /usr/local/lib/python3.12/dist-packages torch-2.9.0.dist-info\nend\n",
		"foreign lines": "exec /bin/sh: not found\nend\n",
		"empty":         "",
		"malformed":     "dist vllm-0.17.1.dist-info\nend\n",
	} {
		if _, err := ParseRead(out); err == nil {
			t.Errorf("%s: accepted %q", name, out)
		}
	}
}

// The first site directory on the path wins, as on sys.path: a stale copy of vLLM in
// /usr/lib does not shadow the one pip installed under /usr/local.
func TestParseReadFirstSiteWins(t *testing.T) {
	out := "dist /usr/local/lib/python3.12/dist-packages vllm-0.22.1.dist-info\n" +
		"dist /usr/lib/python3/dist-packages vllm-0.9.0.dist-info\nbin vllm\nend\n"
	img, err := ParseRead(out)
	if err != nil {
		t.Fatal(err)
	}
	if img.VLLM != "0.22.1" || img.Python != "3.12" {
		t.Fatalf("got %+v", img)
	}
}

// The script runs under a real POSIX shell over a directory tree laid out as an image's,
// so a shell-syntax slip fails here, not on a node.
func TestReadScriptOnAFileTree(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal("no sh on this machine: ", err)
	}
	root := t.TempDir()
	for _, d := range []string{
		"usr/local/lib/python3.12/dist-packages/vllm-0.17.1.dist-info",
		"usr/local/lib/python3.12/dist-packages/ray-2.53.0.dist-info",
		"usr/local/lib/python3.12/dist-packages/torch-2.9.0+cu129.dist-info",
		"usr/lib/x86_64-linux-gnu",
	} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libibverbs.so.1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The script names absolute paths; run it against the tree by rewriting its roots.
	script := strings.NewReplacer(" /usr/", " "+root+"/usr/", " /lib/", " "+root+"/lib/", " /opt/", " "+root+"/opt/").Replace(ReadScript)
	cmd := exec.Command(sh, "-c", script)
	cmd.Env = []string{"PATH=" + root + "/nowhere"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script failed: %v\n%s", err, out)
	}
	img, err := ParseRead(strings.ReplaceAll(string(out), root, ""))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if img.VLLM != "0.17.1" || img.Ray != "2.53.0" || img.Torch != "2.9.0+cu129" || !img.Verbs || img.RayBin || img.Python != "3.12" {
		t.Fatalf("got %+v from\n%s", img, out)
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{
		"0.17.1": {0, 17, 1}, "0.22.1+cu129": {0, 22, 1}, "0.11.1rc2": {0, 11, 1},
		"0.18.0.dev12+g1234": {0, 18, 0}, "1.0": {1, 0, 0},
	} {
		got, ok := ParseVersion(in)
		if !ok || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "x", "v0.17", "17"} {
		if _, ok := ParseVersion(bad); ok {
			t.Errorf("ParseVersion(%q) accepted", bad)
		}
	}
}

func img(node, vllm, ray string) Image {
	i := Image{Node: node, Ref: "vllm/vllm-openai:test", ID: "sha256:" + vllm + ray, VLLM: vllm, Ray: ray, RayBin: ray != "", VLLMBin: true}
	return i
}

func TestDecideByRelease(t *testing.T) {
	two := Layout{Head: "node-a", World: 2, Nodes: 2}
	for _, tc := range []struct {
		name, executor, vllm, ray string
		env                       map[string]string
		want                      Model
	}{
		{"0.11 legacy copies only VLLM_*", "auto", "0.11.0", "2.49.0", nil,
			Model{Executor: "ray", RayExecutor: RayLegacy, EnvCopy: EnvCopyVLLMOnly, PinsDriverNode: true, Rendezvous: RendezvousDriverHostIP, ChecksUniqueIPs: true}},
		{"0.17.1 legacy copies prefixes and overwrites", "auto", "0.17.1", "2.53.0", nil,
			Model{Executor: "ray", RayExecutor: RayLegacy, EnvCopy: EnvCopyPrefixesOverwrite, PinsDriverNode: true, Rendezvous: RendezvousDriverHostIP, ChecksUniqueIPs: true}},
		{"0.22.1 with Ray runs V2", "auto", "0.22.1", "2.54.0", nil,
			Model{Executor: "ray", RayExecutor: RayV2, EnvCopy: EnvCopyAllSetdefault, Rendezvous: RendezvousRayNodeIP}},
		{"0.22.1 with Ray and the legacy switch", "ray", "0.22.1", "2.54.0", map[string]string{EnvRayV2: "0"},
			Model{Executor: "ray", RayExecutor: RayLegacy, EnvCopy: EnvCopyPrefixesOverwrite, PinsDriverNode: true, Rendezvous: RendezvousDriverHostIP, ChecksUniqueIPs: true}},
		{"0.20 opts in to V2", "auto", "0.20.1", "2.54.0", map[string]string{EnvRayV2: "1"},
			Model{Executor: "ray", RayExecutor: RayV2, EnvCopy: EnvCopyAllSetdefault, Rendezvous: RendezvousRayNodeIP}},
		{"0.20 without the switch stays legacy", "auto", "0.20.1", "2.54.0", nil,
			Model{Executor: "ray", RayExecutor: RayLegacy, EnvCopy: EnvCopyPrefixesOverwrite, PinsDriverNode: true, Rendezvous: RendezvousDriverHostIP, ChecksUniqueIPs: true}},
		{"0.17 ignores the switch it does not have", "auto", "0.17.1", "2.53.0", map[string]string{EnvRayV2: "1"},
			Model{Executor: "ray", RayExecutor: RayLegacy, EnvCopy: EnvCopyPrefixesOverwrite, PinsDriverNode: true, Rendezvous: RendezvousDriverHostIP, ChecksUniqueIPs: true}},
		// vllm/envs.py: bool(int(os.getenv("VLLM_USE_RAY_V2_EXECUTOR_BACKEND", "1"))).
		{"0.22.1 reads the switch with int(): ' 0' is legacy", "ray", "0.22.1", "2.54.0", map[string]string{EnvRayV2: " 0"},
			Model{Executor: "ray", RayExecutor: RayLegacy, EnvCopy: EnvCopyPrefixesOverwrite, PinsDriverNode: true, Rendezvous: RendezvousDriverHostIP, ChecksUniqueIPs: true}},
		{"0.20 reads the switch with int(): '2' is on", "ray", "0.20.1", "2.54.0", map[string]string{EnvRayV2: "2"},
			Model{Executor: "ray", RayExecutor: RayV2, EnvCopy: EnvCopyAllSetdefault, Rendezvous: RendezvousRayNodeIP}},
		{"0.22.1 without Ray goes mp", "auto", "0.22.1", "", nil,
			Model{Executor: "mp", EnvCopy: EnvCopyNone, Rendezvous: RendezvousMasterAddr}},
		{"mp asked for on 0.17.1", "mp", "0.17.1", "2.53.0", nil,
			Model{Executor: "mp", EnvCopy: EnvCopyNone, Rendezvous: RendezvousMasterAddr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := two
			l.Executor, l.HeadEnv = tc.executor, tc.env
			got, err := Decide(l, img("node-a", tc.vllm, tc.ray))
			if err != nil {
				t.Fatal(err)
			}
			if got.Why == "" || got.OpenPorts == "" {
				t.Errorf("no reason or ports: %+v", got)
			}
			got.Why, got.OpenPorts, tc.want.VLLM = "", "", tc.vllm
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDecideRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, executor, vllm, ray string
		world, nodes              int
		typ                       string
		says                      []string
	}{
		{"ray on a stock image without Ray", "ray", "0.22.1", "", 2, 2, failure.ImageLacksRay,
			[]string{"node-a", "vllm/vllm-openai:test", "0.22.1", "executor: mp", "pip install ray", "0.17.1 or earlier"}},
		{"ray on a release without --nnodes or Ray", "ray", "0.10.2", "", 2, 2, failure.ImageLacksRay,
			[]string{"node-a", "0.10.2", "pip install ray"}},
		{"mp before --nnodes", "mp", "0.11.0", "2.49.0", 2, 2, failure.ImageLacksNnodes,
			[]string{"node-a", "0.11.0", "0.11.1", "executor: ray"}},
		{"auto without Ray, layout does not divide", "auto", "0.22.1", "", 3, 2, failure.ExecutorUnavailable,
			[]string{"3 GPUs", "2 nodes", "Ray added"}},
		{"auto with neither", "auto", "0.10.0", "", 2, 2, failure.ExecutorUnavailable,
			[]string{"neither Ray nor --nnodes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decide(Layout{Executor: tc.executor, Head: "node-a", World: tc.world, Nodes: tc.nodes}, img("node-a", tc.vllm, tc.ray))
			e, ok := err.(*Error)
			if !ok || e.Type != tc.typ {
				t.Fatalf("got %v, want a %s", err, tc.typ)
			}
			for _, s := range tc.says {
				if !strings.Contains(e.Msg, s) {
					t.Errorf("message lacks %q: %s", s, e.Msg)
				}
			}
		})
	}
}

// A diagnosis is emitted only for the releases whose code prints it.
func TestCanPrintFollowsTheExecutor(t *testing.T) {
	models := map[string]Model{}
	for name, c := range map[string]struct{ vllm, ray, executor string }{
		"0.11.0": {"0.11.0", "2.49.0", "auto"}, "0.17.1": {"0.17.1", "2.53.0", "auto"},
		"0.22.1-ray": {"0.22.1", "2.54.0", "auto"}, "0.22.1": {"0.22.1", "", "auto"},
	} {
		m, err := Decide(Layout{Executor: c.executor, Head: "node-a", World: 2, Nodes: 2}, img("node-a", c.vllm, c.ray))
		if err != nil {
			t.Fatal(err)
		}
		models[name] = m
	}
	for _, tc := range []struct {
		typ  string
		want map[string]bool
	}{
		{"DuplicateAddress", map[string]bool{"0.11.0": true, "0.17.1": true, "0.22.1-ray": false, "0.22.1": false}},
		{"PlacementGroupPending", map[string]bool{"0.11.0": true, "0.17.1": true, "0.22.1-ray": true, "0.22.1": false}},
		{"GCSUnreachable", map[string]bool{"0.11.0": true, "0.17.1": true, "0.22.1-ray": true, "0.22.1": false}},
		{"C10dUnreachable", map[string]bool{"0.11.0": true, "0.17.1": true, "0.22.1-ray": true, "0.22.1": true}},
	} {
		for rel, want := range tc.want {
			if got := models[rel].CanPrint(tc.typ); got != want {
				t.Errorf("%s under %s: CanPrint = %v, want %v", tc.typ, rel, got, want)
			}
		}
	}
	if strings.Contains(models["0.22.1-ray"].PendingFix(), "VLLM_HOST_IP") {
		t.Error("V2 pins no node, so its pending-group fix must not blame VLLM_HOST_IP")
	}
	if !strings.Contains(models["0.17.1"].PendingFix(), "VLLM_HOST_IP") {
		t.Error("the legacy executor's pending-group fix names the pin")
	}
}

func TestCompareNamesNodesAndVersions(t *testing.T) {
	a, b := img("node-a", "0.17.1", "2.53.0"), img("node-b", "0.17.1", "2.54.0")
	_, err := Compare([]Image{a, b}, "node-a", "fail")
	e, ok := err.(*Error)
	if !ok || e.Type != failure.ImageMismatch {
		t.Fatalf("got %v", err)
	}
	for _, s := range []string{"node-a", "node-b", "ray 2.53.0 on node-a, 2.54.0 on node-b", "image_mismatch: warn"} {
		if !strings.Contains(e.Msg, s) {
			t.Errorf("message lacks %q: %s", s, e.Msg)
		}
	}
	warn, err := Compare([]Image{a, b}, "node-a", "warn")
	if err != nil || len(warn) != 1 {
		t.Fatalf("warn: %v %v", warn, err)
	}
	same := b
	same.Node, same.ID = "node-c", b.ID
	if w, err := Compare([]Image{b, same}, "node-b", "fail"); err != nil || w != nil {
		t.Fatalf("same image refused: %v %v", w, err)
	}
	// Same versions, different builds: the IDs are named.
	c := a
	c.Node, c.ID = "node-c", "sha256:0123456789abcdef"
	_, err = Compare([]Image{a, c}, "node-a", "fail")
	if err == nil || !strings.Contains(err.Error(), "image ID") {
		t.Fatalf("different builds of equal versions: %v", err)
	}
}

// An image's output is outside input: nothing in it may make the parser panic, and what
// it accepts always names a vLLM version.
func FuzzParseRead(f *testing.F) {
	f.Add(stockRead("0.17.1", "2.53.0"))
	f.Add(stockRead("0.22.1", ""))
	f.Add("end\n")
	f.Fuzz(func(t *testing.T, out string) {
		img, err := ParseRead(out)
		if err == nil && img.VLLM == "" {
			t.Fatalf("accepted an image without vLLM: %q", out)
		}
	})
}

// A switch value int() refuses would end vLLM in a ValueError (vllm/envs.py reads
// VLLM_USE_RAY_V2_EXECUTOR_BACKEND with bool(int(...))): refused before anything starts,
// naming the variable; a release without the switch ignores it.
func TestDecideRefusesASwitchIntRefuses(t *testing.T) {
	l := Layout{Head: "node-a", World: 2, Nodes: 2, Executor: "ray", HeadEnv: map[string]string{EnvRayV2: "false"}}
	_, err := Decide(l, img("node-a", "0.22.1", "2.54.0"))
	var e *Error
	if !errors.As(err, &e) || e.Type != failure.BadRequest || !strings.Contains(e.Msg, EnvRayV2) || !strings.Contains(e.Msg, "invalid literal for int()") {
		t.Fatalf("%v, want BadRequest naming %s", err, EnvRayV2)
	}
	if _, err := Decide(l, img("node-a", "0.17.1", "2.53.0")); err != nil {
		t.Errorf("0.17.1 has no switch to read: %v", err)
	}
}

// An image whose own ENV sets vLLM's per-GPU NIC selection: the read names the variables
// (the read container carries exactly the image's ENV), and the deploy is refused naming
// the node, the image and the fix; a blank value is vLLM's unset and is not reported.
func TestImageSettingNICSelectionIsRefused(t *testing.T) {
	out := strings.Replace(stockRead("0.32.0", ""), "end\n", "env VLLM_GPU_NIC_PCIE_MAPPING\nenv VLLM_NIC_SELECTION_VARS\nenv PATH\nend\n", 1)
	img, err := ParseRead(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(img.NICSelection, []string{"VLLM_GPU_NIC_PCIE_MAPPING", "VLLM_NIC_SELECTION_VARS"}) {
		t.Fatalf("NIC selection %q", img.NICSelection)
	}
	img.Node, img.Ref = "node-b", "site/vllm:rails"
	plain, _ := ParseRead(stockRead("0.32.0", ""))
	plain.Node = "node-a"
	if err := CheckImageEnv([]Image{plain}); err != nil {
		t.Fatalf("an image without them: %v", err)
	}
	err = CheckImageEnv([]Image{plain, img})
	var re *Error
	if !errors.As(err, &re) || re.Type != failure.ImageNICSelection {
		t.Fatalf("got %v, want %s", err, failure.ImageNICSelection)
	}
	for _, want := range []string{"node-b: image site/vllm:rails sets VLLM_GPU_NIC_PCIE_MAPPING and VLLM_NIC_SELECTION_VARS in its ENV", "NCCL_IB_HCA", "ENV VLLM_GPU_NIC_PCIE_MAPPING= VLLM_NIC_SELECTION_VARS="} {
		if !strings.Contains(re.Msg, want) {
			t.Errorf("message lacks %q: %s", want, re.Msg)
		}
	}
	if strings.Contains(re.Msg, "node-a") {
		t.Errorf("names the node whose image is fine: %s", re.Msg)
	}
}

// The NCCL the engine loads is read from the library's own version string, which wins
// over the wheel's record: here the wheel says 2.29.7 and a 2.30.7 build was copied over
// its libnccl.so.2. The system's copy comes after the wheel's (torch loads the wheel's).
func TestReadScriptReadsTheNCCLLibrarysVersion(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal("no sh on this machine: ", err)
	}
	grep, err := exec.LookPath("grep")
	if err != nil {
		t.Skip("no grep on this machine")
	}
	root := t.TempDir()
	site := "usr/local/lib/python3.12/dist-packages"
	for _, d := range []string{site + "/vllm-0.32.0.dist-info", site + "/nvidia_nccl_cu13-2.29.7.dist-info", site + "/nvidia/nccl/lib", "usr/lib/x86_64-linux-gnu"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lib := "\x7fELF\x02\x01\x01\x00\x00\x00NCCL version %s\x00\x00NCCL version 2.30.7+cuda13.0\x00NCCL version 2.99.0\x00"
	for path, body := range map[string]string{site + "/nvidia/nccl/lib/libnccl.so.2": lib, "usr/lib/x86_64-linux-gnu/libnccl.so.2": "NCCL version 2.21.5+cuda12.4\x00"} {
		if err := os.WriteFile(filepath.Join(root, path), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := strings.NewReplacer(" /usr/", " "+root+"/usr/", " /lib/", " "+root+"/lib/", " /opt/", " "+root+"/opt/").Replace(ReadScript)
	cmd := exec.Command(sh, "-c", script)
	cmd.Env = []string{"PATH=" + filepath.Dir(grep)}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script failed: %v\n%s", err, out)
	}
	img, err := ParseRead(strings.ReplaceAll(string(out), root, ""))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if img.NCCL != "2.30.7" || img.NCCLLib != "/"+site+"/nvidia/nccl/lib/libnccl.so.2" {
		t.Fatalf("got nccl %q from %q, want 2.30.7 from the wheel's library\n%s", img.NCCL, img.NCCLLib, out)
	}
	m, err := Decide(Layout{Executor: ExecutorMP, World: 2, Nodes: 2}, img)
	if err != nil || m.NCCL != "2.30.7" {
		t.Fatalf("Decide: %+v, %v: the model carries the library's NCCL", m, err)
	}
}

// Without a readable library version (no grep in the image, or a stripped library) the
// wheel's record stands, and the library's path is still said.
func TestParseReadNCCLFallsBackToTheWheel(t *testing.T) {
	out := "dist /usr/local/lib/python3.12/dist-packages vllm-0.22.1.dist-info\n" +
		"dist /usr/local/lib/python3.12/dist-packages nvidia_nccl_cu13-2.28.9.dist-info\n" +
		"nccllib /usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2\n" +
		"nccllib /usr/lib/x86_64-linux-gnu/libnccl.so.2 2.21.5\nend\n"
	img, err := ParseRead(out)
	if err != nil {
		t.Fatal(err)
	}
	if img.NCCL != "2.28.9" || img.NCCLLib != "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2" {
		t.Fatalf("got %+v", img)
	}
}
