package workflows

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/spec"
	"github.com/tpdeploy/tpdeploy/internal/weights"
)

// ModelCopy is what one node received from the head.
type ModelCopy struct {
	Node string `json:"node"`
	// From is "hub" for the head's download of model.source: hub, the node before this
	// one in a copy chain; empty for a copy from the head.
	From    string  `json:"from,omitempty"`
	Files   int     `json:"files"`
	Bytes   int64   `json:"bytes"`
	Reused  int64   `json:"reused,omitempty"`
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mbps"`
}

// modelCheckable says whether tpdeploy can see the model's files: model.host_dir, or a
// Hugging Face name in the nodes' hf_cache. A path inside the image is vLLM's business.
func modelCheckable(m spec.Model) bool { return m.HostDir != "" || m.IsHFName() }

// revision is the revision the nodes' caches are read at: the commit model.source: hub
// resolved, or model.revision.
func (d *deployment) revision() string {
	if d.state.Hub != nil {
		return d.state.Hub.Commit
	}
	return d.spec.Model.Revision
}

// checkModel compares what every node holds of the model with the head's copy: a node that
// lacks a file, or holds another, fails the deploy as ModelIncomplete naming the files,
// before anything starts — unless model.sync: from-head, which copies them. A Hugging Face
// model no node holds is left to vLLM's download, with a warning.
func (d *deployment) checkModel(ctx workflow.Context) error {
	if !modelCheckable(d.spec.Model) {
		return nil
	}
	m := d.spec.Model
	head := d.spec.Head().Name
	manifests := map[string]weights.Manifest{}
	err := d.step(ctx, PhaseModel, fmt.Sprintf("checking model %s on %d nodes", m.Path, len(d.spec.Nodes)), func() error {
		timeout := d.spec.Timeouts.Preflight.D()
		if m.Checksums {
			timeout = d.spec.Timeouts.ModelSyncTimeout() // reads every byte
		}
		o := deployStep(timeout, stepAttempts)
		return forEachNode(ctx, "check model", nodeNames(d.spec.Nodes), func(node string) workflow.Future {
			req := contract.ModelManifestRequest{Node: node, Checksums: m.Checksums}
			if m.HostDir != "" {
				req.Dir = m.HostDir
			} else {
				req.HFCache, req.Repo, req.Revision = d.spec.HFCache, m.Path, d.revision()
			}
			return workflow.ExecuteActivity(d.onNode(ctx, node, "model files on "+node, o), contract.ActivityModelManifest, req)
		}, func(node string, mf weights.Manifest) { manifests[node] = mf })
	})
	if err != nil {
		return err
	}
	sync, fallback := m.Sync == spec.SyncFromHead, m.HostDir == ""
	if m.FromHub() && d.state.Hub != nil {
		// Every node must come to hold the resolved commit's files: the head downloads
		// what it lacks, the others receive theirs from it. Each disk is checked first.
		ref := d.hubReference()
		receive := map[string][]weights.File{}
		for _, n := range nodeNames(d.spec.Nodes) {
			receive[n] = weights.Lacking(ref, manifests[n])
		}
		if err := d.checkDisk(manifests, receive); err != nil {
			return err
		}
		if len(receive[head]) > 0 {
			mf, err := d.downloadHub(ctx, receive[head])
			if err != nil {
				return err
			}
			manifests[head] = mf
		}
		sync, fallback = true, false
	}
	v := weights.Decide(head, manifests, nodeNames(d.spec.Nodes), sync, fallback)
	d.state.Warnings = append(d.state.Warnings, v.Warnings...)
	if len(v.Problems) > 0 {
		fix := "copy the files to those nodes (the head's copy is the reference), or set model.sync: from-head to have tpdeploy copy them over the planned subnet"
		if v.Problems[0].Node == head {
			fix = "complete the model on the head first: it is the reference every node is compared with and the source of model.sync"
		}
		return &stepError{Step: "check model", Node: v.Problems[0].Node, Type: contract.ErrModelIncomplete,
			Msg: weights.Summary(v.Problems, 5) + ". Fix: " + fix}
	}
	if len(v.Copy) == 0 {
		return nil
	}
	if err := d.checkDisk(manifests, v.Copy); err != nil {
		return err
	}
	return d.copyModel(ctx, manifests[head], v.Copy)
}

