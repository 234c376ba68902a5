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
set -euo pipefail
cd "$(dirname "$0")/.."
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
