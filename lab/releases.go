package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tpdeploy/tpdeploy/internal/images"
)

// Release is a vLLM release the lab models: one simulator image per release, holding what
// a real vLLM image of that release holds where a preflight that only reads the filesystem
// looks (lab/README.md, "Releases"). The simulator decides what it imitates from the same
// files (its vllm dist-info).
type Release struct {
	// Name is the image tag: tpdeploy/sim:<Name>.
	Name string
	// VLLM, Torch and Ray are the installed versions (Ray empty: not installed); NCCLDist is
	// NCCL's pip distribution (nvidia_nccl_cu12, nvidia_nccl_cu13) and NCCL its version.
	VLLM, Torch, Ray, NCCLDist, NCCL string
	// NCCLLib is the version of the libnccl.so.2 in the wheel's directory when it is not
	// the wheel's own (a newer NCCL built from source and copied over it); empty: NCCL.
	// Every image holds a small stand-in for that file carrying NCCL's version string
	// (ncclStandIn), which tpdeploy's image read and the simulator both read.
	NCCLLib string
	// AuthToken, when set, is in the image at /root/.ray/auth_token (Ray's default token
	// path), as in an image whose build ran a bare ray.init(): Ray ≥ 2.59 writes a token
	// there then, and `ray start --head` turns token authentication on whenever one
	// exists (Ray PR #64755).
	AuthToken string
	// RustFrontend: the wheel's Rust front end binary is in the image, at
	// <site>/vllm/vllm-rs (what VLLM_USE_RUST_FRONTEND=1 runs; the simulator again here).
	RustFrontend bool
	// Env are ENV lines of the image's own ("NAME=value"), as a site's image may carry.
	Env []string
}

// LoadedNCCL is the version of the NCCL library the image's engine loads.
func (r Release) LoadedNCCL() string {
	if r.NCCLLib != "" {
		return r.NCCLLib
	}
	return r.NCCL
}

// Image is the release's simulator image.
func (r Release) Image() string { return "tpdeploy/sim:" + r.Name }

// Releases are the modelled releases (versions and sources in lab/README.md).
var Releases = []Release{
	{Name: "vllm-0.11.0", VLLM: "0.11.0", Torch: "2.8.0+cu128", Ray: "2.49.2", NCCLDist: "nvidia_nccl_cu12", NCCL: "2.27.3"},
	{Name: "vllm-0.17.1", VLLM: "0.17.1", Torch: "2.10.0+cu129", Ray: "2.54.0", NCCLDist: "nvidia_nccl_cu12", NCCL: "2.27.5"},
	{Name: "vllm-0.22.1", VLLM: "0.22.1", Torch: "2.11.0+cu130", NCCLDist: "nvidia_nccl_cu13", NCCL: "2.28.9"},
	{Name: "vllm-0.22.1-ray", VLLM: "0.22.1", Torch: "2.11.0+cu130", Ray: "2.55.0", NCCLDist: "nvidia_nccl_cu13", NCCL: "2.28.9"},
}

// Ray 2.59 added: what `pip install ray` into a current image brings since 2026-09 (Ray
// PR #64755, token authentication on by default for a head that finds a token).
func init() {
	Releases = append(Releases, Release{Name: "vllm-0.22.1-ray2.59", VLLM: "0.22.1", Torch: "2.11.0+cu130", Ray: "2.59.0", NCCLDist: "nvidia_nccl_cu13", NCCL: "2.28.9"})
	// The newest release modelled: 0.32.0 (torch 2.13.0, whose CUDA 13 wheels pin
	// nvidia-nccl-cu13 2.29.7), as its stock image (no Ray) and with `pip install ray`
	// as of today (2.59). Both carry the Rust front end (lab/README.md, "Releases").
	Releases = append(Releases,
		Release{Name: "vllm-0.32.0", VLLM: "0.32.0", Torch: "2.13.0+cu130", NCCLDist: "nvidia_nccl_cu13", NCCL: "2.29.7", RustFrontend: true},
		Release{Name: "vllm-0.32.0-ray", VLLM: "0.32.0", Torch: "2.13.0+cu130", Ray: "2.59.0", NCCLDist: "nvidia_nccl_cu13", NCCL: "2.29.7", RustFrontend: true})
}

// NCCL230Release is the newest release's stock image with NCCL 2.30.7 over the wheel's
// library (the wheel's record still says 2.29.7), as the switchless-fabric recipes build
// it: 2.30.7 is the first NCCL with NCCL_IB_SUBNET_AWARE_ROUTING (src/transport/net_ib/
// connect.cc at v2.30.7-1), with which each peer connects over the HCA on its subnet, so
// a triangle and a ring of Sparks run IB (lab/README.md, "NCCL per link"). Not in
// Releases, so the release matrix stays as long as it was.
var NCCL230Release = Release{Name: "vllm-0.32.0-nccl2.30", VLLM: "0.32.0", Torch: "2.13.0+cu130", NCCLDist: "nvidia_nccl_cu13", NCCL: "2.29.7",
	NCCLLib: "2.30.7", RustFrontend: true}