// copyModel copies what each node lacks from the head, agent to agent over the planned
// subnet: the head's agent serves exactly those files, each node's agent fetches them
// (resumable, verified by each file's hash: hashCopies), and the server closes. A failed copy leaves complete files in
// place and removes partial ones.
func (d *deployment) copyModel(ctx workflow.Context, headManifest weights.Manifest, lacking map[string][]weights.File) error {
	m := d.spec.Model
	head := d.spec.Head().Name
	nodes := make([]string, 0, len(lacking))
	var total int64
	names := map[string]bool{}
	for n, files := range lacking {
		nodes = append(nodes, n)
		total += weights.CopySize(files)
		for _, f := range files {
			names[f.Name] = true
		}
	}
	sort.Strings(nodes)
	files := make([]string, 0, len(names))
	for n := range names {
		files = append(files, n)
	}
	sort.Strings(files)
	what := make([]string, len(nodes))
	for i, n := range nodes {
		what[i] = fmt.Sprintf("%s lacks %d files (%s)", n, len(lacking[n]), weights.HumanSize(weights.CopySize(lacking[n])))
	}
	return d.step(ctx, PhaseModelCopy, fmt.Sprintf("copying the model from %s: %s", head, strings.Join(what, ", ")), func() error {
		hp, ok := d.plannedNode(head)
		if !ok {
			return &stepError{Step: "copy model", Type: contract.ErrInternal, Msg: "no plan for the head"}
		}
		root := func(node string) (string, string, string) {
			if m.HostDir != "" {
				return m.HostDir, contract.ModelLayoutDir, ""
			}
			ref := "main"
			if m.Revision != "" {
				ref = m.Revision
			}
			if weights.IsGitSHA1(ref) {
				ref = "" // a pinned commit: no ref to point
			}
			return weights.HFSnapshotDir(d.spec.HFCache, m.Path, headManifest.Revision), contract.ModelLayoutHF, ref
		}
		if err := d.hashCopies(ctx, head, headManifest, nodes, lacking); err != nil {
			return err
		}
		for _, n := range nodes {
			dir, _, _ := root(n)
			d.saga.addResumable("remove partial model files on "+n, func(ctx workflow.Context) error {
				return workflow.ExecuteActivity(d.onNode(ctx, n, "remove partial model files on "+n, cleanupStep(d.spec)),
					contract.ActivityRemovePartialModel, contract.RemovePartialModelRequest{Node: n, Root: dir, Intent: d.req.Intent}).Get(ctx, nil)
			})
		}
		// From this version on the copy is a chain (weights.Chain): head → n1 → n2 …, each
		// node relaying to the next what it receives, so no link carries more than one copy.
		chain := workflow.GetVersion(ctx, modelCopyChainVersion, workflow.DefaultVersion, 1) == 1
		// An agent restarting (the head's, or a relay's: a node rebooted mid-copy) loses
		// its server and keys (ModelServerGone): open others and go on; what arrived stays
		// (every copy resumes from its partial files).
		for attempt := 1; ; attempt++ {
			var err error
			if chain {
				err = d.copyChain(ctx, head, headManifest.Dir, lacking, root)
			} else {
				err = d.copyOnce(ctx, head, hp.Address, headManifest.Dir, files, nodes, lacking, root)
			}
			var se *stepError
			if err == nil || attempt == 3 || !errors.As(err, &se) || se.Type != contract.ErrModelServerGone {
				return err
			}
			workflow.GetLogger(ctx).Warn("model server gone; opening another", "attempt", attempt)
		}
	})
}

