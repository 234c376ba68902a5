package workflows

import (
	"fmt"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// hubFixes are the fixes of the hub's refusals at plan (the gated one's message names
// its own: the token to set, or the terms to accept).
var hubFixes = map[string]string{
	contract.ErrModelNotFound: "check model.path and model.revision on the hub (a private repository needs secrets.hf_token of an account that can see it)",
	contract.ErrModelOffline:  "check that the head reaches the hub (HF_ENDPOINT in the head's env for a mirror, which its policy's allowed_hub_endpoints must name), or fill every node's hf_cache and drop model.source",
}

// resolveHub resolves model.source: hub's revision to its commit on the hub, through the
// head's agent (its token, its policy's endpoints), and keeps the commit and the files vLLM
// needs in the state, the result and the plan report: every node gets that commit, even
// if the branch moves meanwhile. A gated, missing or unreachable model is refused here,
// before any node is probed.
func (d *deployment) resolveHub(ctx workflow.Context) error {
	m := d.spec.Model
	if !m.FromHub() || d.state.Hub != nil { // a restarted run keeps the commit
		return nil
	}
	head := d.spec.Head().Name
	rev := m.Revision
	if rev == "" {
		rev = "main"
	}
	return d.step(ctx, PhaseModelResolve, fmt.Sprintf("resolving %s@%s on the hub", m.Path, rev), func() error {
		o := deployStep(d.spec.Timeouts.Preflight.D(), stepAttempts)
		var hm contract.HubModel
		err := workflow.ExecuteActivity(d.onNode(ctx, head, "resolve "+m.Path+" on the hub", o), contract.ActivityResolveHubModel,
			contract.ResolveHubModelRequest{Node: head, Repo: m.Path, Revision: m.Revision, Endpoint: d.spec.HubEndpoint(), Token: d.spec.Secrets.HFToken}).Get(ctx, &hm)
		if err != nil {
			se := classify("resolve the model", head, err)
			if fix := hubFixes[se.Type]; fix != "" {
				se.Msg += ". Fix: " + fix
			}
			return se
		}
		d.state.Hub = &hm
		return nil
	})
}

// hubReference is the resolved commit as a manifest: what every node must hold.
func (d *deployment) hubReference() weights.Manifest {
	hm := d.state.Hub
	return weights.Manifest{Source: hm.Repo, Revision: hm.Commit, Files: hm.Files}
}

// checkDisk refuses, before anything is written, a node whose model directory has less
// free space than what it must receive (a download, a copy): DiskInsufficient naming the
// node, the need and the free space. A manifest without a measure (an older agent) is not
// checked.
func (d *deployment) checkDisk(manifests map[string]weights.Manifest, receive map[string][]weights.File) error {
	var disks []weights.Disk
	for _, n := range nodeNames(d.spec.Nodes) {
		mf, files := manifests[n], receive[n]
		if mf.Free == nil || len(files) == 0 {
			continue
		}
		dir := d.spec.Model.HostDir
		if dir == "" {
			dir = d.spec.HFCache
		}
		disks = append(disks, weights.Disk{Node: n, Dir: dir, Free: *mf.Free, Receive: files})
	}
	ps := weights.CheckDisk(disks)
	if len(ps) == 0 {
		return nil
	}
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.Message
	}
	return &stepError{Step: "check disk", Node: ps[0].Node, Type: contract.ErrDiskInsufficient,
		Msg: strings.Join(msgs, "; ") + ". Fix: free space there, or point the node's hf_cache or model.host_dir at a larger disk; nothing was written or started"}
}

// downloadHub has the head's agent download what it lacks of the resolved commit into its
// hf_cache (resumable, every file verified), and describes the head's model again: the
// reference the other nodes' copies come from.
func (d *deployment) downloadHub(ctx workflow.Context, lacking []weights.File) (weights.Manifest, error) {
	m := d.spec.Model
	hm := d.state.Hub
	head := d.spec.Head().Name
	var mf weights.Manifest
	err := d.step(ctx, PhaseModelDownload, fmt.Sprintf("downloading %d files of %s (%s) at %s from %s to %s", len(lacking), m.Path,
		weights.HumanSize(weights.CopySize(lacking)), shortCommit(hm.Commit), hm.Endpoint, head), func() error {
		root := weights.HFSnapshotDir(d.spec.HFCache, m.Path, hm.Commit)
		d.saga.addResumable("remove partial model files on "+head, func(ctx workflow.Context) error {
			return workflow.ExecuteActivity(d.onNode(ctx, head, "remove partial model files on "+head, cleanupStep(d.spec)),
				contract.ActivityRemovePartialModel, contract.RemovePartialModelRequest{Node: head, Root: root, Intent: d.req.Intent}).Get(ctx, nil)
		})
		ref := m.Revision
		if ref == "" {
			ref = "main"
		}
		if weights.IsGitSHA1(ref) {
			ref = ""
		}
		o := stepOptions{startToClose: d.spec.Timeouts.ModelSyncTimeout(), heartbeat: stepHeartbeat, attempts: stepAttempts}
		var r contract.SyncResult
		err := workflow.ExecuteActivity(d.onNode(ctx, head, fmt.Sprintf("download %d model files to %s", len(lacking), head), o),
			contract.ActivityDownloadHubModel, contract.DownloadHubModelRequest{Node: head, Root: root, Repo: m.Path, Commit: hm.Commit,
				Endpoint: d.spec.HubEndpoint(), Token: d.spec.Secrets.HFToken, Ref: ref, Files: lacking, Intent: d.req.Intent}).Get(ctx, &r)
		if err != nil {
			return classify("download the model", head, err)
		}
		d.state.ModelCopies = append(d.state.ModelCopies, ModelCopy{Node: head, From: "hub", Files: len(r.Copied), Bytes: r.Bytes,
			Reused: r.Reused, Seconds: r.Seconds, MBps: r.MBps})
		o = deployStep(d.spec.Timeouts.Preflight.D(), stepAttempts)
		err = workflow.ExecuteActivity(d.onNode(ctx, head, "model files on "+head, o), contract.ActivityModelManifest,
			contract.ModelManifestRequest{Node: head, HFCache: d.spec.HFCache, Repo: m.Path, Revision: hm.Commit}).Get(ctx, &mf)
		if err != nil {
			return classify("check model", head, err)
		}
		return nil
	})
	return mf, err
}

func shortCommit(c string) string { return c[:min(len(c), 12)] }
