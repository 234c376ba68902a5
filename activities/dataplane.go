package activities

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/tpdeploy/tpdeploy/internal/contract"
	"github.com/tpdeploy/tpdeploy/internal/dataplane"
	"github.com/tpdeploy/tpdeploy/internal/policy"
)

// DataPlane runs this node's rank of the data-plane proof (ProveDataPlane).
type DataPlane struct {
	*nodeBase
	// net checks a fresh container's plan against the signed spec (signedProof).
	net    *hostNet
	docker *docker
}

// maxProofLines bounds the NCCL and proof lines a result carries into workflow history.
const maxProofLines = 200

// ProveDataPlane runs this node's rank of the data-plane proof in the node's running
// container: the proof's program (dataplane.Program) copied in and run as `python3
// <file>` — the image's own interpreter, torch and NCCL, the container's own environment
// (the node's env and the plan's, as vLLM gets them) plus NCCL's INFO lines. Every rank
// runs at once; rank 0's store is on the master address. The program's watchdog ends it
// after the timeout, so a rank that never joins cannot hold the step.
func (dp *DataPlane) ProveDataPlane(ctx context.Context, req contract.ProofRequest) (contract.ProofResult, error) {
	if err := dp.checkNode(req.Node); err != nil {
		return contract.ProofResult{}, err
	}
	if req.Fresh != nil {
		if err := dp.checkSpec(req.Fresh.Spec); err != nil {
			return contract.ProofResult{}, err
		}
	}
	if err := dp.proofAllowed(ctx, req); err != nil {
		return contract.ProofResult{}, err
	}
	eng, addr, err := dp.docker.engine(req.DockerHost)
	if err != nil {
		return contract.ProofResult{}, err
	}
	rank := dataplane.Node{Node: dp.name, Rank: req.Rank, HCAs: hcaList(req), MapNote: dp.docker.rdmaMapping(req.Plan).Note}
	for _, d := range req.Plan.RDMA {
		rank.LinkGbps += float64(d.RateMbps) / 1000
	}
	if req.Fresh != nil {
		return dp.proveInFreshContainer(ctx, req, rank)
	}
	info, err := eng.ContainerInspect(ctx, req.Container, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return contract.ProofResult{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("the container %s is not there: the proof runs in it", req.Container), contract.ErrContainerExited, nil)
	}
	if err != nil {
		return contract.ProofResult{}, engineError(addr, "inspect "+req.Container, err)
	}
	// The proof runs only in what the agent itself started: a Ray container of its node
	// (of the signed spec's cluster, with trusted_keys).
	cluster := ""
	if c, err := dp.signedSpec(ctx); err != nil {
		return contract.ProofResult{}, err
	} else if c != nil {
		cluster = c.Name
	}
	if err := dp.docker.ownContainer(req.Container, info.Container.Config, cluster, contract.RoleRayHead, contract.RoleRayWorker); err != nil {
		return contract.ProofResult{}, err
	}
	if hc := info.Container.HostConfig; hc != nil {
		for _, d := range hc.Devices {
			if strings.HasPrefix(d.PathInContainer, "/dev/infiniband/uverbs") {
				rank.Mapped = append(rank.Mapped, path.Base(d.PathInContainer))
			}
		}
	}
	archive, err := fileArchive(dataplane.ProgramPath, []byte(dataplane.Program))
	if err != nil {
		return contract.ProofResult{}, err
	}
	if _, err := eng.CopyToContainer(ctx, req.Container, client.CopyToContainerOptions{DestinationPath: "/", Content: bytes.NewReader(archive)}); err != nil {
		return contract.ProofResult{}, engineError(addr, "copy the proof into "+req.Container, err)
	}
	env := proofEnv(req)
	dp.logger().Info("data-plane proof", zap.String("container", req.Container), zap.Int("rank", req.Rank), zap.Int("world", req.World), zap.String("master", req.Master))
	out, code, err := execBounded(ctx, eng, req.Container, []string{"python3", dataplane.ProgramPath}, env, req.Timeout+30*time.Second)
	if errors.Is(err, errExecOutput) {
		return contract.ProofResult{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: the proof in %s: %v", dp.name, req.Container, err), contract.ErrBadRequest, nil)
	}
	if err != nil {
		return contract.ProofResult{}, engineError(addr, "run the proof in "+req.Container, err)
	}
	return proofResult(rank, req, out, code), nil
}

// maxProofTimeout bounds a proof's own timeout (the workflow asks for 90 seconds): the
// exec, and the step, end within it and 30 seconds more.
const maxProofTimeout = 10 * time.Minute

// maxProofWorld bounds the ranks of a proof.
const maxProofWorld = 512

// proofAllowed checks what a proof request says beside its container: its timeout and
// ranks bounded, its master (every rank dials it; rank 0 serves its store there) an
// address and port in this node's subnets, and, with signed intent, the signed spec's
// head at the spec's master port, its ranks the signed spec's.
func (dp *DataPlane) proofAllowed(ctx context.Context, req contract.ProofRequest) error {
	if req.Timeout <= 0 || req.Timeout > maxProofTimeout {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: the proof's timeout %s is not between 0 and %s", dp.name, req.Timeout, maxProofTimeout), contract.ErrBadRequest, nil)
	}
	if req.World < 1 || req.World > maxProofWorld || req.Rank < 0 || req.Rank >= req.World {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: the proof's rank %d of %d is out of range (world 1 to %d)", dp.name, req.Rank, req.World, maxProofWorld), contract.ErrBadRequest, nil)
	}
	ap, err := netip.ParseAddrPort(req.Master)
	if err != nil {
		return dp.deny("the proof's master %q is not an address and port", req.Master)
	}
	if err := dp.allowed(func(p policy.Policy) error { return p.CheckPorts(int(ap.Port())) }); err != nil {
		return err
	}
	if err := dp.net.checkDial(ap); err != nil {
		return err
	}
	c, err := dp.signedSpec(ctx)
	if err != nil || c == nil {
		return err
	}
	d := c.WithDefaults()
	if req.World != len(d.Nodes) || req.Rank != d.NodeRank(dp.name) {
		return dp.deny("signed intent: the proof's rank %d of %d is not node %s's of the signed spec (%d of %d)", req.Rank, req.World, dp.name, d.NodeRank(dp.name), len(d.Nodes))
	}
	return dp.signedJoin(d, req.Master, d.Ports.MasterPort(), "the proof's master")
}

// proofEnv is what the proof's program reads, and NCCL's INFO lines.
func proofEnv(req contract.ProofRequest) []string {
	env := []string{
		"TPDEPLOY_PROOF_RANK=" + strconv.Itoa(req.Rank), "TPDEPLOY_PROOF_WORLD=" + strconv.Itoa(req.World),
		"TPDEPLOY_PROOF_MASTER=" + req.Master, "TPDEPLOY_PROOF_TIMEOUT=" + strconv.Itoa(max(int(req.Timeout.Seconds()), 1)),
	}
	for k, v := range dataplane.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// proofResult parses the program's output into the rank's result, with the NCCL and
// proof lines (bounded) for the record.
func proofResult(rank dataplane.Node, req contract.ProofRequest, out string, code int) contract.ProofResult {
	rank.Output, rank.ExitCode = dataplane.Parse(out), code
	if rank.Output.Rank < 0 {
		rank.Output.Rank = req.Rank
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "NCCL ") || strings.Contains(l, dataplane.ProofPrefix) || strings.Contains(l, "Error") || strings.Contains(l, "exec") {
			lines = append(lines, l)
		}
	}
	if len(lines) > maxProofLines {
		lines = append(lines[:maxProofLines/2], lines[len(lines)-maxProofLines/2:]...)
	}
	if len(lines) == 0 && strings.TrimSpace(out) != "" {
		lines = []string{strings.TrimSpace(out)[:min(len(strings.TrimSpace(out)), 2000)]}
	}
	return contract.ProofResult{Rank: rank, Lines: lines}
}

// proofLauncher writes the program the container was given as its argument to the
// proof's path and runs it with the image's python3, the agent's own proof variables
// added (they follow as NAME=value arguments: the container's env is the rank's, as the
// node's policy allowed it). The program travels in the container's argument vector, so
// nothing is copied into a container before it starts.
const proofLauncher = `f=$1; p=$2; shift 2; mkdir -p "$(dirname "$f")" && printf '%s' "$p" > "$f" && exec env "$@" python3 "$f"`

// proveInFreshContainer runs the proof in a one-shot container made as this node's vLLM
// rank's container would be (executor mp: nothing runs on the node before its rank), waits
// for it to end, reads its output and removes it.
func (dp *DataPlane) proveInFreshContainer(ctx context.Context, req contract.ProofRequest, rank dataplane.Node) (contract.ProofResult, error) {
	fr := *req.Fresh
	n, _ := fr.Spec.Node(req.Node)
	c, err := dp.signedSpec(ctx)
	if err == nil {
		err = dp.net.signedProof(c, req)
	}
	if err != nil {
		return contract.ProofResult{}, err
	}
	s, _, err := rankSpec(fr, dp.docker.opts)
	if err != nil {
		return contract.ProofResult{}, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrBadRequest, nil)
	}
	np, _ := fr.Plan.Node(req.Node)
	s = dp.docker.withRDMA(s, np)
	s.Name = contract.ContainerName(fr.Spec.Name, req.Node, contract.RoleProof)
	s.Labels[LabelRole] = contract.RoleProof
	s.Entrypoint = append([]string{"/bin/sh", "-c", proofLauncher, "sh", dataplane.ProgramPath, dataplane.Program}, proofEnv(req)...)
	s.Cmd = nil
	for _, d := range dp.docker.rdmaMapping(np).Mapped {
		rank.Mapped = append(rank.Mapped, path.Base(d))
	}
	eng, addr, err := dp.docker.engine(n.DockerHost)
	if err != nil {
		return contract.ProofResult{}, err
	}
	// Removed on every way out (shortlived.go), a create or start that failed too.
	defer dp.removeProof(ctx, eng, s.Name, fr.Spec.Name)
	ref, err := dp.docker.ensureContainer(ctx, n.DockerHost, labelled(s, c), true)
	if err != nil {
		return contract.ProofResult{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, req.Timeout+30*time.Second)
	defer cancel()
	code := -1
	wait := eng.ContainerWait(wctx, ref.ID, client.ContainerWaitOptions{})
	select {
	case r := <-wait.Result:
		code = int(r.StatusCode)
	case err := <-wait.Error:
		if wctx.Err() == nil {
			return contract.ProofResult{}, engineError(addr, "wait for "+ref.Name, err)
		}
	case <-wctx.Done():
	}
	logs, err := eng.ContainerLogs(ctx, ref.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return contract.ProofResult{}, engineError(addr, "read the proof's output in "+ref.Name, err)
	}
	defer logs.Close()
	var out, errOut bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errOut, io.LimitReader(logs, maxExecOutput)); err != nil {
		return contract.ProofResult{}, engineError(addr, "read the proof's output in "+ref.Name, err)
	}
	return proofResult(rank, req, out.String()+errOut.String(), code), nil
}

