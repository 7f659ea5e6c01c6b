"""The parity checks' CartPole policy and planner, one recipe each: trained by the graph tests and by the live
benches (``bench/live_bench.py``, ``bench/bench_planner_act.py``), so a bench measures what the tests judge."""
from __future__ import annotations

from pathlib import Path

from calf_agent.planner import PlannerConfig, train_planner
from calf_agent.regimes import train_policy


def train_parity_policy(out: Path) -> Path:
    """PPO on CartPole, 20,000 steps under sim_clean (about 10 s), into ``out``."""
    train_policy('cartpole', 'sim_clean', seed=0, out_dir=out, steps=20_000, regime='baseline', progress=False)
    return out


def train_parity_planner(policy: Path, out: Path) -> Path:
    """A model planner over ``policy`` into ``out``: plans of H = 8 with the adaptive lead, fitted behind
    wifi_degraded on 20,000 transitions."""
    train_planner(policy, out, 'wifi_degraded', plan_horizon=8, seed=0,
                  cfg=PlannerConfig(transitions=20_000, epochs=10), progress=False)
    return out