// hashCopies gives every file a copy sends the hash the copy verifies it by (the agents
// copy only files with one: size alone would let a corrupt or tampered file of the right
// length through). Hugging Face files carry theirs in their blob's name; the others — a
// model.host_dir scanned without checksums — are hashed now by the head's agent: only the
// files some node lacks, and only when a copy is needed, rather than every file of every
// node at every deploy (what model.checksums does).
func (d *deployment) hashCopies(ctx workflow.Context, head string, headManifest weights.Manifest, nodes []string, lacking map[string][]weights.File) error {
	seen := map[string]bool{}
	var names []string
	for _, n := range nodes {
		for _, f := range lacking[n] {
			if !f.Hashed() && !seen[f.Name] {
				seen[f.Name] = true
				names = append(names, f.Name)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	m := d.spec.Model
	req := contract.ModelManifestRequest{Node: head, Hash: names}
	if m.HostDir != "" {
		req.Dir = m.HostDir
	} else {
		req.HFCache, req.Repo, req.Revision = d.spec.HFCache, m.Path, d.revision()
	}
	var hashed weights.Manifest
	o := deployStep(d.spec.Timeouts.ModelSyncTimeout(), stepAttempts) // reads every byte of those files
	err := workflow.ExecuteActivity(d.onNode(ctx, head, fmt.Sprintf("hash %d model files on %s", len(names), head), o),
		contract.ActivityModelManifest, req).Get(ctx, &hashed)
	if err != nil {
		return classify("hash model files", head, err)
	}
	changed := func(what string) error {
		return &stepError{Step: "hash model files", Node: head, Type: contract.ErrModelIncomplete,
			Msg: what + " on " + head + " while the deploy checked the model. Fix: complete the model on the head, then deploy again"}
	}
	if hashed.Revision != headManifest.Revision {
		return changed(fmt.Sprintf("the snapshot changed from revision %s to %q", headManifest.Revision, hashed.Revision))
	}
	for _, n := range nodes {
		files := lacking[n]
		for i, f := range files {
			if f.Hashed() {
				continue
			}
			hf, ok := hashed.File(f.Name)
			if !ok || hf.Size != f.Size || !weights.IsSHA256(hf.SHA256) {
				return changed(fmt.Sprintf("%s changed (%s then, %s now)", f.Name, weights.HumanSize(f.Size), fileNow(hashed, f.Name)))
			}
			files[i].SHA256 = hf.SHA256
		}
	}
	return nil
}

// fileNow says what a manifest holds of a file, for a message.
func fileNow(m weights.Manifest, name string) string {
	f, ok := m.File(name)
	switch {
	case m.Absent != "":
		return m.Absent
	case !ok:
		return "missing"
	case !weights.IsSHA256(f.SHA256):
		return weights.HumanSize(f.Size) + " and not hashed"
	}
	return weights.HumanSize(f.Size)
}

// modelCopyChainVersion: from here on, model.sync copies along a chain (copyChain) rather
// than from the head to every node at once (copyOnce).
const modelCopyChainVersion = "model-copy-chain"

// copyChain is one attempt of the chain's copy: every receiving node makes its copy's
// key; the head and every relay open a model server for the next node only (its key, its
// planned address), a relay's serving also what it is still receiving (Relay); every node
// copies from the node before it; and the servers close. Each node's agent checks the
// node it is told to copy from against the signed spec.
func (d *deployment) copyChain(ctx workflow.Context, head, headDir string, lacking map[string][]weights.File,
	root func(string) (string, string, string)) error {
	links := weights.Chain(head, nodeNames(d.spec.Nodes), lacking)
	receivers := make([]string, len(links))
	senders := make([]string, len(links))
	link := map[string]weights.Link{} // by sender
	addrs := map[string]netip.Addr{}
	for i, l := range links {
		receivers[i], senders[i], link[l.From] = l.To, l.From, l
		for _, n := range []string{l.From, l.To} {
			np, ok := d.plannedNode(n)
			if !ok {
				return &stepError{Step: "copy model", Node: n, Type: contract.ErrInternal, Msg: "no plan for " + n}
			}
			addrs[n] = np.Address
		}
	}
	const ttl = 10 * time.Minute
	o := deployStep(30*time.Second, stepAttempts)
	keys := map[string]string{}
	err := forEachNode(ctx, "prepare the model copy", receivers, func(node string) workflow.Future {
		dir, _, _ := root(node)
		return workflow.ExecuteActivity(d.onNode(ctx, node, "make a model copy key on "+node, o), contract.ActivityPrepareModelCopy,
			contract.PrepareModelCopyRequest{Node: node, Root: dir, TTL: ttl, Intent: d.req.Intent})
	}, func(node string, k contract.ModelCopyKey) { keys[node] = k.Key })
	if err != nil {
		return err
	}
	servers := map[string]contract.ModelServer{}
	defer func() {
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		var closing []workflow.Future
		for _, n := range senders {
			if srv, ok := servers[n]; ok {
				closing = append(closing, workflow.ExecuteActivity(d.onNode(dctx, n, "close model server on "+n, deployStep(10*time.Second, 2)),
					contract.ActivityCloseModelServer, contract.CloseModelServerRequest{Node: n, ID: srv.ID}))
			}
		}
		for _, f := range closing {
			_ = f.Get(dctx, nil)
		}
	}()
	err = forEachNode(ctx, "serve model files", senders, func(node string) workflow.Future {
		l := link[node]
		dir, _, _ := root(node)
		if node == head {
			dir = headDir
		}
		return workflow.ExecuteActivity(d.onNode(ctx, node, "serve model files on "+node, o), contract.ActivityOpenModelServer,
			contract.OpenModelServerRequest{Node: node, Addr: addrs[node], Root: dir, Files: l.Serve, Relay: l.Relay, TTL: ttl,
				Keys: []string{keys[l.To]}, Peers: []netip.Addr{addrs[l.To]}, Intent: d.req.Intent})
	}, func(node string, srv contract.ModelServer) { servers[node] = srv })
	if err != nil {
		return err
	}
	from := map[string]weights.Link{} // by receiver
	for _, l := range links {
		from[l.To] = l
	}
	copyOpts := stepOptions{startToClose: d.spec.Timeouts.ModelSyncTimeout(), heartbeat: stepHeartbeat, attempts: stepAttempts}
	// The first copy that fails ends the others: the nodes after it in the chain would
	// only wait for what will not come.
	cctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	sel := workflow.NewSelector(ctx)
	var errs []*stepError
	failed := false
	for _, node := range receivers {
		l := from[node]
		dir, layout, ref := root(node)
		f := workflow.ExecuteActivity(d.onNode(cctx, node, fmt.Sprintf("copy %d model files to %s from %s", len(l.Files), node, l.From), copyOpts),
			contract.ActivitySyncModel, contract.SyncModelRequest{Node: node, From: servers[l.From].Addr, Source: l.From, Key: keys[node], Addr: addrs[node],
				Root: dir, Layout: layout, Ref: ref, Files: l.Files, Intent: d.req.Intent})
		sel.AddFuture(f, func(f workflow.Future) {
			var r contract.SyncResult
			if err := f.Get(ctx, &r); err != nil {
				if !failed || !temporal.IsCanceledError(err) {
					errs = append(errs, classify("copy model", node, err))
				}
				failed = true
				cancel()
				return
			}
			src := l.From
			if src == head {
				src = ""
			}
			d.state.ModelCopies = append(d.state.ModelCopies, ModelCopy{Node: node, From: src, Files: len(r.Copied), Bytes: r.Bytes,
				Reused: r.Reused, Seconds: r.Seconds, MBps: r.MBps})
			workflow.GetLogger(ctx).Info("model copied", "node", node, "from", l.From, "bytes", r.Bytes, "reused", r.Reused, "mbps", r.MBps)
		})
	}
	for range receivers {
		sel.Select(ctx)
	}
	if len(errs) > 0 {
		return joinStepErrors(errs)
	}
	return nil
}

// copyOnce has every copying node make its copy's key, opens the head's model server for
// those keys and the nodes' planned addresses, has every node copy what it lacks, and
// closes the server. The keys' secrets stay in the copying agents: history holds only
// their SHA-256s (contract.PrepareModelCopyRequest).
func (d *deployment) copyOnce(ctx workflow.Context, head string, addr netip.Addr, dir string, files, nodes []string,
	lacking map[string][]weights.File, root func(string) (string, string, string)) error {
	keys := map[string]string{}
	peers := map[string]netip.Addr{}
	for _, n := range nodes {
		np, ok := d.plannedNode(n)
		if !ok {
			return &stepError{Step: "copy model", Node: n, Type: contract.ErrInternal, Msg: "no plan for " + n}
		}
		peers[n] = np.Address
	}
	const ttl = 10 * time.Minute
	o := deployStep(30*time.Second, stepAttempts)
	err := forEachNode(ctx, "prepare the model copy", nodes, func(node string) workflow.Future {
		dir, _, _ := root(node)
		return workflow.ExecuteActivity(d.onNode(ctx, node, "make a model copy key on "+node, o), contract.ActivityPrepareModelCopy,
			contract.PrepareModelCopyRequest{Node: node, Root: dir, TTL: ttl, Intent: d.req.Intent})
	}, func(node string, k contract.ModelCopyKey) { keys[node] = k.Key })
	if err != nil {
		return err
	}
	req := contract.OpenModelServerRequest{Node: head, Addr: addr, Root: dir, Files: files, TTL: ttl, Intent: d.req.Intent}
	for _, n := range nodes { // sorted: the request is the same on replay
		req.Keys, req.Peers = append(req.Keys, keys[n]), append(req.Peers, peers[n])
	}
	var srv contract.ModelServer
	err = workflow.ExecuteActivity(d.onNode(ctx, head, "serve model files on "+head, o), contract.ActivityOpenModelServer, req).Get(ctx, &srv)
	if err != nil {
		return classify("serve model files", head, err)
	}
	defer func() {
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		_ = workflow.ExecuteActivity(d.onNode(dctx, head, "close model server on "+head, deployStep(10*time.Second, 2)),
			contract.ActivityCloseModelServer, contract.CloseModelServerRequest{Node: head, ID: srv.ID}).Get(dctx, nil)
	}()
	copyOpts := stepOptions{startToClose: d.spec.Timeouts.ModelSyncTimeout(), heartbeat: stepHeartbeat, attempts: stepAttempts}
	return forEachNode(ctx, "copy model", nodes, func(node string) workflow.Future {
		dir, layout, ref := root(node)
		return workflow.ExecuteActivity(d.onNode(ctx, node, fmt.Sprintf("copy %d model files to %s", len(lacking[node]), node), copyOpts),
			contract.ActivitySyncModel, contract.SyncModelRequest{Node: node, From: srv.Addr, Key: keys[node], Addr: peers[node], Root: dir,
				Layout: layout, Ref: ref, Files: lacking[node], Intent: d.req.Intent})
	}, func(node string, r contract.SyncResult) {
		d.state.ModelCopies = append(d.state.ModelCopies, ModelCopy{Node: node, Files: len(r.Copied), Bytes: r.Bytes,
			Reused: r.Reused, Seconds: r.Seconds, MBps: r.MBps})
		workflow.GetLogger(ctx).Info("model copied", "node", node, "bytes", r.Bytes, "reused", r.Reused, "mbps", r.MBps)
	})
}
