"""A SAC or BPQL training's snapshot, so that a stopped run continues where it was (``calf train --resume``).

``train_state.safetensors`` in the run's output dir, replaced whole (a killed process leaves the old file
or the new one), holds the actor (its observation normaliser included), the critics and their targets, log
alpha, both optimisers' state (``<optimiser>.<index>.<name>``, as the distributed learner's state), BPQL's
state normaliser, the filled rows of the replay buffer (``buffer.<field>``) and torch's RNG state; its
metadata (JSON) holds the counters, the finished episodes, the progress.csv rows so far, the numpy
generator's state and the run's settings (a snapshot of a run with other settings is refused). It is written
at a progress row every ``EVERY_STEPS`` env steps or ``EVERY_SECONDS`` of wall time, whichever comes first,
and removed once the final checkpoint is saved. No pickle: tensors in safetensors, the rest in JSON.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from calf_agent.sac import SacLearner
from calf_agent.trainer import Episodes, TrainConfig
from calf_core import atomic
from calf_core.errors import ConfigError

SNAPSHOT = 'train_state.safetensors'
FORMAT = 1
EVERY_STEPS = 10_000
"""Env steps between snapshots at most."""
EVERY_SECONDS = 300.0
"""Wall-clock seconds between snapshots at most (checked at each progress row)."""
_META_KEY = 'calf_train_state'


def check_resume(out_dir: Path, resume: bool) -> None:
    """ConfigError unless ``resume`` matches whether ``out_dir`` holds a snapshot."""
    path = Path(out_dir) / SNAPSHOT
    if resume and not path.is_file():
        raise ConfigError(f'--resume: {out_dir} holds no training snapshot ({SNAPSHOT}): train without --resume')
    if not resume and path.is_file():
        raise ConfigError(f'{out_dir} holds the snapshot of an interrupted training ({path}): add --resume to '
                          'continue it, or delete it to train from the start')


def has_snapshot(out_dir: Path) -> bool:
    return (Path(out_dir) / SNAPSHOT).is_file()


def remove_snapshot(out_dir: Path) -> None:
    """Remove the snapshot of a finished run (and temporary files a killed run left beside its logs)."""
    for stale in [Path(out_dir) / SNAPSHOT, *Path(out_dir).glob('.progress.csv.*.tmp'),
                  *Path(out_dir).glob(f'.{SNAPSHOT}.*.tmp')]:
        stale.unlink(missing_ok=True)


class Snapshots:
    """When the next snapshot is due, and writing it."""

    def __init__(self, out_dir: Path, every_steps: int = EVERY_STEPS, every_seconds: float = EVERY_SECONDS) -> None:
        if every_steps < 1 or every_seconds <= 0:
            raise ConfigError(f'snapshots need a positive interval, got {every_steps} steps and {every_seconds} s')
        self.path = Path(out_dir) / SNAPSHOT
        self.every_steps, self.every_seconds = every_steps, every_seconds
        self.restart(0)

    def restart(self, global_step: int) -> None:
        """Count the intervals from now, at ``global_step``."""
        self._last_step, self._last_time = global_step, time.monotonic()

    def due(self, global_step: int) -> bool:
        return (global_step - self._last_step >= self.every_steps
                or time.monotonic() - self._last_time >= self.every_seconds)

    def write(self, tensors: Mapping[str, Tensor], state: Mapping[str, Any], global_step: int) -> None:
        """Replace the snapshot whole: written beside it, synced, then renamed over it."""
        tmp = self.path.with_name(f'.{SNAPSHOT}.{os.getpid()}.tmp')
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(tmp),
                  metadata={_META_KEY: json.dumps({'format': FORMAT, **state})})
        os.chmod(tmp, 0o644)
        with open(tmp, 'rb') as stream:
            os.fsync(stream.fileno())
        os.replace(tmp, self.path)
        atomic.sync_dir(self.path.parent)
        self.restart(global_step)


def capture(learner: SacLearner, buffer: Any, arrays: Mapping[str, np.ndarray], norms: Mapping[str, nn.Module],
            rng: np.random.Generator) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The tensors of a run (learner, ``norms``, the filled rows of ``arrays``, torch's RNG) and the JSON of its
    buffer position and numpy generator; the loop adds its counters and logs to the latter."""
    tensors = {f'{name}.{k}': v for name, module in (('actor', learner.actor), ('critic', learner.critic),
                                                      ('target', learner.target), *norms.items())
               for k, v in module.state_dict().items()}
    tensors['log_alpha'] = learner.log_alpha.detach()
    for name, opt in (('actor_opt', learner.actor_opt), ('critic_opt', learner.critic_opt)):
        tensors.update({f'{name}.{index}.{k}': torch.as_tensor(v) for index, entry in opt.state_dict()['state'].items()
                        for k, v in entry.items()})
    tensors.update({f'buffer.{name}': torch.from_numpy(array[:buffer.size]) for name, array in arrays.items()})
    tensors['torch_rng'] = torch.get_rng_state()
    return tensors, {'buffer': {'size': buffer.size, 'pos': buffer.pos}, 'numpy_rng': rng.bit_generator.state}


