"""User-code fuzz: randomised ``--env`` entry points and ``calf_core.wrap`` arguments.

An ``entry`` case is a generated module whose env breaks rules at random: it raises (any exception,
``SystemExit``, a ``BaseException`` subclass) while it is imported, constructed, reset or stepped; its
spaces are odd or oversized; its observations are NaN, infinite, the wrong size or not numbers; its
``dt`` is a weird value. It is resolved as ``--env module:make`` is, then wrapped, reset and stepped
once. A ``wrap`` case calls ``calf_core.wrap`` with each argument a valid value or a weird one, then
resets and steps once. Outcomes are classified as in ``file_fuzz``: ``ok``,
``refused`` (one CalfError line) or ``crash``.

    python tests/user_fuzz.py --cases 500 --seed 0 --workdir /tmp/user_fuzz
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from file_fuzz import WEIRD, Outcome, run_case

from calf_core.limits import MAX_ACTIONS, MAX_OBS_VALUES

KINDS = ('entry', 'wrap')
FAIL_AT = ('import', 'construct', 'reset', 'step', None, None, None, None)
ERRORS = ('RuntimeError("boom")', 'SystemExit(3)', 'SystemExit("bye")', 'Boom()', 'MemoryError()', 'RecursionError()',
          'ValueError("line\\n" * 1000)', 'gym.error.Error("gym")', 'ImportError("missing")', 'KeyError(1)',
          'StopIteration()', 'GeneratorExit()', 'ZeroDivisionError()')
OBSERVATION_SPACES = (
    'gym.spaces.Box(-1.0, 1.0, (4,), np.float32)', 'gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)',
    f'gym.spaces.Box(-1.0, 1.0, ({MAX_OBS_VALUES + 1},), np.float32)', 'gym.spaces.Box(-1.0, 1.0, (0,), np.float32)',
    'gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32)', 'gym.spaces.Discrete(5)', 'gym.spaces.Discrete(10 ** 9)',
    'gym.spaces.MultiBinary(6)', 'gym.spaces.MultiDiscrete([3, 4])', 'gym.spaces.Text(5)', 'gym.spaces.Tuple(())',
    'gym.spaces.Dict({"a": gym.spaces.Box(-1.0, 1.0, (2,)), "b": gym.spaces.Discrete(3)})',
    'gym.spaces.Dict({"a": gym.spaces.Box(-1.0, 1.0, (2,)), "t": gym.spaces.Text(4)})', '42', 'None')
ACTION_SPACES = (
    'gym.spaces.Discrete(2)', 'gym.spaces.Discrete(1)', f'gym.spaces.Discrete({MAX_ACTIONS + 1})',
    'gym.spaces.Discrete(10 ** 12)', 'gym.spaces.Box(-1.0, 1.0, (1,), np.float32)',
    'gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)', f'gym.spaces.Box(-1.0, 1.0, ({MAX_ACTIONS + 1},))',
    'gym.spaces.Box(-1.0, 1.0, (0,), np.float32)', 'gym.spaces.MultiDiscrete([3, 3])', 'gym.spaces.Text(3)',
    'None', '"left"')
OBSERVATIONS = ('self.observation_space.sample()', 'np.full(4, np.nan)', 'np.full(4, np.inf)', 'np.zeros(7)',
                'np.full(4, 1e300)', '"text"', 'None', '{"a": 1}', 'np.zeros(4, dtype=object)', '[0.0, 0.0, 0.0, 0.0]',
                'np.zeros((2, 2))')
DTS = ('0.02', '0.05', 'None', '"fast"', *(repr(v) if not isinstance(v, float) or math.isfinite(v) else f'float("{v}")'
                                          for v in WEIRD if isinstance(v, (int, float))))
MODULE = '''import gymnasium as gym
import numpy as np


class Boom(BaseException):
    pass


def fail(where):
    if where == {fail_at!r}:
        raise {error}


fail('import')


class Env(gym.Env):
    def __init__(self):
        fail('construct')
        self.observation_space = {observation_space}
        self.action_space = {action_space}
        self.dt = {dt}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        fail('reset')
        return {reset_observation}, {{}}

    def step(self, action):
        fail('step')
        return {step_observation}, 0.0, False, False, {{}}


def make():
    return Env()
'''


def _pick(rng: np.random.Generator, choices: tuple[Any, ...]) -> Any:
    return choices[int(rng.integers(len(choices)))]


def make_entry(rng: np.random.Generator, root: Path, name: str) -> str:
    """Write module ``name`` into ``root``: a valid env with 0 to 2 of its parts drawn at random (often
    hostile); return its entry point."""
    root.mkdir(parents=True, exist_ok=True)
    parts = {'fail_at': FAIL_AT, 'observation_space': OBSERVATION_SPACES, 'action_space': ACTION_SPACES, 'dt': DTS,
             'reset_observation': OBSERVATIONS, 'step_observation': OBSERVATIONS}
    fields = {'fail_at': None, 'error': _pick(rng, ERRORS), 'observation_space': OBSERVATION_SPACES[0],
              'action_space': ACTION_SPACES[0], 'dt': DTS[0], 'reset_observation': OBSERVATIONS[0],
              'step_observation': OBSERVATIONS[0]}
    for key in rng.choice(sorted(parts), size=int(rng.integers(3)), replace=False):
        fields[str(key)] = _pick(rng, parts[str(key)])
    (root / f'{name}.py').write_text(MODULE.format(**fields), encoding='utf-8')
    return f'{name}:make'


def load_entry(root: Path, entry: str) -> None:
    """Resolve ``entry`` as ``--env`` does, then wrap, reset and step it once."""
    sys.path.insert(0, str(root))
    try:
        _run(entry, {})
    finally:
        sys.path.remove(str(root))


def wrap_arguments(rng: np.random.Generator) -> dict[str, Any]:
    """Arguments of ``calf_core.wrap``: each a valid value, or (with probability 0.3) a weird one."""
    valid = {'env': _pick(rng, ('cartpole', 'Pendulum-v1', 'CartPole-v1')),
             'network': _pick(rng, ('sim_clean', 'wifi_normal')), 'dt': _pick(rng, (None, 0.05)),
             'seed': int(rng.integers(1 << 31)), 'plan_horizon': int(rng.integers(1, 9)), 'task': None}
    return {key: _pick(rng, tuple(WEIRD)) if rng.random() < 0.3 else value for key, value in valid.items()}


def _run(env: Any, arguments: dict[str, Any]) -> None:
    import calf_core

    wrapped = calf_core.wrap(env, **arguments)
    wrapped.reset(seed=0)
    wrapped.step(wrapped.action_space.sample())
    wrapped.close()


def _escaped(load: Callable[[Path], Any]) -> Callable[[Path], Any]:
    """``load``, with a ``BaseException`` that escapes it (``SystemExit``, say) re-raised as an Exception, so
    that it counts as a crash instead of ending the fuzz (``KeyboardInterrupt`` still ends it)."""
    def guarded(path: Path) -> Any:
        try:
            return load(path)
        except (Exception, KeyboardInterrupt):
            raise
        except BaseException as err:  # noqa: BLE001 - the fuzz is looking for exactly these
            raise RuntimeError(f'{type(err).__name__} escaped: {err}') from None
    return guarded


def fuzz(seed: int, cases: int, workdir: Path, kinds: tuple[str, ...] = KINDS) -> list[Outcome]:
    """Run ``cases`` cases of each kind from ``seed``; entry modules are named by seed and case."""
    rng = np.random.default_rng(seed)
    outcomes = []
    for i in range(cases):
        for kind in kinds:
            case_dir = workdir / f'{kind}-{i}'
            load: Callable[[Path], Any]
            if kind == 'entry':
                entry = make_entry(rng, case_dir, f'calf_fuzz_env_{seed}_{i}')
                load = lambda root, entry=entry: load_entry(root, entry)  # noqa: E731
            else:
                arguments = wrap_arguments(rng)
                load = lambda root, arguments=arguments: _run(arguments.pop('env'), arguments)  # noqa: E731
            outcomes.append(run_case(kind, case_dir, _escaped(load)))
            shutil.rmtree(case_dir, ignore_errors=True)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--cases', type=int, default=500, help='cases per kind')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--workdir', type=Path, required=True, help='scratch directory (created)')
    args = parser.parse_args(argv)
    outcomes = fuzz(args.seed, args.cases, args.workdir)
    tally = Counter((o.kind, o.result) for o in outcomes)
    crashes = [o for o in outcomes if o.result == 'crash']
    print(json.dumps({'cases': len(outcomes), 'tally': {f'{k}/{r}': n for (k, r), n in sorted(tally.items())},
                      'crashes': [o._asdict() for o in crashes[:20]]}, indent=1))
    return 1 if crashes else 0


if __name__ == '__main__':
    sys.exit(main())
