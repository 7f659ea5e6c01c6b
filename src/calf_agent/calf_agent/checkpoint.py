"""Checkpoints: ``policy.safetensors`` (weights) plus ``meta.json`` (how to rebuild and provenance).

``meta.json`` holds the caller's metadata (env, regime, representation, seed, steps, ...) at
the top level, plus the reserved keys ``format``, ``agent`` (the agent's ``spec()``),
``versions``, ``git_revision`` and ``weights_sha256``.

A save replaces each file atomically, the weights first and ``meta.json`` last; ``meta.json``
names the SHA-256 of the weights it belongs to, so a save interrupted between the two files
is refused at load instead of pairing new weights with old provenance. Loading checks
``meta.json`` against its schema (``checkpoint_meta``) and compares the weights file with an
agent built on torch's ``meta`` device before allocating the real one.
"""
from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save

from calf_agent.checkpoint_meta import agent_shapes, check_meta
from calf_agent.errors import CheckpointError
from calf_agent.policies import Agent, make_agent
from calf_core import atomic
from calf_core.errors import ConfigError
from calf_core.yaml_files import read_json

WEIGHTS = 'policy.safetensors'
META = 'meta.json'
FORMAT = 1
MAX_META_BYTES = 1 << 20
RESERVED = ('format', 'agent', 'versions', 'git_revision', 'weights_sha256')


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
    """Write ``agent``'s weights and ``meta.json`` into ``out_dir`` (created, not its parents); return it.

    Each file is replaced atomically, weights first; an interrupted save is detected at load.
    """
    meta = dict(meta or {})
    clash = sorted(set(meta) & set(RESERVED))
    if clash:
        raise ValueError(f'checkpoint meta may not set reserved keys {clash}')
    out = Path(out_dir)
    atomic.make_out_dir(out, 'checkpoint directory')
    weights = save({k: v.detach().contiguous() for k, v in agent.state_dict().items()})
    doc = {**meta, 'format': FORMAT, 'agent': agent.spec(), 'versions': versions(),
           'git_revision': git_revision(), 'weights_sha256': hashlib.sha256(weights).hexdigest()}
    atomic.write_bytes(out / WEIGHTS, weights)
    atomic.write_text(out / META, json.dumps(doc, indent=2, sort_keys=True, default=str) + '\n')
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
        shapes = agent_shapes(meta['agent'])  # allocates nothing: the shapes alone are compared with the file
    except CheckpointError as exc:
        raise CheckpointError(f'{path / META} {exc}: {_retrain(path)}') from None
    _check_state(path, shapes, _weight_shapes(path))
    _check_hash(path, meta)
    agent = make_agent(meta['agent'])
    agent.load_state_dict(_read_weights(path))
    return agent.eval(), meta


def _read_meta(path: Path) -> dict[str, Any]:
    """Parse meta.json, raising CheckpointError if absent or not a JSON object."""
    file = path / META
    if not file.is_file():
        raise CheckpointError(f'{path} has no {META}: {_retrain(path)}')
    try:
        meta = read_json(file, 'checkpoint meta', MAX_META_BYTES)
    except ConfigError as exc:
        raise CheckpointError(f'{exc}: {_retrain(path)}') from None
    if not isinstance(meta, dict):
        raise CheckpointError(f'{file} holds a {type(meta).__name__}, not an object: {_retrain(path)}')
    if meta.get('format') != FORMAT:
        raise CheckpointError(f'{file} has format {meta.get("format")!r}, this calf reads {FORMAT}: '
                              f'{_retrain(path)}')
    try:
        check_meta(meta, str(file))
    except CheckpointError as exc:
        raise CheckpointError(f'{file}: {exc}: {_retrain(path)}') from None
    return meta


def _weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """The tensor shapes in policy.safetensors, read from its header alone."""
    file = path / WEIGHTS
    if not file.is_file():
        raise CheckpointError(f'{path} has no {WEIGHTS}: {_retrain(path)}')
    try:
        with safe_open(str(file), 'pt') as stream:
            return {key: tuple(stream.get_slice(key).get_shape()) for key in stream.keys()}  # noqa: SIM118
    except Exception as exc:  # safetensors raises its own error type and OSError/ValueError
        raise CheckpointError(f'{file} is corrupt ({_one_line(exc)}): {_retrain(path)}') from None


def _check_hash(path: Path, meta: dict[str, Any]) -> None:
    """Refuse weights that are not the ones meta.json was saved with (checkpoints older than the hash pass)."""
    expected = meta.get('weights_sha256')
    if expected is None:
        return
    digest = hashlib.sha256()
    with (path / WEIGHTS).open('rb') as stream:
        for block in iter(lambda: stream.read(1 << 20), b''):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise CheckpointError(f'{path / WEIGHTS} is not the file {META} was saved with (an interrupted or mixed '
                              f'save): {_retrain(path)}')


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    """Load policy.safetensors, raising CheckpointError if absent or unreadable."""
    file = path / WEIGHTS
    if not file.is_file():
        raise CheckpointError(f'{path} has no {WEIGHTS}: {_retrain(path)}')
    try:
        return load_file(str(file))
    except Exception as exc:  # safetensors raises its own error type and OSError/ValueError
        raise CheckpointError(f'{file} is corrupt ({_one_line(exc)}): {_retrain(path)}') from None


def _check_state(path: Path, expected: Mapping[str, tuple[int, ...]], found: Mapping[str, tuple[int, ...]]) -> None:
    """Raise CheckpointError naming the first key or shape that differs from the rebuilt agent."""
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