def load(out_dir: Path, config: Mapping[str, Any]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The snapshot's tensors and JSON; ConfigError naming the file unless it is whole and of a run with
    ``config`` (the settings a resumed run must keep)."""
    path = Path(out_dir) / SNAPSHOT
    try:
        with safe_open(str(path), 'pt') as handle:
            state = json.loads((handle.metadata() or {})[_META_KEY])
        tensors = load_file(str(path))
    except Exception as exc:  # safetensors, json and a missing key raise their own errors for a damaged file
        raise ConfigError(f'{path} is not a readable training snapshot ({" ".join(str(exc).split())[:100]}): '
                          'delete it to train from the start') from None
    if not isinstance(state, dict) or state.get('format') != FORMAT:
        raise ConfigError(f'{path} is a training snapshot of another format: delete it to train from the start')
    theirs = state.get('config') if isinstance(state.get('config'), dict) else {}
    mine = json.loads(json.dumps(config))
    if theirs != mine:
        keys = sorted(k for k in set(mine) | set(theirs) if theirs.get(k) != mine.get(k))
        raise ConfigError(f'{path} was written by a training with other settings ({", ".join(keys)}): resume with '
                          'the flags it was started with, or delete it to train from the start')
    return tensors, state


def restore(path: Path, tensors: Mapping[str, Tensor], state: Mapping[str, Any], learner: SacLearner, buffer: Any,
            arrays: Mapping[str, np.ndarray], norms: Mapping[str, nn.Module], rng: np.random.Generator) -> None:
    """Put what ``capture`` took back into the learner, ``norms``, the buffer and the generators; ConfigError naming
    ``path`` if it does not fit them."""
    try:
        for name, module in (('actor', learner.actor), ('critic', learner.critic), ('target', learner.target),
                             *norms.items()):
            module.load_state_dict({k.removeprefix(f'{name}.'): v for k, v in tensors.items()
                                    if k.startswith(f'{name}.')})
        with torch.no_grad():
            learner.log_alpha.copy_(tensors['log_alpha'])
        for name, opt in (('actor_opt', learner.actor_opt), ('critic_opt', learner.critic_opt)):
            _restore_optimizer(opt, name, tensors)
        size, pos = int(state['buffer']['size']), int(state['buffer']['pos'])
        if not (0 <= pos < buffer.capacity and 0 <= size <= buffer.capacity):
            raise ValueError(f'buffer position {pos} and size {size} outside its capacity {buffer.capacity}')
        for name, array in arrays.items():
            array[:size] = tensors[f'buffer.{name}'].numpy()
        buffer.size, buffer.pos = size, pos
        torch.set_rng_state(tensors['torch_rng'])
        rng.bit_generator.state = state['numpy_rng']
    except (KeyError, RuntimeError, ValueError, TypeError) as exc:
        raise ConfigError(f'{path} does not fit this training ({" ".join(str(exc).split())[:100]}): delete it to '
                          'train from the start') from None


def _restore_optimizer(opt: torch.optim.Optimizer, name: str, tensors: Mapping[str, Tensor]) -> None:
    """Load ``<name>.<index>.<key>`` entries as ``opt``'s per-parameter state (its settings stay this run's)."""
    state: dict[int, dict[str, Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith(f'{name}.'):
            index, _, entry = key.removeprefix(f'{name}.').partition('.')
            state.setdefault(int(index), {})[entry] = value.clone()
    params = [p for group in opt.param_groups for p in group['params']]
    for index, entry in state.items():
        if index >= len(params) or entry.get('exp_avg', params[index]).shape != params[index].shape:
            raise ValueError(f'{name} holds the state of other parameters')
    opt.load_state_dict({'state': state, 'param_groups': opt.state_dict()['param_groups']})


class ResumableLoop:
    """What a SAC or BPQL loop carries across a stop, and taking and restoring it; a subclass names its buffer's
    ``arrays`` and any other running statistics (``norms``)."""

    cfg: TrainConfig
    learner: SacLearner
    buffer: Any
    episodes: Episodes
    rng: np.random.Generator
    global_step: int
    updates: int
    elapsed: float

    def arrays(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def norms(self) -> dict[str, nn.Module]:
        return {}

    def settings(self) -> dict[str, Any]:
        """The settings a resumed run must keep."""
        return dataclasses.asdict(self.cfg)

    def snapshot(self, rows: list[dict[str, float]]) -> tuple[dict[str, Tensor], dict[str, Any]]:
        tensors, state = capture(self.learner, self.buffer, self.arrays(), self.norms(), self.rng)
        state.update(config=self.settings(), global_step=self.global_step, updates=self.updates,
                     elapsed=self.elapsed, returns=self.episodes.returns, lengths=list(self.episodes.lengths),
                     rows=rows)
        return tensors, state

    def resume(self, out_dir: Path) -> list[dict[str, float]]:
        """Continue from ``out_dir``'s snapshot; return its progress rows."""
        tensors, state = load(out_dir, self.settings())
        path = Path(out_dir) / SNAPSHOT
        restore(path, tensors, state, self.learner, self.buffer, self.arrays(), self.norms(), self.rng)
        try:
            self.global_step, self.updates = int(state['global_step']), int(state['updates'])
            self.elapsed = float(state['elapsed'])
            self.episodes.returns = [float(r) for r in state['returns']]
            self.episodes.lengths.extend(int(n) for n in state['lengths'])
            rows = [dict(row) for row in state['rows']]
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f'{path} does not fit this training ({exc}): delete it to train from the start') from None
        print(f'resumed {path}: step {self.global_step}, {self.buffer.size} transitions in the buffer, alpha '
              f'{self.learner.log_alpha.exp().item():.6g}', file=sys.stderr)
        return rows
