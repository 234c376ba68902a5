#!/usr/bin/env bash
# nccl-check.sh — the environment tpdeploy plans, proven on real NCCL and Gloo.
#
# On a machine with two GPUs, PyTorch and root (no iproute2 needed): builds the lab's network-namespace
# topology (internal/labnet: node-a with a fast link `vethA` and an external NIC `ext0`
# carrying the default route, node-b with only its fast link `ibp1`), takes each node's
# environment from `starter plan --json` for that topology (planned locally, no Temporal),
# and runs a two-rank torch.distributed NCCL and Gloo rendezvous + all-reduce, one rank per
# namespace and GPU, in three cases:
#   planned         — each node the plan's environment
#   vllm-0.17-copy  — the worker's NCCL_* replaced by the head's, as vLLM >= 0.17 does
#   per-node-copied — the seed's own fix (NCCL_SOCKET_IFNAME per node) after that copy
# NCCL is forced onto sockets (no P2P, SHM or IB) so the interface choice is what is tested.
#
#   make build && sudo scripts/nccl-check.sh
#
# The data-plane proof (dataplane/proof.py, what a deploy runs in every node's container
# before vLLM starts), on one machine with torch and NCCL, no root needed:
#
#   scripts/nccl-check.sh proof [--ranks N] [--rdma] [NCCL_NET=IB ...]
#
# runs N ranks (default 1) on this host (rank i on GPU i mod the GPU count; two ranks on
# one GPU is NCCL's `Duplicate GPU detected`), with NCCL's INFO lines on, and prints per
# rank the transport NCCL chose, the all_reduce check and the bus bandwidth per size, then
# tpdeploy's verdict (scripts/proofread). --rdma judges as a plan with RDMA would
# (sockets are DataPlaneDegraded). Extra VAR=value arguments go to every rank, e.g.
# NCCL_NET=IB without RDMA devices: NCCL's `Failed to initialize any NET plugin`, not a
# hang. TPDEPLOY_PROOF_TIMEOUT (default 60 s) bounds a rank that never finishes.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = proof ]; then
  shift
  ranks=1 judge=()
  extra=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --ranks) ranks=$2; shift 2 ;;
      --rdma) judge+=(--rdma); shift ;;
      *=*) extra+=("$1"); shift ;;
      *) echo "usage: $0 proof [--ranks N] [--rdma] [VAR=value ...]" >&2; exit 2 ;;
    esac
  done
  work=$(mktemp -d)
  port=$((29600 + RANDOM % 300))
  pids=()
  for ((r = 0; r < ranks; r++)); do
    env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV,BOOTSTRAP \
      TPDEPLOY_PROOF_RANK=$r TPDEPLOY_PROOF_WORLD=$ranks TPDEPLOY_PROOF_MASTER=127.0.0.1:$port \
      TPDEPLOY_PROOF_TIMEOUT=${TPDEPLOY_PROOF_TIMEOUT:-60} LOCAL_RANK=$r "${extra[@]}" \
      python3 dataplane/proof.py >"$work/rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  logs=()
  for ((r = 0; r < ranks; r++)); do logs+=("$work/rank$r.log"); done
  echo "(full output: $work)"
  # A machine without Go (a GPU box) runs the static build `make build` leaves in bin/.
  if [ -x bin/proofread ]; then exec bin/proofread "${judge[@]}" "${logs[@]}"; fi
  exec go run ./scripts/proofread "${judge[@]}" "${logs[@]}"
fi
prefix=${PREFIX:-tpd-nccl}
work=$(mktemp -d)
trap 'bin/netns down --prefix "$prefix" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
bin/netns up --prefix "$prefix" --nodes 2
cat >"$work/spec.yaml" <<SPEC
name: nccl-check
image: vllm/vllm-openai:v0.17.0
model: {path: /models/none}
parallel: {tensor: 2}
nodes:
  - {name: node-a, role: head, gpus: 1}
  - {name: node-b, role: worker, gpus: 1}
SPEC
bin/netns plan -f "$work/spec.yaml" --map "node-a=$prefix-a,node-b=$prefix-b" >"$work/plan.json"
python3 scripts/nccl_check.py --plan "$work/plan.json" --netns "node-a=$prefix-a,node-b=$prefix-b"
