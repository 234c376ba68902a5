package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"
)

// Child processes, as upstream runs them: vLLM v1 runs its engine in a process of its own
// (vllm/v1/engine/core.py run_engine_core, started by vllm/v1/engine/utils.py
// CoreEngineProcManager) titled "VLLM::EngineCore" (set_process_title("EngineCore") in
// core.py; vllm/utils/system_utils.py set_process_title: setproctitle(f"{prefix}::{name}")
// with VLLM_PROCESS_NAME_PREFIX, default "VLLM"), separate from the API server; a headless
// node's workers are processes of their own ("VLLM::Worker_TP<r>",
// vllm/v1/executor/multiproc_executor.py WorkerProc); Ray runs each actor in a worker
// process of its node's raylet, titled "ray::<ClassName>" (python/ray/_private/worker.py).
// A static Go binary cannot fork without exec, so the simulator re-executes itself with
// the title as argv[0] (what /proc/PID/cmdline, ps and pgrep -f show) and the first 15
// bytes as the kernel's comm (prctl PR_SET_NAME, what setproctitle also sets on Linux).
// The role and its input travel in two variables the child removes at once, as
// multiprocessing's spawn passes its own on the command line.

const (
	envProc    = "TPDEPLOY_SIM_PROC"
	envPayload = "TPDEPLOY_SIM_PROC_INPUT"
)

// child is a started child process; done delivers its exit once.
type child struct {
	cmd  *exec.Cmd
	done chan error
}

// spawn starts this binary again as role, titled title, with payload as its input and
// extra as its fds 3, 4, .... The child dies with its parent (PR_SET_PDEATHSIG).
func spawn(title, role string, payload any, extra ...*os.File) (*child, error) {
	in, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{title}, Stdout: os.Stdout, Stderr: os.Stderr,
		Env: append(os.Environ(), envProc+"="+role, envPayload+"="+string(in)), ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	return startChild(cmd, title)
}

// startChild starts cmd, whose SysProcAttr asks for PR_SET_PDEATHSIG: the signal follows
// the thread that started the child, so that thread stays locked to the goroutine that
// waits for it.
func startChild(cmd *exec.Cmd, name string) (*child, error) {
	c := &child{cmd: cmd, done: make(chan error, 1)}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return c, nil
}

// signal sends sig to the child (a no-op once it has exited).
func (c *child) signal(sig os.Signal) {
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(sig)
	}
}

// childRole is the role this process was started as ("" for a command run by a user), and
// its input; both variables are removed so that nothing this process starts or copies
// (vLLM's environment copy to Ray workers) carries them.
func childRole() (role string, input []byte) {
	role = os.Getenv(envProc)
	if role == "" {
		return "", nil
	}
	input = []byte(os.Getenv(envPayload))
	_ = os.Unsetenv(envProc)
	_ = os.Unsetenv(envPayload)
	setComm(os.Args[0])
	return role, input
}

// runChild runs the role a parent started this process as.
func runChild(role string, input []byte) error {
	var in procInput
	if err := json.Unmarshal(input, &in); err != nil {
		return fmt.Errorf("%s: input: %w", role, err)
	}
	switch role {
	case roleEngine:
		return engineCoreMain(in)
	case roleMPWorker:
		return mpWorkerMain(in)
	case roleRayRank:
		return rayRankMain(in)
	}
	return fmt.Errorf("unknown child role %q", role)
}

const (
	roleEngine   = "engine-core"
	roleMPWorker = "mp-worker"
	roleRayRank  = "ray-actor"
)

// procInput is what a parent hands its child.
type procInput struct {
	// Args are `vllm serve`'s arguments (the engine, a headless worker).
	Args []string `json:"args,omitempty"`
	// Rank and World place a headless worker.
	Rank  int `json:"rank,omitempty"`
	World int `json:"world,omitempty"`
	// GCS, Spec, NodeID and NodeIP are a Ray actor's: its raylet's GCS, the task, its node.
	GCS    string   `json:"gcs,omitempty"`
	Spec   rankSpec `json:"spec"`
	NodeID string   `json:"node_id,omitempty"`
	NodeIP string   `json:"node_ip,omitempty"`
}

// setComm is prctl(PR_SET_NAME): the kernel keeps 15 bytes and a NUL.
func setComm(title string) {
	b := make([]byte, 16)
	copy(b[:15], title)
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0)
}
