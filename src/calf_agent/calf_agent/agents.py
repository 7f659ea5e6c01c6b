"""The agent registry: each kind of policy network a checkpoint can hold, by the ``kind`` its spec names.

A checkpoint's ``meta.json`` says which agent it holds as a spec dict (``agent.spec()``); ``make_agent`` builds
that agent (untrained) from the spec. A kind not in ``AGENTS`` is refused: nothing read from a file chooses
other code.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from calf_agent.gaussian import GaussianAgent
from calf_agent.plan_agent import PlanningAgent
from calf_agent.policies import LstmAgent, MlpAgent
from calf_agent.sac import SacActor


def _with_hidden(cls: type[nn.Module]) -> Callable[..., nn.Module]:
    """A builder of ``cls`` from spec arguments, whose ``hidden`` layer sizes JSON holds as a list."""
    return lambda **args: cls(**{**args, 'hidden': tuple(args['hidden'])})


def _planner(**args: Any) -> PlanningAgent:
    """A model planner; its ``base`` is the spec of the policy it plans with."""
    return PlanningAgent(**{**args, 'base': make_agent(args['base'])})


AGENTS: dict[str, Callable[..., nn.Module]] = {
    'mlp': _with_hidden(MlpAgent),
    'lstm': _with_hidden(LstmAgent),
    'gaussian': _with_hidden(GaussianAgent),
    'sac': _with_hidden(SacActor),
    'model_plan': _planner,
}


def make_agent(spec: dict[str, Any]) -> Any:
    """Build an agent from its ``spec()`` dict (raises KeyError/TypeError/ValueError if malformed)."""
    args = dict(spec)
    kind = args.pop('kind')
    if not isinstance(kind, str) or kind not in AGENTS:
        raise ValueError(f'unknown agent kind {kind!r}: choose one of {", ".join(AGENTS)}')
    return AGENTS[kind](**args)
