# One simulated vLLM rank's torch.distributed init, run for real by the lab's simulator
# (lab/sim/torchrank.go) with Debian's python3-torch: the c10d TCPStore rendezvous at the
# init method the modelled vLLM release builds, a Gloo process group over the rank's own
# GLOO_SOCKET_IFNAME, one all_reduce whose sum is checked, then an all_gather of what the
# simulated NCCL needs from every rank. NCCL itself stays simulated (there are no GPUs).
#
# argv: RANK WORLD TIMEOUT_S INIT HELLO_JSON
#   INIT is tcp://HOST:PORT, or store://HOST (RayExecutorV2's rank 0: create_dist_init_method
#   opens the TCPStore on HOST, port 0, and hands tcp://HOST:<its port> to every rank).
# fd 3 (the simulator's pipe) gets JSON lines: {"init_method": ...} (store:// only), then
# {"peers": [...]} once the group is up. Everything torch prints goes to stdout/stderr as it
# is; an exception ends the process with Python's traceback, its last line the error.
# The process then holds the group until stdin closes (the rank's life).
import datetime
import json
import os
import sys

rank, world, timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
init, hello = sys.argv[4], json.loads(sys.argv[5])
ctl = os.fdopen(3, "w", buffering=1)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if init.startswith("store://"):
    # vllm/v1/executor/ray_executor_v2.py RayWorkerProc.create_dist_init_method. The lab's
    # torch (Debian's) has no libuv: USE_LIBUV=0 (lab/README.md) decides here as it does for
    # init_process_group's own store.
    host = init[len("store://"):]
    store = dist.TCPStore(host_name=host, port=0, world_size=world, is_master=True,
                          wait_for_workers=False, multi_tenant=True,
                          use_libuv=os.environ.get("USE_LIBUV", "1") == "1")
    init = "tcp://%s:%d" % (host, store.port)
    ctl.write(json.dumps({"init_method": init}) + "\n")

dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=timeout))
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
want = world * (world + 1) / 2
if t.item() != want:
    raise RuntimeError("all_reduce over Gloo summed %s, want %s" % (t.item(), want))
peers = [None] * world
dist.all_gather_object(peers, hello)
print("[tpdeploy-lab] torch %s: rank %d/%d joined %s over Gloo (GLOO_SOCKET_IFNAME=%s); all_reduce sum %g"
      % (torch.__version__, rank, world, init, os.environ.get("GLOO_SOCKET_IFNAME", ""), t.item()), flush=True)
ctl.write(json.dumps({"peers": peers}) + "\n")
sys.stdin.read()
dist.destroy_process_group()
