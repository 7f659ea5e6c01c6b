"""The training settings a task's spec asks for (``agent``, ``ppo``), over the trainer's defaults for its ``algo``."""
from __future__ import annotations

from dataclasses import fields, replace

from calf_agent.ppo import PPOConfig
from calf_agent.trainer import TrainConfig
from calf_core.errors import ConfigError
from calf_core.task_spec import SAC_ALGOS, TaskSpec

PPO_SETTINGS = tuple(f.name for f in fields(PPOConfig))


def for_task(spec: TaskSpec, base: TrainConfig) -> TrainConfig:
    """``base`` with ``spec``'s policy kind and PPO settings (a SAC ``base`` keeps its own); one-line ConfigError
    for an unknown setting."""
    unknown = [name for name, _ in spec.ppo if name not in PPO_SETTINGS]
    if unknown:
        raise ConfigError(f'task {spec.name}: unknown ppo setting {unknown[0]!r}: use {", ".join(PPO_SETTINGS)}')
    if base.algo in SAC_ALGOS:
        if spec.agent not in (None, 'mlp'):
            raise ConfigError(f'task {spec.name}: {base.algo.upper()} trains an mlp policy, and the spec asks for agent '
                              f'{spec.agent}: train it with --algo ppo')
        return base
    try:
        return replace(base, agent=spec.agent or base.agent, ppo=replace(base.ppo, **dict(spec.ppo)))
    except ValueError as err:
        raise ConfigError(f'task {spec.name}: bad ppo settings: {err}') from None
