"""The env node's parameters, declared and validated once into a frozen config, and its tick schedule."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rclpy.node import Node

from calf_core.envs import env_spec, parse_start_plan
from calf_core.errors import ConfigError
from calf_ros.node_params import declare_parameters, positive_number
from calf_ros.qos import STREAM, QosConfig

PARAMETERS: dict[str, tuple[Any, str]] = {
    'dt': (None, 'tick period of the task (seconds); default: the task\'s own (cartpole 0.02, minigrid 0.1)'),
    'time_scale': (1.0, 'divides dt, so that the graph runs this many times faster than real time'),
    'seed': (0, 'seed of the first episode\'s reset; later episodes continue its random stream'),
    'episodes': (0, 'episodes to run before exiting; 0 runs forever'),
    'wait_for_subscriber': (True, 'start the first episode only once observation has a subscriber'),
    'qos_reliability': (STREAM.reliability, 'QoS reliability of observation/action: best_effort or reliable'),
    'qos_durability': (STREAM.durability, 'QoS durability of observation/action: volatile or transient_local'),
    'qos_depth': (STREAM.depth, 'QoS history depth of observation/action'),
    'stats_period_s': (1.0, 'period of LinkStats on link_stats (seconds)'),
    'start_plan': ('', 'actions cycled until the first plan of an episode arrives, e.g. [0, 1]; '
                       'empty: hold the initial action'),
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
    qos: QosConfig
    stats_period_s: float
    start_plan: tuple[int, ...] = ()

    @property
    def tick_s(self) -> float:
        """Real time between ticks (seconds)."""
        return self.dt / self.time_scale

    @classmethod
    def from_node(cls, node: Node) -> EnvNodeConfig:
        """Declare every parameter on ``node`` (dt's default follows env), read and validate them once."""
        env = declare_parameters(node, {'env': ('cartpole', 'task: cartpole or minigrid')})['env']
        defaults = {**PARAMETERS, 'dt': (env_spec(env).dt, PARAMETERS['dt'][1])}
        p = declare_parameters(node, defaults, dynamic=(*FLOATS, 'start_plan'))
        p['start_plan'] = parse_start_plan(p['start_plan'])
        for name in FLOATS:
            p[name] = positive_number(name, p[name])
        if p['episodes'] < 0:
            raise ConfigError(f'episodes must be >= 0, got {p["episodes"]}')
        p['qos'] = QosConfig(p.pop('qos_reliability'), p.pop('qos_durability'), p.pop('qos_depth'))
        p['qos'].profile()
        return cls(env=env, **p)


def next_tick(k: int, elapsed_s: float, tick_s: float) -> int:
    """The tick to run after tick ``k``: ``k + 1``, or the latest deadline already passed."""
    return max(k + 1, int(elapsed_s // tick_s))
