"""The pure core of CALF, with no ROS dependency: timing rules, tasks, network models and profiles, traces,
and the virtual-time NetworkedEnv.

Public API: :func:`wrap` puts any gymnasium env behind a network model; ``import calf_core`` registers
``calf/Networked-v0`` for ``gym.make`` and ``gym.make_vec`` (see :mod:`calf_core.api`).
"""
from __future__ import annotations

from calf_core.api import ENV_ID, register, wrap
from calf_core.errors import CalfError, ConfigError, ConfigTypeError
from calf_core.networked_env import NetworkedEnv
from calf_core.task_spec import HoldMode, SuccessRule, TaskSpec

__all__ = ['ENV_ID', 'CalfError', 'ConfigError', 'ConfigTypeError', 'HoldMode', 'NetworkedEnv', 'SuccessRule', 'TaskSpec', 'wrap']

register()
