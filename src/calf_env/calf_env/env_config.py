"""The env node's parameters, declared and validated once into a frozen config, and its tick schedule."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rclpy.node import Node

from calf_core.envs import env_spec, parse_start_plan
from calf_core.errors import ConfigError
from calf_core.task_spec import Action
from calf_ros.node_params import declare_parameters, positive_number
from calf_ros.qos import STREAM, QosConfig
from calf_ros.run_params import shared

PARAMETERS: dict[str, tuple[Any, str]] = {
    'dt': (None, 'tick period of the task (seconds); default: its task spec\'s (cartpole 0.02, minigrid 0.1)'),
    **shared('time_scale', 'seed'),
    'episodes': (0, 'episodes to run before exiting; 0 runs forever'),
    'wait_for_subscriber': (True, 'start ticking only once observation has a subscriber'),
    'wait_for_policy': (True, 'count no episode before a policy answers: until the first action arrives, '
                              'tick uncounted warm-up episodes; false counts from the first tick (a robot that '
                              'must tick from power-on)'),
    'policy_timeout_s': (0.0, 'exit with an error when no action arrived this many seconds after the first '
                              'observation; 0 waits forever'),
    'qos_reliability': (STREAM.reliability, 'QoS reliability of observation/action: best_effort or reliable'),
    'qos_durability': (STREAM.durability, 'QoS durability of observation/action: volatile or transient_local'),
    'qos_depth': (STREAM.depth, 'QoS history depth of observation/action'),
    'stats_period_s': (1.0, 'period of LinkStats on link_stats (seconds)'),
    'results_file': ('', 'append each counted episode\'s result to this file as a JSON line, as on episode_result, '
                         'and {"counting": true} when the count starts; empty: no file'),
    'start_plan': ('', 'actions cycled until the first plan of an episode arrives, e.g. [0, 1]; '
                       'empty: the task spec\'s start plan, else hold the initial action'),
}
FLOATS = ('dt', 'time_scale', 'stats_period_s')  # `-p time_scale:=4` works as well as 4.0


@dataclass(frozen=True)
class EnvNodeConfig:
    env: str
    dt: float
    time_scale: float
    seed: int
    episodes: int
    wait_for_subscriber: bool
    wait_for_policy: bool
    policy_timeout_s: float
    qos: QosConfig
    stats_period_s: float
    start_plan: tuple[Action, ...] | None = None  # None: the task spec's
    results_file: str = ''

    @property
    def tick_s(self) -> float:
        """Real time between ticks (seconds)."""
        return self.dt / self.time_scale

    @classmethod
    def from_node(cls, node: Node) -> EnvNodeConfig:
        """Declare every parameter on ``node`` (dt's default follows env), read and validate them once."""
        env = declare_parameters(node, {'env': ('cartpole', 'task: cartpole, minigrid, a gymnasium id, '
                                                            'package.module:callable or a task spec .yaml')})['env']
        defaults = {**PARAMETERS, 'dt': (env_spec(env).dt, PARAMETERS['dt'][1])}
        p = declare_parameters(node, defaults, dynamic=(*FLOATS, 'start_plan', 'policy_timeout_s'))
        p['start_plan'] = parse_start_plan(p['start_plan']) or None
        for name in FLOATS:
            p[name] = positive_number(name, p[name])
        if p['episodes'] < 0:
            raise ConfigError(f'episodes must be >= 0, got {p["episodes"]}')
        timeout = p['policy_timeout_s']
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise ConfigError(f'policy_timeout_s must be a number >= 0 (0: wait forever), got {timeout!r}')
        p['policy_timeout_s'] = float(timeout)
        p['qos'] = QosConfig(p.pop('qos_reliability'), p.pop('qos_durability'), p.pop('qos_depth'))
        p['qos'].profile()
        return cls(env=env, **p)


def next_tick(k: int, elapsed_s: float, tick_s: float) -> int:
    """The tick to run after tick ``k``: ``k + 1``, or the latest deadline already passed."""
    return max(k + 1, int(elapsed_s // tick_s))


class StartGate:
    """Whether episodes count yet: not before a policy has been heard (its first action arrived).

    Until then the env node ticks warm-up episodes, publishing observations for the policy to answer
    but no EpisodeResult. ``enabled=False`` opens the gate from the start. Times are in seconds.
    """

    def __init__(self, enabled: bool, timeout_s: float = 0.0) -> None:
        self.open = not enabled
        self.timeout_s = timeout_s
        self.waited_s = 0.0  # from start() to the first action
        self._since: float | None = None

    def start(self, now_s: float) -> None:
        """The first observation goes out at ``now_s``: the timeout runs from here."""
        self._since = now_s

    def heard(self, now_s: float) -> None:
        """An action arrived at ``now_s``: a policy is answering."""
        if not self.open:
            self.open = True
            self.waited_s = now_s - (self._since if self._since is not None else now_s)

    def expired(self, now_s: float) -> bool:
        """Still closed ``timeout_s`` (> 0) after ``start``."""
        return (not self.open and self.timeout_s > 0 and self._since is not None
                and now_s - self._since >= self.timeout_s)
