package lab

import (
	"fmt"
	"os"
	"path/filepath"
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

// SimImages are every release's image, in Releases' order.
func SimImages() []string {
	out := make([]string, len(Releases))
	for i, r := range Releases {
		out[i] = r.Image()
	}
	return out
}

// SitePackages is where vLLM's images install Python packages (pip into Ubuntu's Python
// 3.12: dist-packages).
const SitePackages = "/usr/local/lib/python3.12/dist-packages"

// simImage is the release's image: the simulator as vllm (and ray when Ray is installed)
// in /usr/local/bin, the dist-info directories pip leaves, the Python library directory
// (no interpreter), an empty libibverbs.so.1 where Ubuntu's libibverbs1 puts it, and
// Debian's static busybox as the shell and coreutils.
func simImage(r Release, sim, dir string) (images.Image, error) {
	ctx := filepath.Join(dir, r.Name)
	// The simulator is also /usr/bin/python3, answering only the data-plane proof's program
	// (lab/sim/proof.go): the images have no Python interpreter.
	files := map[string]string{"vllm": sim, "busybox": busybox, "python3": sim}
	bins := "vllm"
	if r.Ray != "" {
		files["ray"] = sim
		bins = "ray vllm"
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
	if err := writeFile(filepath.Join(ctx, "libibverbs.so.1"), ""); err != nil {
		return images.Image{}, err
	}
	files["libibverbs.so.1"] = filepath.Join(ctx, "libibverbs.so.1")
	return images.Image{Tag: r.Image(), Files: files, Dirs: []string{"tmp", "root", "python3.12"},
		Dockerfile: "FROM scratch\nCOPY busybox /bin/\nCOPY " + bins + " /usr/local/bin/\nCOPY dist " + SitePackages + "\n" +
			"COPY python3.12 /usr/lib/python3.12\nCOPY python3 /usr/bin/\nCOPY libibverbs.so.1 /usr/lib/x86_64-linux-gnu/\nCOPY tmp /tmp\nCOPY root /root\n" +
			"RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\nENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/root\n"}, nil
}

func writeFile(path, data string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(data), 0o644)
}
