"""``ProcessEnvBatch``: the vector env's envs stepped in worker processes, so that slow envs (MuJoCo) use every core.

Worker ``w`` of ``W`` owns envs ``w, w + W, w + 2W, ...`` in an :class:`~calf_core.vector_networked.EnvBatch` of
its own. Actions, observations, rewards, flags and seeds cross in shared memory; the pipes carry only a
command word and a short error text, so nothing is pickled. Workers are forked, so the env factories are
inherited, not sent, and a worker ends with its parent (its pipe closes).
"""
from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np

from calf_core.networked_env import float32_space
from calf_core.vector_networked import EnvBatch

_OK = b'ok'
_ERROR = b'error: '
_CLOSE_TIMEOUT_S = 5.0


class _Shared:
    """The arrays parent and workers share, one row per env."""

    def __init__(self, ctx: Any, n: int, obs_shape: tuple[int, ...], action_shape: tuple[int, ...],
                 action_dtype: type) -> None:
        def array(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
            size = int(np.prod(shape)) * np.dtype(dtype).itemsize
            return np.frombuffer(ctx.RawArray('b', max(size, 1)), dtype=dtype, count=int(np.prod(shape))).reshape(shape)

        self.obs = array((n, *obs_shape), np.float32)
        self.reward = array((n,), np.float64)
        self.terminated = array((n,), np.bool_)
        self.truncated = array((n,), np.bool_)
        self.action = array((n, *action_shape), action_dtype)
        self.seed = array((n,), np.int64)
        self.idx = array((n,), np.int64)
        self.count = array((1,), np.int64)


class ProcessEnvBatch:
    """``EnvBatch``'s interface over ``len(env_fns)`` envs in ``workers`` forked processes (see the module doc)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], workers: int = 2) -> None:
        self.num_envs = n = len(env_fns)
        if n < 1 or workers < 1:
            raise ValueError(f'ProcessEnvBatch needs >= 1 env and worker, got {n} and {workers}')
        probe = env_fns[0]()
        space = probe.action_space
        self.obs_shape = float32_space(probe.observation_space).shape
        probe.close()
        continuous = isinstance(space, gym.spaces.Box)
        ctx = multiprocessing.get_context('fork')
        self._shared = _Shared(ctx, n, self.obs_shape, tuple(space.shape) if continuous else (),
                               np.float32 if continuous else np.int64)
        self._workers = min(workers, n)
        self._conns: list[Connection] = []
        self._processes = []
        for w in range(self._workers):
            own = list(range(w, n, self._workers))
            parent, child = ctx.Pipe()
            process = ctx.Process(target=_serve, args=(child, [env_fns[i] for i in own], own, self._shared),
                                  daemon=True, name=f'calf-env-worker-{w}')
            process.start()
            child.close()
            self._conns.append(parent)
            self._processes.append(process)
        try:
            self._call(b'ready', range(self._workers))
        except RuntimeError:
            self.close()
            raise

    def seed(self, seeds: Sequence[int]) -> None:
        self._shared.seed[:] = [int(seed) for seed in seeds]
        self._call(b'seed', range(self._workers))

    def reset(self, idx: np.ndarray) -> np.ndarray:
        """Start new episodes in envs ``idx``; return their observations (float32)."""
        self._call(b'reset', self._post(idx))
        return self._shared.obs[idx].copy()

    def step(self, idx: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Apply ``action[j]`` in env ``idx[j]``; return their observations, rewards, termination and truncation."""
        shared = self._shared
        shared.action[idx] = action
        self._call(b'step', self._post(idx))
        return shared.obs[idx].copy(), shared.reward[idx].copy(), shared.terminated[idx].copy(), \
            shared.truncated[idx].copy()

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send_bytes(b'close')
            except OSError:  # the worker has gone already
                pass
        for process in self._processes:
            process.join(_CLOSE_TIMEOUT_S)
            if process.is_alive():
                process.terminate()
        for conn in self._conns:
            conn.close()
        self._conns, self._processes = [], []

    def _post(self, idx: np.ndarray) -> range | np.ndarray:
        """Put ``idx`` in shared memory; return the workers that own any of them."""
        shared = self._shared
        shared.count[0] = len(idx)
        shared.idx[:len(idx)] = idx
        return np.unique(np.asarray(idx) % self._workers)

    def _call(self, command: bytes, workers: Any) -> None:
        """Send ``command`` to ``workers``, then wait for each; a worker's error is raised here, in one line."""
        workers = [int(w) for w in workers]
        for w in workers:
            try:
                self._conns[w].send_bytes(command)
            except OSError:  # a worker that failed has closed its end: its error is still to be read
                pass
        errors = []
        for w in workers:
            try:
                reply = self._conns[w].recv_bytes()
            except EOFError:
                reply = _ERROR + f'env worker {w} exited'.encode()
            if reply != _OK:
                errors.append(reply[len(_ERROR):].decode(errors='replace'))
        if errors:
            raise RuntimeError(errors[0])


def _serve(conn: Connection, env_fns: list[Callable[[], gym.Env]], own: list[int], shared: _Shared) -> None:
    """A worker: build its envs, then run commands until ``close`` or the parent's end."""
    try:
        batch = EnvBatch([make() for make in env_fns])
    except Exception as error:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send_bytes(_ERROR + f'{type(error).__name__}: {error}'.encode())
        return
    owned = np.asarray(own, np.int64)
    local = np.full(max(own) + 1, -1, np.int64)
    local[owned] = np.arange(len(own))
    while True:
        try:
            command = conn.recv_bytes()
        except EOFError:  # the parent has gone
            break
        if command == b'close':
            break
        try:
            if command == b'seed':
                batch.seed(shared.seed[owned].tolist())
            elif command in (b'reset', b'step'):
                idx = shared.idx[:int(shared.count[0])]
                mine = idx[np.isin(idx, owned)]
                rows = local[mine]
                if command == b'reset':
                    shared.obs[mine] = batch.reset(rows)
                else:
                    shared.obs[mine], shared.reward[mine], shared.terminated[mine], shared.truncated[mine] = \
                        batch.step(rows, shared.action[mine])
            conn.send_bytes(_OK)
        except Exception as error:  # noqa: BLE001 - reported to the parent, which raises it
            conn.send_bytes(_ERROR + f'{type(error).__name__}: {error}'.encode())
    batch.close()
