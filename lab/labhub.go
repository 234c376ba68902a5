package lab

import (
	"context"
	"net/netip"

	"github.com/moby/moby/api/types/container"

	"github.com/tpdeploy/tpdeploy/internal/images"
)

// HubImage is the lab's Hugging Face hub (lab/hub/labhub), FROM scratch.
const HubImage = "tpdeploy/labhub:dev"

// The lab hub's repositories (lab/hub/labhub's defaults): the lab's model, public and
// gated; HubModelFiles are the files of it that vLLM's default loader reads (the others,
// README.md and original/, are left out by a download of model.source: hub).
const (
	HubRepo      = "lab/tiny-moe"
	HubGatedRepo = "lab/gated-moe"
)

// hubImage builds the lab hub's image from its static binary.
func hubImage(ctx context.Context, dir string) (images.Image, error) {
	bin, err := images.GoBinary(ctx, "./lab/hub/labhub", dir)
	if err != nil {
		return images.Image{}, err
	}
	return images.Image{Tag: HubImage, Files: map[string]string{"labhub": bin},
		Dockerfile: "FROM scratch\nCOPY labhub /\nEXPOSE 80\nENTRYPOINT [\"/labhub\"]\n"}, nil
}

// hubAddr is the lab hub's address on the management network.
func (l *Lab) hubAddr() netip.Addr { return host(l.Mgmt, 253) }

// startHub runs the lab hub on the management network (where every node's agent reaches
// it, as nodes reach huggingface.co or a site mirror outside the fast fabric), serving
// HubRepo and HubGatedRepo; HubToken is the token granted the gated one.
func (l *Lab) startHub(ctx context.Context) error {
	l.HubToken = "hf_lab" + randomHex(16)
	l.Hub = "http://" + l.hubAddr().String()
	return l.run(ctx, l.Prefix+"-hub", &container.Config{
		Image: HubImage, Labels: map[string]string{LabelLab: l.Prefix},
		Env: []string{"LABHUB_TOKEN=" + l.HubToken},
		Cmd: []string{"-addr", ":80", "--repo", HubRepo, "--gated", HubGatedRepo},
	}, map[string]netip.Addr{"mgmt": l.hubAddr()}, nil)
}

// hubEnv is what every node's agent gets for the lab hub: its policy allows the hub as a
// download's endpoint (HF_ENDPOINT in a spec's head env names it), and it holds the hub
// token as LAB_HF_TOKEN (a spec with secrets.hf_token {env: LAB_HF_TOKEN} reads the gated
// repository).
func (l *Lab) hubEnv() []string {
	return []string{"TPDEPLOY_ALLOW_HUB_ENDPOINTS=" + l.Hub, "LAB_HF_TOKEN=" + l.HubToken, "TPDEPLOY_ALLOW_SECRET_ENV=LAB_HF_TOKEN"}
}
