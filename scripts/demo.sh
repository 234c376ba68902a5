#!/usr/bin/env bash
# demo.sh up|down — the lab (Temporal dev server + simulated GPU nodes running the real node
# agent, with the seed's asymmetric networks), then a real deploy to a serving endpoint.
# TOPOLOGY (default spark: the seed's two DGX Sparks on two RoCE rails) picks the lab's
# networks: pair, spark, triangle (three Sparks, no switch) or ring4 (four); lab/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=tpd-demo
DATA=.tpdeploy-data
TOPOLOGY=${TOPOLOGY:-spark}
case "$TOPOLOGY" in
  pair|spark) SPEC=examples/lab.yaml ;;
  triangle) SPEC=examples/lab-triangle.yaml ;;
  ring4) SPEC=examples/lab-ring4.yaml ;;
  *) echo "TOPOLOGY=$TOPOLOGY: want pair, spark, triangle or ring4" >&2; exit 2 ;;
esac

down() {
  # The router belongs to no cluster (no teardown removes it); the lab's removal does.
  bin/labctl down --prefix "$PREFIX"
  echo "demo removed (containers and networks with prefix $PREFIX)"
}

up() {
  mkdir -p "$DATA"
  echo "== lab ($TOPOLOGY): building images if stale, starting Temporal and the nodes"
  bin/labctl up --prefix "$PREFIX" --topology "$TOPOLOGY" --temporal bin/temporal | tee "$DATA/lab.env"
  TEMPORAL_ADDRESS=$(sed -n 's/^TEMPORAL_ADDRESS=//p' "$DATA/lab.env")
  UI=$(sed -n 's/^TEMPORAL_UI=//p' "$DATA/lab.env")
  # The lab's agents trust only specs signed by the lab operator's key (trusted_keys).
  TPDEPLOY_SIGN_KEY_FILE=$(sed -n 's/^TPDEPLOY_SIGN_KEY_FILE=//p' "$DATA/lab.env")
  export TEMPORAL_ADDRESS TPDEPLOY_SIGN_KEY_FILE
  sleep 2 # the agents connect

  # The model is served through the fleet's router (spec router:, internal/router), on the
  # head: one OpenAI endpoint for every model deployed with the same router.
  head=$(sed -n 's/^  - name: //p' "$SPEC" | head -1)
  routed="$DATA/$(basename "$SPEC" .yaml)-routed.yaml"
  { cat "$SPEC"; printf 'router:\n  node: %s\n' "$head"; } >"$routed"
  SPEC=$routed

  echo
  echo "== starter plan -f $SPEC   (no network settings in the spec)"
  bin/starter plan -f "$SPEC"
  echo
  echo "== starter deploy -f $SPEC --watch"
  bin/starter deploy -f "$SPEC" --watch --report-every 1s | tee "$DATA/deploy.out"
  endpoint=$(sed -n 's/^serving: //p' "$DATA/deploy.out" | head -1)
  router=$(sed -n 's/^router: //p' "$DATA/deploy.out" | head -1)
  echo
  echo "== GET $endpoint/v1/models   (the engine)"
  curl -fsS "$endpoint/v1/models"
  echo
  echo
  if [ -n "$router" ]; then
    model=$(sed -n 's/^  served_name: //p' "$SPEC" | head -1)
    echo "== GET $router/v1/models   (the router)"
    curl -fsS "$router/v1/models"
    echo
    echo "== POST $router/v1/completions   (model $model, through the router)"
    curl -fsS "$router/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"model\": \"$model\", \"prompt\": \"hello\", \"max_tokens\": 8}"
    echo
  else
    echo "no router line in the deploy's output: see its warnings" >&2
  fi
  echo
  name=$(sed -n 's/^name: //p' "$SPEC")
  echo "== starter status $name"
  bin/starter status "$name" | tee "$DATA/status.out"
  echo
  echo "endpoint:    $endpoint"
  echo "router:      ${router:-none}   (every model deployed with router: node $head)"
  echo "Temporal UI: $UI   (TEMPORAL_ADDRESS=$TEMPORAL_ADDRESS)"
  echo "again:       make demo TOPOLOGY=$TOPOLOGY        remove: make demo-down"
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
