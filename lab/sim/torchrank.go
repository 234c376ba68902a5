package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Every simulated rank's torch.distributed init is real: the rank runs the lab's rank
// program (lab/torch/rank.py, baked into the image) with the image's Debian python3-torch,
// in the rank's own container (its node's network namespace) and with the rank's own
// environment. It joins the c10d TCPStore at the init method the release builds, creates
// the Gloo process group over GLOO_SOCKET_IFNAME, runs one all_reduce and checks its sum,
// then all_gathers what the simulated NCCL needs of every rank (its hello). What torch
// prints is the rank's output; torch's exception is the rank's failure.

// rankProgram is where the image holds lab/torch/rank.py (lab.RankProgram).
const rankProgram = "/usr/lib/tpdeploy-lab/rank.py"

// torchRun is one rank's torch.distributed init.
type torchRun struct {
	Rank, World int
	// Init is tcp://HOST:PORT, or store://HOST for RayExecutorV2's rank 0, which opens the
	// store on HOST, port 0, and learns its port from torch (OnInit gets tcp://HOST:PORT).
	Init    string
	OnInit  func(initMethod string)
	Timeout time.Duration
	// Env is the rank process's whole environment.
	Env   []string
	Hello hello
	// Raw prints a line of the rank process's own output (with the rank's prefix).
	Raw func(string)
	// Lost is polled while the init runs: a node lost meanwhile ends it with that error.
	Lost func() error
}

// torchProc is a rank's running torch process: it holds the process group until Close.
type torchProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
}

// Close ends the rank's torch process (stdin closes: it destroys its group and exits).
func (p *torchProc) Close() {
	if p == nil {
		return
	}
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// printedError is a rank failure whose text the rank's own output already shows (torch's
// traceback ends with it).
type printedError struct{ msg string }

func (e *printedError) Error() string { return e.msg }

// environ is an environment map as a process's environment, sorted.
func environ(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// runTorch runs the rank's torch init and returns the peers' hellos (rank order) once the
// group is up. Its failure is torch's exception, the last line of the process's output.
func runTorch(ctx context.Context, r torchRun) (*torchProc, []hello, error) {
	me, _ := json.Marshal(r.Hello)
	secs := strconv.FormatFloat(max(r.Timeout.Seconds(), 1), 'f', 3, 64)
	cmd := exec.CommandContext(ctx, realPython, "-u", rankProgram, strconv.Itoa(r.Rank), strconv.Itoa(r.World), secs, r.Init, string(me))
	cmd.Env = r.Env
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = outW, outW, []*os.File{ctlW}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		outR.Close()
		outW.Close()
		ctlR.Close()
		ctlW.Close()
		return nil, nil, fmt.Errorf("RuntimeError: the lab's rank program did not start (%v): the image's python3 with torch (lab/torch.go) runs every rank", err)
	}
	outW.Close()
	ctlW.Close()
	p := &torchProc{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	var mu sync.Mutex
	var last string
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			r.Raw(line)
			if strings.TrimSpace(line) != "" {
				mu.Lock()
				last = strings.TrimSpace(line)
				mu.Unlock()
			}
		}
	}()
	peers := make(chan []hello, 1)
	go func() {
		sc := bufio.NewScanner(ctlR)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var m struct {
				InitMethod string  `json:"init_method"`
				Peers      []hello `json:"peers"`
			}
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			if m.InitMethod != "" && r.OnInit != nil {
				r.OnInit(m.InitMethod)
			}
			if m.Peers != nil {
				peers <- m.Peers
			}
		}
	}()
	var waitErr error
	go func() {
		<-outDone
		waitErr = cmd.Wait()
		close(p.done)
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case table := <-peers:
			return p, table, nil
		case <-p.done:
			select {
			case table := <-peers:
				// It printed the table and then died: the group is gone with it.
				_ = table
			default:
			}
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			mu.Lock()
			msg := last
			mu.Unlock()
			if msg == "" {
				msg = fmt.Sprintf("RuntimeError: the rank's torch process ended: %v", waitErr)
			}
			return nil, nil, &printedError{msg}
		case <-tick.C:
			if r.Lost == nil {
				continue
			}
			if err := r.Lost(); err != nil {
				_ = cmd.Process.Kill()
				<-p.done
				return nil, nil, err
			}
		}
	}
}

// exceptionText is the error as the rank's log shows it once more (a printed one is in its
// output already).
func exceptionText(err error) (string, bool) {
	var pe *printedError
	return err.Error(), errors.As(err, &pe)
}
