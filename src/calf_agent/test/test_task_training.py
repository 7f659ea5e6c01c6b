"""A task spec's ``agent`` and ``ppo`` settings over the trainer's defaults."""
from __future__ import annotations

import dataclasses

import pytest

from calf_agent.task_training import for_task
from calf_agent.trainer import cartpole_defaults, minigrid_defaults
from calf_core.envs import env_spec
from calf_core.errors import ConfigError
from calf_core.task_spec import TaskSpec


def test_a_spec_sets_the_agent_and_ppo_settings_it_names_and_keeps_the_rest() -> None:
    base = minigrid_defaults()
    cfg = for_task(env_spec('minigrid_dynamic'), base)
    assert (cfg.agent, cfg.ppo.ent_coef) == ('lstm', 0.1)
    assert cfg.ppo == dataclasses.replace(base.ppo, ent_coef=0.1) and cfg.total_steps == base.total_steps
    assert for_task(env_spec('cartpole'), cartpole_defaults()) == cartpole_defaults()
    assert for_task(TaskSpec('t', 0.1, agent='lstm'), cartpole_defaults()).agent == 'lstm'


@pytest.mark.parametrize('ppo, message', [
    ((('entropy', 0.1),), "task t: unknown ppo setting 'entropy': use learning_rate, anneal_lr"),
    ((('learning_rate', -1.0),), 'task t: bad ppo settings: learning_rate, num_minibatches and update_epochs must '
                                 'be positive'),
])
def test_bad_ppo_settings_are_one_line_config_errors(ppo: tuple[tuple[str, float], ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        for_task(TaskSpec('t', 0.1, ppo=ppo), minigrid_defaults())
    assert '\n' not in str(err.value)