// removeProof removes the proof's container named name, if it is there and is this node's
// proof of cluster: a container of that name that ensureContainer refused to replace
// (another cluster's, or not tpdeploy's) is not the proof's to remove.
func (dp *DataPlane) removeProof(ctx context.Context, eng containerEngine, name, cluster string) {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeShortLivedTimeout)
	defer cancel()
	info, err := eng.ContainerInspect(ictx, name, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return
	}
	if err == nil && (info.Container.Config == nil || !shortLived(info.Container.Config.Labels, dp.name, dp.docker.opts.Network) || info.Container.Config.Labels[LabelCluster] != cluster) {
		return
	}
	if err == nil {
		err = removeNow(ctx, eng, info.Container.ID)
	}
	if err != nil {
		dp.logger().Warn("remove the proof's container", zap.String("container", name), zap.Error(err))
	}
}

func hcaList(req contract.ProofRequest) []string {
	var out []string
	for _, d := range req.Plan.RDMA {
		out = append(out, d.HCA())
	}
	return out
}

// execBounded runs cmd in a container to its end (or until within passes), returning its
// output (stdout then stderr, each at most maxExecOutput: more is errExecOutput) and exit
// code; when within passes, what it printed so far and -1. The read ends with the
// deadline: closing the connection is what unblocks a read a container never ends.
func execBounded(ctx context.Context, eng containerEngine, ctr string, cmd, env []string, within time.Duration) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	ex, err := eng.ExecCreate(ctx, ctr, client.ExecCreateOptions{Cmd: cmd, Env: env, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", 0, err
	}
	att, err := eng.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return "", 0, err
	}
	defer att.Close()
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()
	out, errOut := &cappedBuffer{max: maxExecOutput}, &cappedBuffer{max: maxExecOutput}
	if _, err := stdcopy.StdCopy(out, errOut, att.Reader); err != nil && ctx.Err() == nil {
		return "", 0, err
	}
	text := out.buf.String() + errOut.buf.String()
	if ctx.Err() != nil {
		return text, -1, nil // timed out: the output says how far it got
	}
	for i := 0; i < 100; i++ {
		in, err := eng.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		if err != nil {
			return text, -1, nil // timed out: the output says how far it got
		}
		if !in.Running {
			return text, in.ExitCode, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return text, -1, nil
}

// fileArchive is a tar holding one file at name (absolute), with the directories below the
// top-level one, to be extracted at /. The top-level directory (/tmp) is the image's and
// keeps its mode: an entry for it would make the engine set it to the entry's.
func fileArchive(name string, body []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	rel := strings.TrimPrefix(name, "/")
	var dirs []string
	for d := path.Dir(rel); d != "." && d != "/" && strings.Contains(d, "/"); d = path.Dir(d) {
		dirs = append([]string{d + "/"}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(body))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(body); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
