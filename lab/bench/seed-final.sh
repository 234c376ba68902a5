#!/usr/bin/env bash
# seed-final.sh — the seed's hand-fixed launch, as a sequential docker CLI script that already
# knows the right addresses and interface names: what tpdeploy replaces. `make bench` times it
# against the deploy workflow on the same lab. Every node's containers join its network
# namespace (--network container:NODE), which is --network host on a real node.
#
# env: NAME IMAGE NODE_A NODE_B IP_A IP_B IF_A IF_B [EXTRA_A] (extra `-e K=V` for node-a)
set -euo pipefail
: "${NAME:?}" "${IMAGE:?}" "${NODE_A:?}" "${NODE_B:?}" "${IP_A:?}" "${IP_B:?}" "${IF_A:?}" "${IF_B:?}"

net_env() { # ip iface
  echo "-e VLLM_HOST_IP=$1 -e NCCL_SOCKET_IFNAME==$2 -e GLOO_SOCKET_IFNAME=$2 -e TP_SOCKET_IFNAME=$2 -e RAY_ADDRESS=$IP_A:6379"
}

# shellcheck disable=SC2046
docker run -d --name "$NAME-head" --network "container:$NODE_A" $(net_env "$IP_A" "$IF_A") ${EXTRA_A:-} \
  --entrypoint ray "$IMAGE" start --head --node-ip-address="$IP_A" --port=6379 --num-gpus=1 --block >/dev/null
# shellcheck disable=SC2046
docker run -d --name "$NAME-worker" --network "container:$NODE_B" $(net_env "$IP_B" "$IF_B") \
  --entrypoint ray "$IMAGE" start --address="$IP_A:6379" --node-ip-address="$IP_B" --num-gpus=1 --block >/dev/null

# Wait until both nodes are in `ray status` (the community launcher polls it too).
for _ in $(seq 1 120); do
  n=$(docker exec "$NAME-head" ray status 2>/dev/null | grep -c '^ 1 node_' || true)
  [ "$n" -ge 2 ] && break
  sleep 0.5
done

# vLLM 0.17 copies the driver's NCCL_* onto every Ray worker; the interface names differ per
# node, so each node keeps its own and vLLM is told not to copy it. Then `vllm serve` runs
# inside the Ray head's container, as vLLM's run_cluster.sh does.
docker exec "$NAME-head" sh -c 'mkdir -p /root/.config/vllm && echo "[\"NCCL_SOCKET_IFNAME\"]" >/root/.config/vllm/ray_non_carry_over_env_vars.json'
docker exec -d "$NAME-head" vllm serve /models/tiny-moe --tensor-parallel-size 2 --pipeline-parallel-size 1 \
  --distributed-executor-backend ray --host 0.0.0.0 --port 8000 --served-model-name tiny-moe

for _ in $(seq 1 600); do
  if curl -fsS -o /dev/null "http://$IP_A:8000/health" && curl -fsS "http://$IP_A:8000/v1/models" | grep -q '"tiny-moe"'; then
    exit 0
  fi
  sleep 0.5
done
echo "not serving" >&2
exit 1
