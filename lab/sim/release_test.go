package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestImageReleaseReadsDistInfo(t *testing.T) {
	dir := t.TempDir()
	for name, ver := range map[string]string{"vllm": "0.17.1", "ray": "2.54.0"} {
		d := filepath.Join(dir, name+"-"+ver+".dist-info")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		meta := "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + ver + "\n\nbody\n"
		if err := os.WriteFile(filepath.Join(d, "METADATA"), []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := distPackages
	distPackages = dir
	defer func() { distPackages = old }()
	if v, err := distVersion("vllm"); err != nil || v != "0.17.1" {
		t.Errorf("vllm %q %v", v, err)
	}
	if v, err := distVersion("torch"); err == nil {
		t.Errorf("torch %q without a dist-info", v)
	}
}

func TestReleaseRules(t *testing.T) {
	for _, tc := range []struct {
		vllm, v2env         string
		mp, prefixes, rayV2 bool
	}{
		{"0.11.0", "", false, false, false},
		{"0.17.1", "", true, true, false},
		{"0.17.1", "1", true, true, false}, // no RayExecutorV2 before 0.20
		{"0.20.0", "1", true, true, true},
		{"0.22.1", "", true, true, true},
		{"0.22.1", "0", true, true, false},
		{"0.22.1", " 0", true, true, false}, // int(" 0") == 0
		{"0.22.1", "2", true, true, true},
	} {
		t.Setenv("VLLM_USE_RAY_V2_EXECUTOR_BACKEND", tc.v2env)
		if tc.v2env == "" {
			os.Unsetenv("VLLM_USE_RAY_V2_EXECUTOR_BACKEND") // unset: envs.py's default
		}
		r := release{vllm: tc.vllm}
		if r.hasMultiNodeMP() != tc.mp || r.copiesPrefixes() != tc.prefixes || r.rayV2() != tc.rayV2 {
			t.Errorf("%s V2=%q: mp %v prefixes %v v2 %v", tc.vllm, tc.v2env, r.hasMultiNodeMP(), r.copiesPrefixes(), r.rayV2())
		}
	}
}

func TestOldReleaseRejectsMultiNodeFlags(t *testing.T) {
	_, err := parseServe([]string{"serve", "/m", "-tp", "2", "--nnodes", "2", "--node-rank=0", "--master-addr", "10.0.0.1", "--port", "8000"}, release{vllm: "0.11.0"})
	var ex *exitError
	if !errors.As(err, &ex) || ex.code != 2 || ex.msg != vllmUsage+"\nvllm: error: unrecognized arguments: --nnodes 2 --node-rank=0 --master-addr 10.0.0.1" {
		t.Fatalf("%v", err)
	}
	f, err := parseServe([]string{"serve", "/m", "--nnodes", "2"}, release{vllm: "0.11.1"})
	if err != nil || f.nnodes != 2 {
		t.Fatalf("0.11.1: %+v %v", f, err)
	}
}

// vllm/envs.py: bool(int(os.getenv("VLLM_USE_RAY_V2_EXECUTOR_BACKEND", "1"))): a value
// int() refuses is Python's ValueError, not the default.
func TestRayV2SwitchIsReadWithInt(t *testing.T) {
	for _, v := range []string{"false", "", "yes"} {
		t.Setenv("VLLM_USE_RAY_V2_EXECUTOR_BACKEND", v)
		_, err := release{vllm: "0.22.1"}.rayV2Switch()
		if want := "ValueError: invalid literal for int() with base 10: '" + v + "'"; err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %s", v, err, want)
		}
	}
}

// The simulated NCCL is the library's: its compiled-in version string wins over the
// wheel's record, which stands when the library is absent.
func TestImageNCCLIsTheLibrarysVersion(t *testing.T) {
	dir := t.TempDir()
	old := distPackages
	distPackages = dir
	defer func() { distPackages = old }()
	if err := os.MkdirAll(filepath.Join(dir, "nvidia_nccl_cu13-2.29.7.dist-info"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nvidia_nccl_cu13-2.29.7.dist-info", "METADATA"), []byte("Name: nvidia-nccl-cu13\nVersion: 2.29.7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v := imageNCCL(); v != "2.29.7" {
		t.Errorf("no library: %q, want the wheel's 2.29.7", v)
	}
	lib := filepath.Join(dir, "nvidia", "nccl", "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "libnccl.so.2"), []byte("\x7fELF\x00NCCL version %s\x00NCCL version 2.30.7+cuda13.0\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v := imageNCCL(); v != "2.30.7" {
		t.Errorf("library 2.30.7 over the 2.29.7 wheel: %q", v)
	}
}
