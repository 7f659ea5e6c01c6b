"""PolicyRunner: the gate, per-episode features and recurrent state, plans, checkpoints."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from calf_agent.checkpoint import save_checkpoint
from calf_agent.errors import CheckpointError
from calf_agent.policies import LstmAgent, MlpAgent
from calf_agent.policy_runner import PolicyRunner
from calf_core.timing import ReceivedObservation


@dataclass
class RecordingAgent:
    """Returns ``action`` for every head and counts steps in its state (``(tensor [1, 1, 1],)``); records every
    call with its count (None: no state)."""

    obs_dim: int
    n_actions: int = 2
    plan_horizon: int = 1
    action: int = 1
    calls: list[tuple[np.ndarray, Any]] = field(default_factory=list)

    def act(self, obs: np.ndarray, state: Any = None, deterministic: bool = False, seq: Any = None,
            applied_seq: Any = None) -> tuple[np.ndarray, tuple[torch.Tensor]]:
        count = None if state is None else int(state[0].sum())
        self.calls.append((np.array(obs), count))
        shape = (1,) if self.plan_horizon == 1 else (1, self.plan_horizon)
        return np.full(shape, self.action), (torch.full((1, 1, 1), (count or 0) + 1.0),)


def obs(value: float, size: int = 2) -> np.ndarray:
    return np.full(size, value, dtype=np.float32)


def test_single_action_matches_deterministic_agent() -> None:
    torch.manual_seed(0)
    agent = MlpAgent(4, 2)
    runner = PolicyRunner(agent, {'env': 'cartpole'})
    x = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
    expected = int(agent.act(x, deterministic=True)[0][0])
    assert runner.on_observation(ReceivedObservation(0, 0, x)) == [expected]
    assert (runner.obs_size, runner.n_actions, runner.plan_horizon) == (4, 2, 1)


def test_plan_horizon_gives_h_actions() -> None:
    torch.manual_seed(0)
    runner = PolicyRunner(MlpAgent(4, 2, plan_horizon=3), {'plan_horizon': 3})
    plan = runner.on_observation(ReceivedObservation(0, 0, obs(0.1, 4)))
    assert plan is not None and len(plan) == 3 and all(a in (0, 1) for a in plan)


@pytest.mark.parametrize('arrivals, acted', [
    ([(0, 0), (0, 1), (0, 2)], [True, True, True]),
    ([(0, 0), (0, 2), (0, 1)], [True, True, False]),  # reordered: the older one is skipped
    ([(0, 0), (0, 1), (0, 1)], [True, True, False]),  # duplicate
    ([(0, 0), (0, 5), (1, 0), (0, 6)], [True, True, True, False]),  # old episode after a new one
    ([(5, 0), (5, 9), (0, 0, 7), (0, 1, 7)], [True, True, True, True]),  # env restarted: new run id
    ([(5, 0), (5, 9), (0, 4, 7), (0, 2, 7)], [True, True, True, False]),  # restart seen mid-episode
])
def test_gate_acts_on_newest_only(arrivals: list[tuple[int, ...]], acted: list[bool]) -> None:
    runner = PolicyRunner(RecordingAgent(2), {})
    got = [runner.on_observation(ReceivedObservation(ep, seq, obs(seq), run=run[0] if run else 0)) is not None
           for ep, seq, *run in arrivals]
    assert got == acted


def test_terminal_observation_is_not_acted_on() -> None:
    agent = RecordingAgent(2)
    runner = PolicyRunner(agent, {})
    assert runner.on_observation(ReceivedObservation(0, 0, obs(0))) == [1]
    assert runner.on_observation(ReceivedObservation(0, 4, obs(4), terminated=True)) is None
    assert runner.on_observation(ReceivedObservation(0, 3, obs(3))) is None  # older than the terminal one
    assert len(agent.calls) == 1


def test_history_and_state_follow_episodes() -> None:
    """Frames and sent actions as HistoryWrapper builds them; both reset with the LSTM state."""
    agent = RecordingAgent(obs_dim=2 * 2 + 1 * 2, action=1)
    runner = PolicyRunner(agent, {'representation': {'frames': 2, 'actions': 1}})
    runner.on_observation(ReceivedObservation(0, 0, obs(1)))
    runner.on_observation(ReceivedObservation(0, 3, obs(2)))
    runner.on_observation(ReceivedObservation(1, 0, obs(7)))
    features = [call[0].tolist() for call in agent.calls]
    assert features == [[1, 1, 1, 1, 0, 0], [1, 1, 2, 2, 0, 1], [7, 7, 7, 7, 0, 0]]
    assert [call[1] for call in agent.calls] == [None, 1, 0]  # cleared at the new episode


def test_lstm_agent_runs_across_episodes() -> None:
    torch.manual_seed(0)
    runner = PolicyRunner(LstmAgent(4, 3, lstm_size=8), {'env': 'minigrid'})
    plans = [runner.on_observation(ReceivedObservation(ep, seq, obs(0.5, 4))) for ep, seq in [(0, 0), (0, 1), (1, 0)]]
    assert all(plan is not None and len(plan) == 1 and 0 <= plan[0] < 3 for plan in plans)


def test_wrong_observation_size_is_refused() -> None:
    runner = PolicyRunner(RecordingAgent(2), {})
    with pytest.raises(ValueError, match='3 values, the policy expects 2'):
        runner.on_observation(ReceivedObservation(0, 0, obs(0, 3)))


def test_from_checkpoint_round_trip(tmp_path) -> None:
    torch.manual_seed(0)
    agent = MlpAgent(4 * 2 + 2 * 3, 2)
    save_checkpoint(tmp_path / 'ckpt', agent, {'env': 'cartpole', 'representation': {'frames': 2, 'actions': 3}})
    runner = PolicyRunner.from_checkpoint(tmp_path / 'ckpt')
    assert (runner.env, runner.obs_size, runner.deterministic) == ('cartpole', 4, True)
    assert runner.on_observation(ReceivedObservation(0, 0, obs(0.1, 4))) is not None


@pytest.mark.parametrize('meta, match', [
    ({'representation': {'frames': 0}}, 'representation'),
    ({'representation': {'frames': 3}}, 'does not fit'),
    ({'plan_horizon': 2}, 'plan_horizon'),
])
def test_inconsistent_meta_is_a_checkpoint_error(meta: dict, match: str) -> None:
    with pytest.raises(CheckpointError, match=match):
        PolicyRunner(MlpAgent(4, 2), meta)


def test_missing_checkpoint_is_a_checkpoint_error(tmp_path) -> None:
    with pytest.raises(CheckpointError, match='no checkpoint'):
        PolicyRunner.from_checkpoint(tmp_path / 'absent')
