#!/usr/bin/env bash
# Distributed CartPole runs behind results/distributed.md: 4 local workers under each sync policy,
# the same across a wifi_degraded learner link, and the scaling runs. Usage:
#   bench/run_distributed.sh OUT_DIR [SEEDS...]        (default seeds: 0 1 2)
# then: python bench/distributed_report.py OUT_DIR > results/distributed.md
set -u
out=${1:?usage: bench/run_distributed.sh OUT_DIR [SEEDS...]}
shift
seeds=${*:-0 1 2}
mkdir -p "$out"
train() {  # NAME ARGS...: one run, skipped when it already finished
  local name=$1
  shift
  [ -f "$out/$name/done" ] && return
  uptime > "$out/$name.uptime" 2>/dev/null || true
  calf train --regime baseline --quiet --out "$out/$name" "$@" > "$out/$name.log" 2>&1
  uptime >> "$out/$name.uptime"
  calf eval --policy "$out/$name" --network sim_clean --episodes 20 --json > "$out/$name.eval.json" 2>/dev/null
  touch "$out/$name/done"
}
solve=(--workers 4 --steps 150000 --eval-every 10000 --stop-return 475)
for seed in $seeds; do
  for sync in every period:4 aps:0.05 aps:0.2; do
    train "sync_${sync/:/_}_s$seed" "${solve[@]}" --sync "$sync" --seed "$seed"
  done
  if [ "$seed" = "${seeds%% *}" ]; then
    for sync in every aps:0.05; do
      train "wifi_${sync/:/_}_s$seed" "${solve[@]}" --sync "$sync" --seed "$seed" --learner-network wifi_degraded
    done
    for workers in 1 2 4; do
      train "scale_w${workers}_s$seed" --workers "$workers" --steps 30000 --eval-every 1000000 --sync every --seed "$seed"
    done
    start=$(date +%s.%N)
    train "scale_single_s$seed" --steps 30000 --seed "$seed"
    echo "$start $(date +%s.%N)" > "$out/scale_single_s$seed.time"
  fi
done
