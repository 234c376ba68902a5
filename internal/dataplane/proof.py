# tpdeploy's data-plane proof: one NCCL all_reduce across every node, run in each node's own
# container with the image's own torch and NCCL and the environment vLLM will get, before
# vLLM starts. It prints NCCL's own INFO lines (the caller sets NCCL_DEBUG=INFO and
# NCCL_DEBUG_SUBSYS=INIT,NET,ENV,BOOTSTRAP) and its own lines, each one JSON object after
# the word TPDEPLOY_PROOF:
#
#   TPDEPLOY_PROOF {"event": "env", "rank": R, "world": N, "memlock": "unlimited" | bytes,
#                   "ipc_lock": bool, "uverbs": [...], "torch": V, "nccl": V, "device": D}
#   TPDEPLOY_PROOF {"event": "size", "rank": R, "bytes": B, "seconds": S, "algbw_gbs": A,
#                   "busbw_gbs": U}                         (one per size, after warm-up)
#   TPDEPLOY_PROOF {"event": "result", "rank": R, "ok": bool, "sum_ok": bool,
#                   "expected": X, "got": Y, "busbw_gbs": U}
#   TPDEPLOY_PROOF {"event": "error", "rank": R, "phase": P, "error": TEXT}
#
# busbw = algbw * 2(n-1)/n (nccl-tests' all_reduce factor). The program needs only torch
# (stock vLLM images have it; no nccl-tests). It never hangs: a watchdog ends it with an
# "error" line (phase "timeout") after TPDEPLOY_PROOF_TIMEOUT seconds, because NCCL over
# sockets has no timeout of its own.
#
# Environment: TPDEPLOY_PROOF_RANK, TPDEPLOY_PROOF_WORLD, TPDEPLOY_PROOF_MASTER (host:port
# of rank 0's store), TPDEPLOY_PROOF_TIMEOUT (seconds, default 120), TPDEPLOY_PROOF_SIZES
# (comma-separated bytes, default 1 MiB, 16 MiB, 64 MiB, 256 MiB), TPDEPLOY_PROOF_ITERS
# (timed iterations per size, default 5), LOCAL_RANK (the GPU, default 0).
import json
import os
import sys
import threading
import time


def say(event, **kw):
    kw = dict(event=event, **kw)
    sys.stdout.write("TPDEPLOY_PROOF " + json.dumps(kw, sort_keys=True) + "\n")
    sys.stdout.flush()


def memlock():
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        return "unlimited" if soft == resource.RLIM_INFINITY else soft
    except Exception as e:  # noqa: BLE001 - report, never fail here
        return "unknown: %s" % e


def ipc_lock():
    # CAP_IPC_LOCK (bit 14) lets ibv_reg_mr pin memory past RLIMIT_MEMLOCK (the kernel's
    # ib_umem_get checks capable(CAP_IPC_LOCK)).
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) & (1 << 14))
    except Exception:  # noqa: BLE001
        pass
    return False


def uverbs():
    try:
        return sorted(n for n in os.listdir("/dev/infiniband") if n.startswith("uverbs"))
    except OSError:
        return []


def main():
    rank = int(os.environ.get("TPDEPLOY_PROOF_RANK", "0"))
    world = int(os.environ.get("TPDEPLOY_PROOF_WORLD", "1"))
    master = os.environ.get("TPDEPLOY_PROOF_MASTER", "127.0.0.1:29599")
    timeout = float(os.environ.get("TPDEPLOY_PROOF_TIMEOUT", "120"))
    sizes = [int(s) for s in os.environ.get("TPDEPLOY_PROOF_SIZES", "1048576,16777216,67108864,268435456").split(",") if s.strip()]
    iters = int(os.environ.get("TPDEPLOY_PROOF_ITERS", "5"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    phase = ["import"]

    def watchdog():
        say("error", rank=rank, phase="timeout",
            error="no result after %.0f s (in %s): a rank did not join, or the collective hangs (NCCL over sockets has no timeout)" % (timeout, phase[0]))
        os._exit(3)

    timer = threading.Timer(timeout, watchdog)
    timer.daemon = True
    timer.start()
    try:
        import datetime
        import torch
        import torch.distributed as dist
        nccl = ".".join(str(v) for v in torch.cuda.nccl.version()) if torch.cuda.is_available() else ""
        dev = "cuda:%d" % (local % max(torch.cuda.device_count(), 1))
        say("env", rank=rank, world=world, memlock=memlock(), ipc_lock=ipc_lock(), uverbs=uverbs(),
            torch=torch.__version__, nccl=nccl, device=dev)
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available in this container (no GPU given to it?)")
        torch.cuda.set_device(dev)
        phase[0] = "init"
        dist.init_process_group("nccl", init_method="tcp://" + master, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout), device_id=torch.device(dev))
        phase[0] = "all_reduce"
        x = torch.full((1024,), float(rank + 1), device=dev)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        expected = world * (world + 1) / 2.0
        got = float(x[0].item())
        sum_ok = bool(torch.all(x == expected).item())
        phase[0] = "bandwidth"
        best = 0.0
        for size in sizes:
            t = torch.ones(size // 4, dtype=torch.float32, device=dev)
            for _ in range(2):  # warm-up: connections, registration
                dist.all_reduce(t)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            torch.cuda.synchronize()
            secs = (time.perf_counter() - start) / iters
            algbw = size / secs / 1e9
            busbw = algbw * 2 * (world - 1) / world
            best = max(best, busbw)
            say("size", rank=rank, bytes=size, seconds=secs, algbw_gbs=round(algbw, 3), busbw_gbs=round(busbw, 3))
            del t
        dist.barrier()
        dist.destroy_process_group()
        say("result", rank=rank, ok=sum_ok, sum_ok=sum_ok, expected=expected, got=got, busbw_gbs=round(best, 3))
        timer.cancel()
        return 0 if sum_ok else 1
    except Exception as e:  # noqa: BLE001 - the caller classifies
        # torch's NCCL errors carry the cause on later lines ("Last error: ..."): keep a few.
        lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
        text = "%s: %s" % (type(e).__name__, " | ".join(lines[:6]))
        say("error", rank=rank, phase=phase[0], error=text)
        timer.cancel()
        return 2


if __name__ == "__main__":
    sys.exit(main())
