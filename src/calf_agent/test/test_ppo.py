"""PPO math: GAE, the clipped loss, the rollout buffer, and the policy heads it relies on."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from calf_agent.agents import make_agent
from calf_agent.policies import LstmAgent, MlpAgent, categorical_heads
from calf_agent.ppo import PPOConfig, RolloutBuffer, compute_gae, ppo_loss
from calf_agent.seeding import seed_everything


def test_compute_gae_matches_hand_computed_example() -> None:
    # env 0: obs[2] starts a new episode, so step 1 does not bootstrap; the rollout ends mid-episode.
    # env 1: no resets inside, but the observation after the rollout starts a new episode.
    rewards = torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    values = torch.tensor([[0.5, 0.0], [1.0, 0.0], [1.5, 0.0]])
    dones = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    advantages, returns = compute_gae(rewards, values, dones, next_value=torch.tensor([2.0, 5.0]),
                                      next_done=torch.tensor([0.0, 1.0]), gamma=0.9, gae_lambda=0.5)
    # env 0: t2: 3 + .9*2 - 1.5 = 3.3; t1: 2 - 1 = 1 (cut); t0: 1 + .9*1 - .5 + .45*1 = 1.85
    # env 1: t2: 1 (next obs is a reset); t1: 1 + .45*1 = 1.45; t0: 1 + .45*1.45 = 1.6525
    expected = torch.tensor([[1.85, 1.6525], [1.0, 1.45], [3.3, 1.0]])
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, expected + values)


def test_compute_gae_lambda_one_is_discounted_return_minus_value() -> None:
    rewards = torch.tensor([[1.0], [2.0], [4.0]])
    values = torch.tensor([[3.0], [1.0], [2.0]])
    advantages, returns = compute_gae(rewards, values, torch.zeros(3, 1), torch.tensor([10.0]),
                                      torch.tensor([0.0]), gamma=0.5, gae_lambda=1.0)
    discounted = torch.tensor([[1 + 0.5 * 2 + 0.25 * 4 + 0.125 * 10], [2 + 0.5 * 4 + 0.25 * 10],
                               [4 + 0.5 * 10]])
    torch.testing.assert_close(returns, discounted)
    torch.testing.assert_close(advantages, discounted - values)


def _policy_loss_and_grad(ratio: float, advantage: float) -> tuple[float, float]:
    new_logprob = torch.tensor([math.log(ratio)], requires_grad=True)
    value = torch.zeros(1)
    loss, _ = ppo_loss(new_logprob, torch.zeros(1), torch.tensor([advantage]), value, value, value,
                       torch.zeros(1), clip_coef=0.2, vf_coef=0.5, ent_coef=0.0, norm_adv=False)
    loss.backward()
    return loss.item(), new_logprob.grad.item()


@pytest.mark.parametrize(('ratio', 'advantage', 'loss', 'clipped'), [
    (1.5, 1.0, -1.2, True),    # good action pushed past 1 + eps: no further push
    (0.5, 1.0, -0.5, False),   # good action made rarer: gradient pulls it back
    (0.5, -1.0, 0.8, True),    # bad action pushed below 1 - eps: no further push
    (1.5, -1.0, 1.5, False),   # bad action made likelier: gradient pushes it down
])
def test_ppo_loss_clips_only_the_profitable_side(ratio: float, advantage: float, loss: float,
                                                  clipped: bool) -> None:
    got_loss, grad = _policy_loss_and_grad(ratio, advantage)
    assert got_loss == pytest.approx(loss)
    assert (grad == 0.0) == clipped


def test_ppo_loss_value_clipping_and_stats() -> None:
    new_value = torch.tensor([2.0, 2.0], requires_grad=True)
    old_value, returns, logprob = torch.zeros(2), torch.full((2,), 3.0), torch.zeros(2)
    args = dict(new_logprob=logprob, old_logprob=logprob, advantages=torch.tensor([1.0, -1.0]),
                old_value=old_value, returns=returns, entropy=torch.tensor([0.7, 0.5]),
                clip_coef=0.2, vf_coef=0.5, ent_coef=0.1)
    loss, stats = ppo_loss(new_value=new_value, clip_vloss=False, **args)
    assert stats['value_loss'] == pytest.approx(0.5 * 1.0)
    # clipped value: 0 + clamp(2, -.2, .2) = .2 -> (3 - .2)^2 = 7.84 is the larger error
    loss_clipped, stats_clipped = ppo_loss(new_value=new_value, clip_vloss=True, **args)
    assert stats_clipped['value_loss'] == pytest.approx(0.5 * 7.84)
    assert stats['entropy'] == pytest.approx(0.6)
    assert stats['approx_kl'] == 0.0 and stats['clipfrac'] == 0.0
    assert loss.item() == pytest.approx(stats['policy_loss'] - 0.1 * 0.6 + 0.5 * 0.5)
    assert set(stats) == {'policy_loss', 'value_loss', 'entropy', 'approx_kl', 'old_approx_kl',
                          'clipfrac'}


def _filled_buffer(num_steps: int = 4, num_envs: int = 6) -> RolloutBuffer:
    """A buffer whose obs[t, n] == [t * num_envs + n] identifies each slot."""
    buffer = RolloutBuffer(num_steps, num_envs, obs_dim=1)
    for t in range(num_steps):
        ids = torch.arange(num_envs, dtype=torch.float32) + t * num_envs
        buffer.add(ids.unsqueeze(1), torch.zeros(num_envs), ids.long(), ids, ids, ids.numpy())
    return buffer


def test_buffer_shapes_and_overflow() -> None:
    buffer = _filled_buffer()
    assert buffer.full
    assert buffer.obs.shape == (4, 6, 1) and buffer.actions.shape == (4, 6)
    assert buffer.rewards.dtype == torch.float32
    with pytest.raises(IndexError, match='reset'):
        buffer.add(torch.zeros(6, 1), torch.zeros(6), torch.zeros(6), torch.zeros(6), torch.zeros(6),
                   np.zeros(6))
    buffer.reset()
    assert not buffer.full
    assert RolloutBuffer(3, 2, 5, action_shape=(4,)).actions.shape == (3, 2, 4)


def test_minibatches_cover_every_step_once() -> None:
    buffer = _filled_buffer()
    flat = buffer.values.clone()
    batches = list(buffer.minibatches(flat, flat, 3, np.random.default_rng(0)))
    assert [len(mb.obs) for mb in batches] == [8, 8, 8]
    seen = torch.cat([mb.obs.flatten() for mb in batches])
    assert sorted(seen.tolist()) == list(range(24))
    for mb in batches:  # every field is indexed by the same permutation
        torch.testing.assert_close(mb.obs.flatten(), mb.advantages)
        torch.testing.assert_close(mb.actions.float(), mb.returns)


def test_minibatches_by_env_keep_whole_sequences_time_major() -> None:
    buffer = _filled_buffer()
    flat = buffer.values.clone()
    batches = list(buffer.minibatches(flat, flat, 3, np.random.default_rng(0), by_env=True))
    assert sorted(torch.cat([mb.env_idx for mb in batches]).tolist()) == list(range(6))
    for mb in batches:
        envs = mb.env_idx.tolist()
        expected = [t * 6 + n for t in range(4) for n in envs]
        assert mb.obs.flatten().tolist() == expected


def test_ppo_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match='gamma'):
        PPOConfig(gamma=1.5)
    with pytest.raises(ValueError, match='num_minibatches'):
        PPOConfig(num_minibatches=0)


def test_categorical_plan_heads_shapes_and_logprob() -> None:
    seed_everything(0)
    logits = torch.randn(5, 3 * 4)
    action, logprob, entropy = categorical_heads(logits, plan_horizon=3)
    assert action.shape == (5, 3) and logprob.shape == (5,) and entropy.shape == (5,)
    per_head = logits.view(5, 3, 4).log_softmax(-1)
    expected = per_head.gather(-1, action.unsqueeze(-1)).squeeze(-1).sum(-1)
    torch.testing.assert_close(logprob, expected)
    _, again, _ = categorical_heads(logits, 3, action)
    torch.testing.assert_close(again, logprob)
    greedy = categorical_heads(logits, 3, deterministic=True)[0]
    assert torch.equal(greedy, per_head.argmax(-1))


def test_mlp_agent_shapes() -> None:
    seed_everything(0)
    agent = MlpAgent(4, 2)
    action, logprob, entropy, value = agent.get_action_and_value(torch.randn(7, 4))
    assert action.shape == logprob.shape == entropy.shape == value.shape == (7,)
    actions, state = agent.act(np.zeros(4, dtype=np.float32), deterministic=True)
    assert actions.shape == (1,) and state is None


def test_lstm_resets_state_where_done_like_a_step_loop() -> None:
    seed_everything(0)
    agent = LstmAgent(obs_dim=5, n_actions=3, lstm_size=8)
    steps, batch = 6, 2
    x = torch.randn(steps * batch, 5)
    done = torch.zeros(steps, batch)
    done[2, 0] = done[4, 1] = 1.0
    state = (torch.randn(1, batch, 8), torch.randn(1, batch, 8))
    out, (h, c) = agent.get_states(x, state, done)
    # reference: CleanRL's one-step-at-a-time loop
    ref_h, ref_c, outputs = *state, []
    hidden = agent.encoder(x).view(steps, batch, -1)
    for t in range(steps):
        keep = (1.0 - done[t]).view(1, -1, 1)
        o, (ref_h, ref_c) = agent.lstm(hidden[t:t + 1], (keep * ref_h, keep * ref_c))
        outputs.append(o)
    torch.testing.assert_close(out, torch.cat(outputs).flatten(0, 1))
    torch.testing.assert_close(h, ref_h)
    torch.testing.assert_close(c, ref_c)


def test_lstm_act_carries_state() -> None:
    seed_everything(0)
    agent = LstmAgent(obs_dim=5, n_actions=3, lstm_size=8)
    obs = np.ones((2, 5), dtype=np.float32)
    actions, state = agent.act(obs)
    assert actions.shape == (2,) and state[0].shape == (1, 2, 8)
    _, state2 = agent.act(obs, state)
    assert not torch.equal(state2[0], state[0])


def test_masked_plan_logprob_sums_only_executed_elements_and_stops_their_gradient() -> None:
    seed_everything(0)
    logits = torch.randn(2, 3 * 2, requires_grad=True)
    action = torch.tensor([[0, 1, 1], [1, 0, 0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    _, logprob, _ = categorical_heads(logits, 3, action, mask=mask)
    per_head = logits.detach().view(2, 3, 2).log_softmax(-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(logprob.detach(), torch.stack([per_head[0, 0] + per_head[0, 2], torch.tensor(0.0)]))
    loss, _ = ppo_loss(logprob, logprob.detach() - 0.1, torch.tensor([1.0, -1.0]), torch.zeros(2), torch.zeros(2),
                       torch.zeros(2), torch.zeros(2), 0.2, 0.5, 0.0, norm_adv=False)
    loss.backward()
    grad = logits.grad.view(2, 3, 2).abs().sum(-1)
    assert torch.equal(grad > 0, mask.bool()), 'only executed elements receive a policy gradient'


def test_mark_executed_ors_lagged_rows_into_earlier_steps() -> None:
    buffer = RolloutBuffer(3, 1, 1, action_shape=(2,), track_executed=True)
    assert not buffer.masks.any()
    executed = [np.array([[[0, 0], [0, 0], [0, 0]]]),  # step 0: nothing ran yet
                np.array([[[0, 0], [0, 1], [0, 0]]]),  # step 1: element 1 of step 0's plan ran
                np.array([[[1, 0], [0, 0], [1, 0]]])]  # step 2: element 0 of its own plan and of step 0's
    for _, rows in enumerate(executed):
        buffer.add(torch.zeros(1, 1), torch.zeros(1), torch.zeros(1, 2), torch.zeros(1), torch.zeros(1),
                   np.zeros(1))
        buffer.mark_executed(rows)
    assert buffer.masks[:, 0].tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]]
    mb = next(buffer.minibatches(buffer.values, buffer.values, 1, np.random.default_rng(0)))
    assert mb.masks.shape == (3, 2)
    buffer.reset()
    assert not buffer.masks.any()
    assert RolloutBuffer(2, 2, 1, action_shape=(3,)).masks.all(), 'untracked masks count every element'


def test_time_conditioned_plan_head_scores_element_j_at_offset_j_plus_one_over_h() -> None:
    seed_everything(0)
    agent = MlpAgent(4, 2, hidden=(8,), plan_horizon=3, plan_head='time')
    x = torch.randn(5, 4)
    logits = agent.logits(x)
    assert logits.shape == (5, 6)
    for j in range(3):
        expected = agent.actor(torch.cat([x, torch.full((5, 1), (j + 1) / 3)], -1))
        torch.testing.assert_close(logits.view(5, 3, 2)[:, j], expected)
    twin = make_agent(agent.spec())
    twin.load_state_dict(agent.state_dict())
    torch.testing.assert_close(twin.logits(x), logits)
    with pytest.raises(ValueError, match='plan_head'):
        MlpAgent(4, 2, plan_head='recurrent')