// NCCL230RayRelease is NCCL230Release with `pip install ray` as of today (2.59.0, as
// vllm-0.32.0-ray has it), so a switchless fabric on NCCL 2.30.7 is deployed under Ray as
// well as under mp: executor auto picks RayExecutorV2 on it. Not in Releases, as its
// stock twin.
var NCCL230RayRelease = Release{Name: "vllm-0.32.0-nccl2.30-ray", VLLM: "0.32.0", Torch: "2.13.0+cu130", Ray: "2.59.0", NCCLDist: "nvidia_nccl_cu13", NCCL: "2.29.7",
	NCCLLib: "2.30.7", RustFrontend: true}

// RayTokenRelease is the Ray 2.59 release with a token already in the image
// (Release.AuthToken): a cluster started on it runs Ray's token authentication whether
// or not tpdeploy was given the token. It is no modelled vLLM release (not in Releases),
// only an image of one.
var RayTokenRelease = Release{Name: "vllm-0.22.1-ray2.59-token", VLLM: "0.22.1", Torch: "2.11.0+cu130", Ray: "2.59.0",
	NCCLDist: "nvidia_nccl_cu13", NCCL: "2.28.9", AuthToken: "7d1c6e0b1f2a4c38a9e4b5d6c7f80912"}

// NICSelectionRelease is the newest release's stock image with vLLM's per-GPU NIC
// selection in its own ENV (vLLM PR #42083: both variables set, a GPU-to-NIC PCIe map and
// the variables to prepend to), as a site's image built for a per-GPU rail layout carries
// it. Not a modelled release (not in Releases): tpdeploy refuses it at plan.
var NICSelectionRelease = Release{Name: "vllm-0.32.0-nicmap", VLLM: "0.32.0", Torch: "2.13.0+cu130", NCCLDist: "nvidia_nccl_cu13", NCCL: "2.29.7",
	RustFrontend: true, Env: []string{"VLLM_GPU_NIC_PCIE_MAPPING=0000:19:00.0=0000:1a:00.0", "VLLM_NIC_SELECTION_VARS=NCCL_IB_HCA:1"}}

// DefaultRelease is what a lab's deploys run unless Config.Release says otherwise: a current
// release with Ray added, as people who want Ray build it.
const DefaultRelease = "vllm-0.22.1-ray"

// SimImage is the default release's image.
const SimImage = "tpdeploy/sim:" + DefaultRelease

// ReleaseNamed is the modelled release of that name.
func ReleaseNamed(name string) (Release, bool) {
	for _, r := range Releases {
		if r.Name == name {
			return r, true
		}
	}
	return Release{}, false
}

// ImageReleases are the releases the lab builds an image of: Releases, then the images
// that are no modelled release of their own (RayTokenRelease, NICSelectionRelease,
// NCCL230Release, NCCL230RayRelease).
func ImageReleases() []Release {
	return append(slices.Clone(Releases), RayTokenRelease, NICSelectionRelease, NCCL230Release, NCCL230RayRelease)
}

// SimImages are every image release's image, in ImageReleases' order.
func SimImages() []string {
	var out []string
	for _, r := range ImageReleases() {
		out = append(out, r.Image())
	}
	return out
}

// SitePackages is where vLLM's images install Python packages (pip into Ubuntu's Python
// 3.12: dist-packages).
const SitePackages = "/usr/local/lib/python3.12/dist-packages"

