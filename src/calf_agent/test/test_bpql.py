"""BPQL (``calf_agent.bpql``): the semi-MDP transitions its critic learns from, on hand-made ticks and on a real
networked env; ``--algo bpql`` where it cannot train; and (slow) that it learns behind a delayed link and that its
checkpoint runs where a SAC checkpoint runs."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from calf_agent.bpql import MAX_PENDING, BeliefReplay, SemiMdp, Transition
from calf_agent.checkpoint import load_checkpoint
from calf_agent.evaluate import evaluate_sim
from calf_agent.regimes import train_defaults, train_policy
from calf_agent.sac import SacActor
from calf_agent.training import train
from calf_core.envs import make_networked_env
from calf_core.errors import ConfigError
from calf_core.profiles import load_profile
from calf_core.timing import AppliedAction, ObsRecord, ReceivedObservation

DELAYED = 'results/profiles/constant_2_ticks_50ms.yaml'


class Ticks:
    """Hand-made observations for a SemiMdp: the state after tick t is ``[t]``."""

    def __init__(self, mdp: SemiMdp) -> None:
        self.mdp, self.t = mdp, 0

    def reset(self) -> None:
        self.t = 0
        self.mdp.on_record(ObsRecord(0, 0, 0.0, np.float32([0]), 0.0, False, False, None))

    def tick(self, plan_seq: int, index: int, reward: float, terminated: bool = False, truncated: bool = False
             ) -> None:
        self.t += 1
        applied = AppliedAction(np.float32([0]), plan_seq, index, index < 0)
        self.mdp.on_record(ObsRecord(self.t, 0, self.t * 0.05, np.float32([self.t]), reward, terminated, truncated,
                                     applied))


def features(seq: int) -> np.ndarray:
    return np.float32([100 + seq, 0])


def decide(mdp: SemiMdp, *seqs: int) -> None:
    for seq in seqs:
        mdp.decide(seq, features(seq), np.float32([seq / 10]))


def test_each_applied_action_is_one_step_from_where_it_applied_to_where_the_next_one_applied() -> None:
    gamma = 0.9
    mdp = SemiMdp(gamma)
    ticks = Ticks(mdp)
    ticks.reset()
    ticks.tick(-1, -1, 1.0)  # the initial action: no decision chose it
    decide(mdp, 0, 1)
    ticks.tick(0, 0, 2.0)  # decision 0 applies in state [1]
    ticks.tick(0, -1, 3.0)  # held
    assert mdp.take() == []
    ticks.tick(1, 0, 4.0)  # decision 1 applies in state [3]: decision 0's step ends
    first, = mdp.take()
    assert first.state.tolist() == [1] and first.features.tolist() == features(0).tolist()
    assert first.action.tolist() == pytest.approx([0.0])
    assert (first.ticks, first.reward, first.discount) == (2, pytest.approx(2.0 + gamma * 3.0), pytest.approx(gamma**2))
    assert first.next_state.tolist() == [3] and first.next_features.tolist() == features(1).tolist()
    assert not first.terminated
    ticks.tick(1, -1, 5.0, terminated=True)
    last, = mdp.take()
    assert last.terminated and last.state.tolist() == [3] and last.action.tolist() == pytest.approx([0.1])
    assert (last.ticks, last.reward, last.discount) == (2, pytest.approx(4.0 + gamma * 5.0), pytest.approx(gamma**2))
    assert mdp.dropped_ticks == 1  # the initial action's tick


def test_a_lost_action_makes_no_step_and_its_ticks_stay_with_the_action_that_kept_running() -> None:
    mdp = SemiMdp(1.0)
    ticks = Ticks(mdp)
    ticks.reset()
    decide(mdp, 0, 1, 2)
    ticks.tick(0, 0, 1.0)
    ticks.tick(0, -1, 1.0)  # decision 1's action was lost: 0 runs on
    ticks.tick(2, 0, 1.0)
    step, = mdp.take()
    assert (step.features[0], step.next_features[0], step.ticks, step.reward) == (100, 102, 2, 2.0)
    ticks.tick(1, 0, 1.0)  # an action older than one applied cannot be learned from: decision 1 is gone
    assert mdp.take() == [] and mdp.dropped_ticks == 2  # decision 2's open tick, then the unknown action's


def test_rewards_add_up_exactly_once_and_truncation_drops_the_cut_step() -> None:
    mdp = SemiMdp(1.0)
    ticks = Ticks(mdp)
    rewards = iter(range(1, 100))
    total = 0.0

    def tick(plan_seq: int, index: int, **end: bool) -> None:
        nonlocal total
        reward = float(next(rewards))
        total += reward
        ticks.tick(plan_seq, index, reward, **end)

    ticks.reset()
    tick(-1, -1)
    tick(-1, -1)
    decide(mdp, 0, 1, 2, 3)
    for seq in (0, 1, 3):
        tick(seq, 0)
        tick(seq, -1)
        tick(seq, -1)
    tick(3, -1, truncated=True)
    steps = mdp.take()
    kept = sum(s.reward for s in steps)
    assert [s.ticks for s in steps] == [3, 3] and kept == 3 + 4 + 5 + 6 + 7 + 8
    dropped = total - kept  # the two initial ticks and decision 3's cut step of four ticks
    assert mdp.dropped_ticks == 6 and dropped == 1 + 2 + 9 + 10 + 11 + 12
    ticks.reset()  # a new episode forgets every decision of the last one
    decide(mdp, 5)
    ticks.tick(5, 0, 1.0)
    ticks.tick(5, -1, 1.0, terminated=True)
    step, = mdp.take()
    assert step.terminated and step.state.tolist() == [0] and step.ticks == 2


def test_decisions_waiting_for_their_action_are_bounded() -> None:
    mdp = SemiMdp(0.99)
    ticks = Ticks(mdp)
    ticks.reset()
    decide(mdp, *range(MAX_PENDING + 10))
    ticks.tick(0, 0, 1.0)  # the oldest decisions were taken as lost
    ticks.tick(MAX_PENDING + 9, 0, 1.0)
    assert mdp.take() == [] and mdp.dropped_ticks == 1


@pytest.mark.parametrize('network', ['wifi_degraded', DELAYED])
def test_on_a_real_networked_env_the_steps_chain_and_the_ticks_add_up(network: str) -> None:
    mdp = SemiMdp(1.0)
    env = make_networked_env('InvertedPendulum-v5', load_profile(network), seed=3)
    records: list[ObsRecord] = []

    def listen(record: ObsRecord) -> None:
        records.append(record)
        mdp.on_record(record)

    env.tick_listener = listen
    rng = np.random.default_rng(0)
    steps: list[Transition] = []
    episode_return, ticks, episodes = 0.0, 0, 0
    obs, info = env.reset(seed=1)
    while episodes < 3:
        action = rng.uniform(-0.3, 0.3, 1).astype(np.float32)
        mdp.decide(int(info['obs_seq']), obs, action)
        obs, reward, terminated, truncated, info = env.step(action)
        episode_return += reward
        ticks += info['ticks']
        steps += mdp.take()
        if terminated or truncated:
            episodes += 1
            if episodes < 3:  # a reset runs the next episode's first ticks
                obs, info = env.reset()
    assert len(steps) > 10
    states = {r.obs.tobytes() for r in records}
    assert all(s.state.tobytes() in states for s in steps)  # true states, not delivered observations
    for before, after in zip(steps, steps[1:]):
        if not before.terminated:  # the next step starts where this one ended
            assert before.next_state.tolist() == after.state.tolist()
            assert before.next_features.tolist() == after.features.tolist()
    assert sum(s.ticks for s in steps) + mdp.dropped_ticks == ticks
    assert sum(s.reward for s in steps) == pytest.approx(episode_return - mdp.dropped_ticks)  # reward 1 a tick
    assert sum(s.terminated for s in steps) == episodes  # the random actions let the pole fall every time


def test_the_replay_ring_keeps_the_newest_transitions() -> None:
    replay = BeliefReplay(3, feature_dim=2, state_dim=1, action_dim=1)
    for i in range(5):
        replay.add(Transition(np.float32([i, i]), np.float32([i]), np.float32([0]), float(i), 0.5,
                              np.float32([i, i]), np.float32([i]), False, 1))
    batch = replay.sample(64, np.random.default_rng(0))
    assert replay.size == 3 and set(batch['reward'].tolist()) == {2.0, 3.0, 4.0}
    assert batch['discount'].tolist() == [0.5] * 64 and batch['features'].shape == (64, 2)


def test_bpql_needs_single_box_actions() -> None:
    with pytest.raises(ConfigError, match=r"^BPQL trains continuous actions \(a Box of shape \(A,\)\), and cartpole's "
                                          r'actions are Discrete\(2\): train it with --algo ppo$'):
        train_defaults('cartpole', 'bpql')
    with pytest.raises(ConfigError, match='BPQL trains single actions: drop --plan-horizon'):
        train_policy('Pendulum-v1', 'sim_clean', 0, Path('unused'), steps=10, plan_horizon=2, algo='bpql')
    cfg = train_defaults('Pendulum-v1', 'bpql')
    assert (cfg.algo, cfg.agent, cfg.num_envs) == ('bpql', 'mlp', 1)
    with pytest.raises(ValueError, match='use calf_agent.bpql_training.train_bpql'):
        train(cfg, lambda n: None, Path('unused'))


@pytest.mark.parametrize('argv, message', [
    (['--env', 'cartpole', '--algo', 'bpql'],
     "calf train: error: BPQL trains continuous actions (a Box of shape (A,)), and cartpole's actions are "
     'Discrete(2): train it with --algo ppo'),
    (['--env', 'Pendulum-v1', '--algo', 'bpql', '--workers', '2'],
     'calf train: error: --algo bpql trains in one process: drop --workers, or use --algo ppo'),
    (['--env', 'Pendulum-v1', '--algo', 'bpql', '--planner', 'model', '--plan-horizon', '4'],
     'calf train: error: --planner model plans over a PPO or SAC base policy, not BPQL: use --algo sac or ppo'),
])
def test_calf_train_algo_bpql_where_it_cannot_train_is_one_line_and_exit_2(
        argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from calf_bringup import cli
    assert cli.main(['train', *argv, '--steps', '100', '--out', str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(message), err
    assert not (tmp_path / 'out').exists()


def test_a_spec_file_may_say_bpql(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from calf_bringup import cli
    spec = tmp_path / 'cart.yaml'
    spec.write_text('env: CartPole-v1\ndt: 0.02\nalgo: bpql\n')
    assert cli.main(['train', '--env-spec', str(spec), '--steps', '100', '--out', str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and 'BPQL trains continuous actions' in err, err


def mean_return(policy: Path, network: str) -> float:
    return float(np.mean(evaluate_sim(policy, load_profile(network), episodes=10, seed=100)['returns']))


def random_return(network: str) -> float:
    """The mean return of uniform random actions over 10 episodes of InvertedPendulum-v5 behind ``network``."""
    env = make_networked_env('InvertedPendulum-v5', load_profile(network), seed=100)
    rng = np.random.default_rng(100)
    returns = []
    for episode in range(10):
        env.reset(seed=100 + episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(rng.uniform(-3.0, 3.0, 1).astype(np.float32))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


@pytest.mark.slow
@pytest.mark.timeout(1200)  # 3,000 updates: minutes on a loaded machine
def test_bpql_learns_behind_a_delayed_link_and_runs_where_sac_runs(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from calf_agent.policy_runner import PolicyRunner
    from calf_bringup import cli
    out = tmp_path / 'bpql'
    assert cli.main(['train', '--env', 'InvertedPendulum-v5', '--algo', 'bpql', '--network', DELAYED,
                     '--steps', '4000', '--seed', '0', '--quiet', '--out', str(out)]) == 0
    assert json.loads(capsys.readouterr().out)['steps'] == 4000
    agent, meta = load_checkpoint(out)
    assert isinstance(agent, SacActor) and (meta['algo'], meta['method']) == ('bpql', 'bpql')
    assert meta['representation']['actions'] > 0  # the actor acts on the delayed observation and actions in flight
    trained, random = mean_return(out, DELAYED), random_return(DELAYED)
    assert trained > 3 * random, (trained, random)
    assert cli.main(['eval', '--policy', str(out), '--network', DELAYED, '--episodes', '10', '--seed', '100',
                     '--json']) == 0
    report = json.loads(capsys.readouterr().out)
    assert math.isclose(report['mean_return'], trained, rel_tol=1e-6)
    runner = PolicyRunner(agent, meta)  # what the policy node runs
    assert runner.continuous and runner.obs_size == 4
    plan = runner.on_observation(ReceivedObservation(0, 0, np.zeros(4, np.float32)))
    assert plan.shape == (1, 1) and -3.0 <= plan[0, 0] <= 3.0


@pytest.mark.slow
def test_each_robots_table_trains_a_bpql_row_after_augmented_sac(tmp_path: Path) -> None:
    from calf_bringup.experiment import TrainJob, run_train
    from calf_bringup.experiment_specs import TABLE_GROUPS, TABLES
    for name in TABLE_GROUPS['robots']:
        names = [row.name for row in TABLES[name].rows]
        row = TABLES[name].rows[names.index('Augmented SAC') + 1]
        assert (row.name, row.network, row.algo) == ('BPQL (SAC)', 'full_net_aware', 'bpql')
    job = TrainJob('Pendulum-v1', row, 0, 300)  # random actions only: the row's plumbing, not its learning
    assert job.key == 'Pendulum-v1-full_net_aware-h1-bpql-300steps-seed0'
    agent, meta = load_checkpoint(run_train(job, tmp_path))
    assert isinstance(agent, SacActor) and (meta['algo'], meta['method'], meta['regime']) == ('bpql', 'bpql',
                                                                                            'BPQL (SAC)')
