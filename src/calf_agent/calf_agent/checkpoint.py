"""Checkpoints: ``policy.safetensors`` (weights) plus ``meta.json`` (how to rebuild and provenance).

``meta.json`` holds the caller's metadata (env, regime, representation, seed, steps, ...) at
the top level, plus the reserved keys ``format``, ``agent`` (the agent's ``spec()``),
``versions`` and ``git_revision``.
"""
from __future__ import annotations

import json
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch
from safetensors.torch import load_file, save_file

from calf_agent.errors import CheckpointError
from calf_agent.policies import Agent, make_agent

WEIGHTS = 'policy.safetensors'
META = 'meta.json'
FORMAT = 1
RESERVED = ('format', 'agent', 'versions', 'git_revision')


def versions() -> dict[str, str]:
    """Versions of the libraries that shape a trained policy."""
    return {'python': platform.python_version(), 'torch': torch.__version__,
            'gymnasium': gymnasium.__version__, 'numpy': np.__version__}


def git_revision() -> str:
    """``git rev-parse HEAD`` of this source tree, or ``unknown``."""
    try:
        done = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=Path(__file__).resolve().parent,
                              capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return 'unknown'
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else 'unknown'


def save_checkpoint(out_dir: Path | str, agent: Agent, meta: Mapping[str, Any] | None = None) -> Path:
    """Write ``agent``'s weights and ``meta.json`` into ``out_dir`` (created); return ``out_dir``."""
    meta = dict(meta or {})
    clash = sorted(set(meta) & set(RESERVED))
    if clash:
        raise ValueError(f'checkpoint meta may not set reserved keys {clash}')
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in agent.state_dict().items()}
    save_file(state, str(out / WEIGHTS))
    doc = {**meta, 'format': FORMAT, 'agent': agent.spec(), 'versions': versions(),
           'git_revision': git_revision()}
    (out / META).write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + '\n')
    return out


def load_checkpoint(ckpt_dir: Path | str) -> tuple[Agent, dict[str, Any]]:
    """Rebuild the agent described by ``meta.json`` and load its weights (eval mode).

    Raises CheckpointError with a one-line reason and remedy for anything missing or wrong.
    """
    path = Path(ckpt_dir)
    if not path.is_dir():
        raise CheckpointError(f'no checkpoint at {path}: run `calf train ... --out {path}` first')
    meta = _read_meta(path)
    try:
        agent = make_agent(meta['agent'])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f'{path / META} has no valid agent spec ({_one_line(exc)}): '
                              f'{_retrain(path)}') from None
    state = _read_weights(path)
    _check_state(path, agent, state)
    agent.load_state_dict(state)
    return agent.eval(), meta


def _read_meta(path: Path) -> dict[str, Any]:
    """Parse meta.json, raising CheckpointError if absent or not a JSON object."""
    file = path / META
    if not file.is_file():
        raise CheckpointError(f'{path} has no {META}: {_retrain(path)}')
    try:
        meta = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f'{file} is not valid JSON ({_one_line(exc)}): {_retrain(path)}') from None
    if not isinstance(meta, dict):
        raise CheckpointError(f'{file} holds a {type(meta).__name__}, not an object: {_retrain(path)}')
    if meta.get('format') != FORMAT:
        raise CheckpointError(f'{file} has format {meta.get("format")!r}, this calf reads {FORMAT}: '
                              f'{_retrain(path)}')
    return meta


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    """Load policy.safetensors, raising CheckpointError if absent or unreadable."""
    file = path / WEIGHTS
    if not file.is_file():
        raise CheckpointError(f'{path} has no {WEIGHTS}: {_retrain(path)}')
    try:
        return load_file(str(file))
    except Exception as exc:  # safetensors raises its own error type and OSError/ValueError
        raise CheckpointError(f'{file} is corrupt ({_one_line(exc)}): {_retrain(path)}') from None


def _check_state(path: Path, agent: Agent, state: Mapping[str, torch.Tensor]) -> None:
    """Raise CheckpointError naming the first key or shape that differs from the rebuilt agent."""
    expected = {k: tuple(v.shape) for k, v in agent.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in state.items()}
    missing, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
    shapes = [f'{k} is {found[k]}, expected {expected[k]}' for k in expected
              if k in found and found[k] != expected[k]]
    problems = ([f'missing {missing}'] if missing else []) + ([f'unexpected {extra}'] if extra else []) + shapes
    if problems:
        raise CheckpointError(f'{path / WEIGHTS} does not match {META} ({"; ".join(problems[:3])}): '
                              f'{_retrain(path)}')


def _retrain(path: Path) -> str:
    """The remedy for a broken checkpoint at ``path``."""
    return f'retrain with `calf train ... --out {path}`'


def _one_line(exc: BaseException) -> str:
    """An exception's message squeezed onto one line."""
    return ' '.join(str(exc).split()) or type(exc).__name__