// simImage is the release's image, FROM the torch base (TorchImage, whose engine ID is
// base): the simulator as vllm (and ray when Ray is installed) in /usr/local/bin, the
// dist-info directories pip leaves for the modelled release, the directory
// /usr/lib/python3.12 (vLLM's images' Python; the interpreter that runs is Debian's
// python3.13, whose torch lives in /usr/lib/python3/dist-packages, after /usr/local on
// every reader's path), and the rank program lab/sim runs with Debian's torch.
// libibverbs.so.1 is Debian's libibverbs1 (a dependency of its torch's Gloo).
func simImage(r Release, base, sim, dir string) (images.Image, error) {
	ctx := filepath.Join(dir, r.Name)
	// The simulator is also python3, first on PATH (/usr/local/bin): it answers the
	// data-plane proof's program itself (lab/sim/proof.go: no GPU and no NCCL here, so
	// NCCL's choice of transport is modelled) and hands every other program to Debian's
	// real interpreter (/usr/bin/python3, with torch: lab/torch.go).
	files := map[string]string{"vllm": sim, "python3": sim}
	bins := "python3 vllm"
	if r.Ray != "" {
		files["ray"] = sim
		bins = "python3 ray vllm"
	}
	dists := [][2]string{{"vllm", r.VLLM}, {"torch", r.Torch}, {r.NCCLDist, r.NCCL}}
	if r.Ray != "" {
		dists = append(dists, [2]string{"ray", r.Ray})
	}
	for _, d := range dists {
		rel := filepath.Join("dist", d[0]+"-"+d[1]+".dist-info", "METADATA")
		// The Name: header is the project name as published (PEP 566); the directory name
		// is its normalized form.
		meta := fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", strings.ReplaceAll(d[0], "_", "-"), d[1])
		if err := writeFile(filepath.Join(ctx, rel), meta); err != nil {
			return images.Image{}, err
		}
		files[rel] = filepath.Join(ctx, rel)
	}
	lib := filepath.Join("dist", "nvidia", "nccl", "lib", "libnccl.so.2")
	if err := writeFile(filepath.Join(ctx, lib), ncclStandIn(r)); err != nil {
		return images.Image{}, err
	}
	files[lib] = filepath.Join(ctx, lib)
	if err := writeFile(filepath.Join(ctx, "rank.py"), string(rankProgram)); err != nil {
		return images.Image{}, err
	}
	files["rank.py"] = filepath.Join(ctx, "rank.py")
	// The lab has no DNS server (its networks are internal; Docker's resolver answers only
	// container names, and times out after 10 s on anything else). torch's c10d looks up
	// the name of every address it tries (socket.cpp, "The hostname of the client socket
	// cannot be retrieved"); with DNS in the way each attempt would take 10 s. Names resolve
	// from /etc/hosts only, as on a node whose resolver fails fast.
	if err := writeFile(filepath.Join(ctx, "nsswitch.conf"), nsswitch); err != nil {
		return images.Image{}, err
	}
	files["nsswitch.conf"] = filepath.Join(ctx, "nsswitch.conf")
	rust := ""
	if r.RustFrontend {
		files["vllm-rs"] = sim
		rust = "COPY vllm-rs " + SitePackages + "/vllm/vllm-rs\n"
	}
	env := ""
	for _, e := range r.Env {
		k, v, _ := strings.Cut(e, "=")
		env += "ENV " + k + "=" + strconv.Quote(v) + "\n"
	}
	token := ""
	if r.AuthToken != "" {
		if err := writeFile(filepath.Join(ctx, "auth_token"), r.AuthToken+"\n"); err != nil {
			return images.Image{}, err
		}
		files["auth_token"] = filepath.Join(ctx, "auth_token")
		token = "COPY auth_token /root/.ray/auth_token\n"
	}
	return images.Image{Tag: r.Image(), Files: files, Dirs: []string{"python3.12"},
		// The base's ID is part of the Dockerfile, so a rebuilt base rebuilds every release
		// image on it (and no image keeps an old base's layers).
		Dockerfile: "FROM " + TorchImage + "\n# base " + base + "\nCOPY " + bins + " /usr/local/bin/\nCOPY dist " + SitePackages + "\n" +
			"COPY python3.12 /usr/lib/python3.12\nCOPY rank.py " + RankProgram + "\nCOPY nsswitch.conf /etc/\n" + rust + env + token}, nil
}

// ncclStandIn is the lab's libnccl.so.2: no library, only what a reader of the file finds,
// an ELF header and NCCL's version string as src/init.cc compiles it in (VERSION_STRING:
// "NCCL version " major.minor.patch suffix "+cuda" CUDA major.minor), the CUDA version from
// the torch wheel's local version (cu130: 13.0).
func ncclStandIn(r Release) string {
	cuda := ""
	if _, local, ok := strings.Cut(r.Torch, "+cu"); ok && len(local) >= 3 {
		cuda = "+cuda" + local[:len(local)-1] + "." + local[len(local)-1:]
	}
	return "\x7fELF\x02\x01\x01\x00" + strings.Repeat("\x00", 56) + "NCCL version %s\x00NCCL version " + r.LoadedNCCL() + cuda + "\x00"
}

// nsswitch is Debian's /etc/nsswitch.conf without dns for hosts (simImage says why).
const nsswitch = "passwd: files\ngroup: files\nshadow: files\ngshadow: files\nhosts: files\nnetworks: files\nprotocols: db files\nservices: db files\nethers: db files\nrpc: db files\n"

func writeFile(path, data string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(data), 0o644)
}
