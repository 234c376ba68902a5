#!/usr/bin/env bash
# mp-final.sh — vLLM's own multi-node mode (no Ray) launched by hand, as its docs and the
# community DGX Spark launcher do: a headless `vllm serve` on every node but the head, then
# node rank 0 on the head, each node with its own address and interface. It already knows
# the right addresses; `make bench` times it against the deploy workflow with executor: mp.
# Every node's container joins its network namespace (--network container:NODE), which is
# --network host on a real node.
#
# env: NAME IMAGE NODE_A NODE_B IP_A IP_B IF_A IF_B [EXTRA_A] (extra `-e K=V` for node-a)
set -euo pipefail
: "${NAME:?}" "${IMAGE:?}" "${NODE_A:?}" "${NODE_B:?}" "${IP_A:?}" "${IP_B:?}" "${IF_A:?}" "${IF_B:?}"

net_env() { # ip iface
  echo "-e VLLM_HOST_IP=$1 -e NCCL_SOCKET_IFNAME==$2 -e GLOO_SOCKET_IFNAME=$2 -e TP_SOCKET_IFNAME=$2"
}
serve() { # rank
  echo "serve /models/tiny-moe --tensor-parallel-size 2 --pipeline-parallel-size 1 --distributed-executor-backend mp \
    --nnodes 2 --node-rank $1 --master-addr $IP_A --master-port 29501 --host 0.0.0.0 --port 8000 --served-model-name tiny-moe"
}

# shellcheck disable=SC2046
docker run -d --name "$NAME-rank1" --network "container:$NODE_B" $(net_env "$IP_B" "$IF_B") \
  --entrypoint vllm "$IMAGE" $(serve 1) --headless >/dev/null
# shellcheck disable=SC2046
docker run -d --name "$NAME-rank0" --network "container:$NODE_A" $(net_env "$IP_A" "$IF_A") ${EXTRA_A:-} \
  --entrypoint vllm "$IMAGE" $(serve 0) >/dev/null

for _ in $(seq 1 600); do
  if curl -fsS -o /dev/null "http://$IP_A:8000/health" && curl -fsS "http://$IP_A:8000/v1/models" | grep -q '"tiny-moe"'; then
    exit 0
  fi
  sleep 0.5
done
echo "not serving" >&2
exit 1
