#!/usr/bin/env bash
# The runs behind the goals of results/distributed.md, one after another, seed by seed. Usage:
#   bench/run_dist_goals.sh OUT_DIR [SEEDS...]        (default seeds: 0 1 2)
# then: python bench/distributed_report.py --goals OUT_DIR
# CartPole, 4 workers, --sync every: int8 deltas (calf train's default) against full snapshots
# (bench/train_dist_snapshots.py), to a deterministic evaluation of 475; InvertedPendulum-v5: single-process
# calf train against calf train --workers 4, both on the task's 200,000-step budget; both tasks again with
# --learner-network wifi_degraded. Each worker runs the task's calf train envs divided among the workers
# (CartPole 8 / 4 = 2, InvertedPendulum-v5 4 / 4 = 1), so that a round (one batch of each worker, one update)
# holds as many env steps as single-process calf train's rollout. Each run is niced, on one torch thread, and evaluated with calf eval
# (20 episodes, sim_clean) at the end. Each seed's runs use their own DDS domain (90 + seed), so that chains of
# several seeds run side by side without hearing each other's learners and workers (same topics, same worker ids).
set -u
out=${1:?usage: bench/run_dist_goals.sh OUT_DIR [SEEDS...]}
shift
seeds=${*:-0 1 2}
mkdir -p "$out"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
run() {  # NAME COMMAND...: one run into OUT_DIR/NAME, skipped when it already finished
  local name=$1
  shift
  [ -f "$out/$name/done" ] && return
  rm -rf "${out:?}/$name"
  uptime > "$out/$name.uptime" 2>/dev/null || true
  echo "$*" > "$out/$name.cmd"
  nice -n 5 "$@" --out "$out/$name" > "$out/$name.log" 2>&1
  uptime >> "$out/$name.uptime"
  nice -n 5 calf eval --policy "$out/$name" --network sim_clean --episodes 20 --json > "$out/$name.eval.json" 2>/dev/null
  touch "$out/$name/done"
}
cartpole=(--workers 4 --envs 2 --steps 150000 --eval-every 4096 --stop-return 475)
pendulum=(--env InvertedPendulum-v5)
for seed in $seeds; do
  domain=(--domain-id $((90 + seed)))
  run "cp_snapshots_s$seed" python bench/train_dist_snapshots.py "${cartpole[@]}" "${domain[@]}" --seed "$seed"
  run "cp_int8_s$seed" calf train --regime baseline --quiet "${cartpole[@]}" "${domain[@]}" --seed "$seed"
  run "ip_single_s$seed" calf train --regime baseline --quiet "${pendulum[@]}" --seed "$seed"
  run "ip_int8_s$seed" calf train --regime baseline --quiet "${pendulum[@]}" --workers 4 --envs 1 --eval-every 50000 \
    "${domain[@]}" --seed "$seed"
  run "cp_wifi_int8_s$seed" calf train --regime baseline --quiet "${cartpole[@]}" "${domain[@]}" --seed "$seed" \
    --learner-network wifi_degraded
  run "ip_wifi_int8_s$seed" calf train --regime baseline --quiet "${pendulum[@]}" --workers 4 --envs 1 --eval-every 50000 \
    "${domain[@]}" --seed "$seed" --learner-network wifi_degraded
done
