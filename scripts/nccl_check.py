"""nccl_check.py — run by scripts/nccl-check.sh: a two-rank NCCL and Gloo rendezvous and
all-reduce with the environment tpdeploy planned, one rank per network namespace and GPU."""

import argparse
import json
import os
import subprocess
import sys
import time

SOCKETS_ONLY = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1",
                "NCCL_DEBUG": "WARN", "NCCL_DEBUG_SUBSYS": "INIT,NET",
                # The workplace keeps NVLink multicast off.
                "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# bin/netns enters a namespace without iproute2 (GPU machines often lack it).
NETNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bin", "netns")
PLANNED = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "VLLM_HOST_IP")


def rank_main(rank, master, port):
    import datetime
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(0)  # CUDA_VISIBLE_DEVICES holds this rank's GPU
    dist.init_process_group("nccl", init_method=f"tcp://{master}:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=40))
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    ok_nccl = bool((x == 3.0).all().item())
    gloo = dist.new_group(backend="gloo")
    y = torch.full((1024,), float(rank + 1))
    dist.all_reduce(y, group=gloo)
    ok_gloo = bool((y == 3.0).all().item())
    print(f"rank {rank}: NCCL all-reduce {'OK' if ok_nccl else 'WRONG'}, Gloo all-reduce {'OK' if ok_gloo else 'WRONG'}"
          f" (torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))})", flush=True)
    dist.destroy_process_group()
    return 0 if ok_nccl and ok_gloo else 1


def run_case(name, envs, netns, master, port):
    print(f"== {name}", flush=True)
    for node in ("node-a", "node-b"):
        shown = " ".join(f"{k}={envs[node][k]}" for k in PLANNED if k in envs[node])
        print(f"   {node}: {shown}", flush=True)
    procs = []
    for rank, node in enumerate(("node-a", "node-b")):
        env = dict(os.environ)
        for k in PLANNED:
            env.pop(k, None)
        env.update(SOCKETS_ONLY)
        env.update(envs[node])
        env["CUDA_VISIBLE_DEVICES"] = str(rank)
        env["PYTHONUNBUFFERED"] = "1"
        cmd = [NETNS, "exec", netns[node], "--", sys.executable, __file__, "--rank", str(rank), "--master", master, "--port", str(port)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.time() + 75
    outs, codes = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.time()))
            codes.append(p.returncode)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            codes.append("hung (killed after 75 s)")
        outs.append(out)
    for rank, (out, code) in enumerate(zip(outs, codes)):
        lines = [l for l in out.splitlines() if l.strip() and ("NCCL" in l or "rank" in l or "Error" in l or "error" in l
                                                                or "Using" in l or "Gloo" in l or "c10d" in l)]
        print(f"   rank {rank} ({'node-a' if rank == 0 else 'node-b'}): exit {code}", flush=True)
        for l in lines[-8:]:
            print(f"      {l[:300]}", flush=True)
    ok = all(c == 0 for c in codes)
    print(f"   => {'OK' if ok else 'FAILED'}", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan")
    ap.add_argument("--netns")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--master")
    ap.add_argument("--port", type=int)
    a = ap.parse_args()
    if a.rank is not None:
        sys.exit(rank_main(a.rank, a.master, a.port))
    report = json.load(open(a.plan))
    plan = report["plan"]
    netns = dict(kv.split("=", 1) for kv in a.netns.split(","))
    envs = {n["name"]: {k: v for k, v in n["env"].items() if k in PLANNED} for n in plan["nodes"]}
    iface = {n["name"]: n["interface"] for n in plan["nodes"]}
    master = envs["node-a"]["VLLM_HOST_IP"]
    print(f"plan: subnet {plan['subnet']}, NCCL form {plan['nccl']['form']}: {plan['nccl']['reason']}", flush=True)
    copied = {n: dict(e) for n, e in envs.items()}
    for k in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"):
        if k in envs["node-a"]:
            copied["node-b"][k] = envs["node-a"][k]
    per_node = {n: dict(e, NCCL_SOCKET_IFNAME="=" + iface[n]) for n, e in envs.items()}
    per_node_copied = {n: dict(e) for n, e in per_node.items()}
    per_node_copied["node-b"]["NCCL_SOCKET_IFNAME"] = per_node["node-a"]["NCCL_SOCKET_IFNAME"]
    results = {
        "planned": run_case("planned (each node the plan's environment)", envs, netns, master, 29611),
        "vllm-0.17-copy": run_case("vllm-0.17-copy (node-b's NCCL_* replaced by node-a's)", copied, netns, master, 29612),
        "per-node-copied": run_case("per-node-copied (the seed's per-node NCCL_SOCKET_IFNAME after vLLM 0.17's copy)", per_node_copied, netns, master, 29613),
    }
    print("summary: " + ", ".join(f"{k} {'OK' if v else 'FAILED'}" for k, v in results.items()), flush=True)
    # What the plan promises: its environment works as planned and after vLLM's copy.
    sys.exit(0 if results["planned"] and results["vllm-0.17-copy"] else 1)


if __name__ == "__main__":
    main()
