package logscan

import (
	"strings"
	"testing"

	"github.com/tpdeploy/tpdeploy/internal/failure"
)

// The execute timeout's line, as vLLM prints it: `raise TimeoutError(f"RPC call to {method}
// timed out.")` in vllm/v1/executor/multiproc_executor.py, logged in EngineCore's traceback
// (the 0.20 form from verl#6583 / spark-vllm-docker#321, the older from vllm#17965).
func TestTheExecuteTimeoutIsEngineDeadNamingTheStep(t *testing.T) {
	for line, step := range map[string]string{
		"(EngineCore pid=171) ERROR 07-16 08:23:49 [core.py:1242] TimeoutError: RPC call to sample_tokens timed out.": "sample_tokens",
		"ERROR 05-16 03:38:10 [core.py:398] TimeoutError: RPC call to execute_model timed out.":                       "execute_model",
	} {
		f := Classify(Parse(line))
		if f == nil || f.Type != failure.EngineDead || !f.Fatal {
			t.Fatalf("%q: %+v, want a fatal EngineDead", line, f)
		}
		if msg := f.Message(); !strings.Contains(msg, step) || !strings.Contains(msg, "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS") {
			t.Errorf("%q: %q names neither the step nor the timeout", line, msg)
		}
	}
}

// NCCL 2.27 and 2.28 print the failed connect in lower case, through socketConnectCheck
// (NVIDIA/nccl src/misc/socket.cc at v2.28.9-1: WARN("%s: connect to %s failed : %s",
// funcName, ...), funcName socketStartConnect), in NCCL's own line format (src/debug.cc:
// "%s:%d:%d " host, pid, tid, then "[%d] %s:%d NCCL WARN ").
func TestNCCL228ConnectFailureIsNCCLError(t *testing.T) {
	line := "node-b:212:230 [0] misc/socket.cc:596 NCCL WARN socketStartConnect: connect to 10.1.230.180<41273> failed : Network is unreachable"
	f := Classify(Parse(line))
	if f == nil || f.Type != failure.NCCLError {
		t.Fatalf("%q: %+v, want NCCLError", line, f)
	}
	if !strings.Contains(f.Message(), "10.1.230.180") {
		t.Errorf("%q does not name the peer", f.Message())
	}
}

// A queue pair that cannot reach its peer (a switchless fabric's diagonal, or NCCL 2.28's
// channel NIC whose cable does not face the peer: spark-vllm-docker #252's error) ends in
// strerror(110), "Connection timed out" (NVIDIA/nccl src/misc/ibvwrap.cc at v2.28.9-1,
// wrap_ibv_modify_qp). It is read as the queue pair it is, naming the HCA, and its fix is
// the links, NCCL_IB_HCA, NCCL_ALGO and the rank order, not NCCL_SOCKET_IFNAME (no socket is
// involved), in NCCL's own line format and with a Ray worker's prefix.
func TestIBQueuePairTimeoutIsNotASocketFailure(t *testing.T) {
	const warn = "NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev rocep1s0f0:1, curr state INIT, next state RTR, local GID index 3, local GID ::ffff:10.204.2.15, remote GID ::ffff:10.202.2.13"
	for _, line := range []string{
		"node-d:41:41 [0] misc/ibvwrap.cc:0 " + warn,
		"(RayWorkerWrapper pid=26, ip=10.231.2.13) node-d:41:41 [0] misc/ibvwrap.cc:0 " + warn,
	} {
		f := Classify(Parse(line))
		if f == nil || f.Type != failure.NCCLError || !f.Fatal {
			t.Fatalf("%q: %+v, want a fatal NCCLError", line, f)
		}
		if !strings.Contains(f.Diagnosis, "queue pair on rocep1s0f0:1") || strings.Contains(f.Fix, "NCCL_SOCKET_IFNAME") || !strings.Contains(f.Fix, "NCCL_ALGO") {
			t.Errorf("%q:\n  diagnosis %q\n  fix %q", line, f.Diagnosis, f.Fix)
		}
	}
}

// vLLM's Rust front end (VLLM_USE_RUST_FRONTEND=1) prints no "Starting vLLM server on" and
// no uvicorn lines: the Python side logs "Launching Rust frontend: …" (vllm/v1/utils.py
// RustFrontendProcessManager), and the vllm-rs process, once bound, its server's
// info!(%bind_address, %model, "starting OpenAI server") under the (RustFrontend pid=N)
// prefix its other lines carry ("(RustFrontend pid=353) WARNING 06-01 21:35:56
// [unsupported.rs:64] …" in a 0.22.1 nightly's log).
func TestTheRustFrontEndsReadyLineIsReady(t *testing.T) {
	ready := "(RustFrontend pid=353) INFO 06-01 21:36:41 [server.rs:118] starting OpenAI server bind_address=0.0.0.0:8000 model=qwen3.6-35b"
	if got := Phase(ready); got != "ready" {
		t.Errorf("%q: phase %q, want ready", ready, got)
	}
	launch := "(APIServer pid=1) INFO 06-01 21:35:56 [utils.py:370] Launching Rust frontend: /usr/local/lib/python3.12/dist-packages/vllm/vllm-rs frontend --listen-fd 15"
	if got := Phase(launch); got == "ready" {
		t.Errorf("%q: the launch is not the server up", launch)
	}
}
