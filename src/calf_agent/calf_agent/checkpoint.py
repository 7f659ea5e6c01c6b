"""Checkpoints: ``policy.safetensors`` (weights) plus ``meta.json`` (how to rebuild and provenance).

``meta.json`` holds the caller's metadata (env, regime, representation, seed, steps, ...) at
the top level, plus the reserved keys ``format``, ``agent`` (the agent's ``spec()``),
``versions``, ``git_revision`` and ``weights_sha256``.

A save keeps the previous checkpoint until the new one is whole: it writes both new files to
temporary files first, hard-links the previous pair into ``.prev/``, renames the weights and then
``meta.json`` into place, and only then removes ``.prev/``. ``meta.json`` names the SHA-256 of the
weights it belongs to, so a pair mixed by an interrupted save is never loaded: the loader falls
back to ``.prev/`` (saying so on stderr), and refuses in one line if there is none. Loading checks
``meta.json`` against its schema (``checkpoint_meta``) and compares the weights file with an
agent built on torch's ``meta`` device before allocating the real one.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save

from calf_agent.agents import make_agent
from calf_agent.checkpoint_meta import agent_shapes, check_meta
from calf_agent.errors import CheckpointError
from calf_agent.policies import Agent
from calf_core import atomic
from calf_core.errors import ConfigError
from calf_core.yaml_files import read_json

WEIGHTS = 'policy.safetensors'
META = 'meta.json'
PREVIOUS = '.prev'
"""The subdirectory that holds the previous checkpoint while a save is under way."""
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

    The previous checkpoint stays loadable until the new one is whole (see the module doc).
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
    text = (json.dumps(doc, indent=2, sort_keys=True, default=str) + '\n').encode('utf-8')
    with atomic.staged(out / WEIGHTS, weights) as new_weights, atomic.staged(out / META, text) as new_meta:
        _keep_previous(out)
        os.replace(new_weights, out / WEIGHTS)
        os.replace(new_meta, out / META)
        atomic.sync_dir(out)
    shutil.rmtree(out / PREVIOUS, ignore_errors=True)
    return out


def _keep_previous(out: Path) -> None:
    """Hard-link the checkpoint in ``out`` into ``out/.prev`` if it is whole; else keep the ``.prev`` an
    interrupted save left (it is the last whole one)."""
    if not _whole(out):
        return
    fresh = out / f'{PREVIOUS}.new'
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir()
    for name in (WEIGHTS, META):
        try:
            os.link(out / name, fresh / name)
        except OSError:  # a file system without hard links
            shutil.copyfile(out / name, fresh / name)
    atomic.sync_dir(fresh)
    shutil.rmtree(out / PREVIOUS, ignore_errors=True)
    os.replace(fresh, out / PREVIOUS)
    atomic.sync_dir(out)


def _whole(path: Path) -> bool:
    """Whether ``path`` holds a readable meta.json and the weights file it was saved with."""
    if not (path / WEIGHTS).is_file():
        return False
    try:
        _check_hash(path, _read_meta(path))
    except CheckpointError:
        return False
    return True


def load_checkpoint(ckpt_dir: Path | str) -> tuple[Agent, dict[str, Any]]:
    """Rebuild the agent described by ``meta.json`` and load its weights (eval mode).

    Raises CheckpointError with a one-line reason and remedy for anything missing or wrong. If the
    last save into ``ckpt_dir`` did not complete, the checkpoint before it (``.prev/``) is loaded.
    """
    path = Path(ckpt_dir)
    if not path.is_dir():
        raise CheckpointError(f'no checkpoint at {path}: run `calf train ... --out {path}` first')
    try:
        return _load(path)
    except CheckpointError as error:
        if not (path / PREVIOUS / META).is_file():
            raise
        try:
            previous = _load(path / PREVIOUS)
        except CheckpointError:
            raise error from None
    print(f'calf: the last save into {path} did not complete: loaded the checkpoint before it '
          f'({path / PREVIOUS})', file=sys.stderr)
    return previous


def _load(path: Path) -> tuple[Agent, dict[str, Any]]:
    """The agent and meta of the checkpoint in directory ``path`` (see :func:`load_checkpoint`)."""
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
