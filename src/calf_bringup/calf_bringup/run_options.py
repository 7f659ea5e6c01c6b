"""The run options of a node graph, declared once: ``calf run``'s flags, the launch files' arguments,
the graph builder's input and the node parameters it forwards (``node_parameters``) all come from
``OPTIONS``, and ``RunOptions`` validates them once. A run flag that a node reads is one row here
(``to``: which node parameter it becomes) and one row of that node's ``PARAMETERS``.

Pure: no rclpy and no launch. Each option is written as text (a launch argument, a command-line
value) and parsed by its row's parser. Errors name the option as the interface in use spells it:
``--time-scale 0`` under ``calf run``, ``time_scale:=0`` under ``ros2 launch``.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from calf_agent.hierarchy import PLACEMENTS
from calf_core.envs import parse_start_plan, resolve_env_arg
from calf_core.errors import ConfigError
from calf_core.network import resolve_network
from calf_ros.run_params import SHARED
from calf_shim.topic_relay_config import load_relay_config

MODES = ('local_sim', 'sim_net', 'edge_sim')
IMPAIR = 'impair'  # not a deployment mode: the generic shim alone, on an existing stack's topics
ROLES = ('all', 'edge', 'desktop')
CLEAN_NETWORK = 'sim_clean'
INTERFACES = ('cli', 'launch')
NODES, SHIM = 'nodes', 'shim'  # which runs an option applies to: a deployment mode's nodes, impair's shim


def _optional_text(text: str) -> str | None:
    return text or None


def _optional_path(text: str) -> Path | None:
    return Path(text).expanduser() if text else None


def _boolean(text: str) -> bool:
    if text.lower() in ('true', 'false'):
        return text.lower() == 'true'
    raise ValueError('must be true or false')


def _domain_id(text: str) -> int | None:
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError('not an integer') from None
    if not 0 <= value <= 232:
        raise ValueError('must be a ROS domain id, 0 to 232')
    return value


def _env(text: str) -> str:
    """The task, resolved once here so that a bad one stops the run with one line (a spec file: its path)."""
    try:
        return resolve_env_arg(None, text) if text.endswith(('.yaml', '.yml')) else resolve_env_arg(text, None)
    except ConfigError as err:
        raise ValueError(str(err)) from None


def _start_plan(text: str) -> tuple[int, ...] | None:
    try:
        return parse_start_plan(text) if text else None
    except ConfigError as err:
        raise ValueError(str(err)) from None


class Option(NamedTuple):
    """One run option: its name (the launch argument; ``--name-with-dashes`` on the command line),
    its default as text, the parser of that text, its help, the runs it applies to, and the node
    parameters it is forwarded as (``node.parameter``, the node by its name in the graph)."""

    name: str
    default: str
    parse: Callable[[str], Any]
    help: str
    runs: tuple[str, ...] = (NODES,)
    replaced_by: str = ''  # a deprecated name: the option that replaces it
    to: tuple[str, ...] = ()  # e.g. ('env.seed', 'shim.seed'): the parameters it sets
    always: bool = True  # forwarded at its default too; False: only when given, so the node's default applies


OPTIONS: tuple[Option, ...] = (
    Option('role', 'all', str, 'edge (env, plus the shim when there is a network), desktop (policy) or all'),
    Option('network', CLEAN_NETWORK, str, 'network profile name, YAML path or trace bag for the shim',
           to=('shim.network',)),
    Option('policy', '', _optional_path, 'checkpoint directory from calf train (needed unless the role is edge)'),
    Option('env', 'cartpole', _env, 'task: cartpole, minigrid, a gymnasium id such as Pendulum-v1, '
                                    'package.module:callable, or a task spec file (.yaml)', to=('env.env',)),
    Option('seed', str(SHARED['seed'][0]), int, SHARED['seed'][1], (NODES, SHIM),
           to=('env.seed', 'shim.seed', 'generic_shim.seed')),
    Option('time_scale', str(SHARED['time_scale'][0]), float, SHARED['time_scale'][1], (NODES, SHIM),
           to=('env.time_scale', 'shim.time_scale', 'generic_shim.time_scale', 'arbiter.time_scale')),
    Option('episodes', '0', int, 'episodes played with a policy before the env node exits, and the run with it; '
                                 '0 runs until stopped', to=('env.episodes',)),
    Option('placement', 'flat_desktop', str, 'where the policy runs: flat_desktop (across the network), flat_edge '
                                             '(beside the env) or hierarchical (policy: a calf train-hierarchy '
                                             'directory)'),
    Option('graph', '', str, 'deprecated alias of placement, removed in the next release', replaced_by='placement'),
    Option('start_plan', '', _start_plan, 'actions the env cycles until the first plan arrives, e.g. [0,1]; empty: '
                                          'the policy checkpoint\'s start plan when a policy is given, else hold '
                                          'the initial action'),
    Option('wait_for_policy', 'true', _boolean, 'count no episode before a policy answers (the env ticks uncounted '
                                                'warm-up episodes until the first action); false counts from the '
                                                'first tick, for a robot that must tick from power-on',
           to=('env.wait_for_policy',), always=False),
    Option('policy_timeout', '0', float, 'the env node gives up (exits 1) when no action arrived this many seconds '
                                         'after its first observation; 0 waits forever',
           to=('env.policy_timeout_s',), always=False),
    Option('respawn', 'false', _boolean, 'start a node that fails (exit code other than 0, or killed) again, so that '
                                         'the others keep running; a node that finishes with code 0 still ends the '
                                         'run. false: any node that exits stops them all', (NODES, SHIM)),
    Option('respawn_delay', '1.0', float, 'seconds before a failed node is started again (with respawn)',
           (NODES, SHIM)),
    Option('respawn_retries', '5', int, 'restarts allowed per node (with respawn); one more failure stops the run',
           (NODES, SHIM)),
    Option('config', '', _optional_path, 'relay config YAML: the topics to impair '
                                         '(see calf_bringup/config/impair_cmd_vel.yaml)', (SHIM,),
           to=('generic_shim.config',)),
    Option('trace_bag', '', _optional_path, 'record every relayed message (delay or loss) into this new rosbag2 '
                                            'directory; empty: off', (SHIM,), to=('generic_shim.trace_bag',)),
    Option('domain_id', '', _domain_id, 'ROS_DOMAIN_ID of every node; empty: inherited', (NODES, SHIM)),
    Option('discovery', '', _optional_text, 'localhost, subnet, off, system_default, a Fast DDS XML profile, or '
                                            'peers:IP,IP,... (static peers, no multicast: for Wi-Fi); empty: '
                                            'inherited', (NODES, SHIM)),
)
TABLE = {option.name: option for option in OPTIONS}


def spell(interface: str, name: str, value: object = None) -> str:
    """Option ``name`` (with ``value``) as the user writes it: ``--time-scale 4`` or ``time_scale:=4``."""
    if interface == 'launch':
        return f'{name}:=' if value is None else f'{name}:={value}'
    flag = '--' + name.replace('_', '-')
    return flag if value is None else f'{flag} {value}'


@dataclass(frozen=True)
class RunOptions:
    """Every option of one run, typed and validated. Build it with ``of``, ``from_text`` or ``from_args``."""

    mode: str
    role: str
    network: str
    policy: Path | None
    env: str
    seed: int
    time_scale: float
    episodes: int
    placement: str
    start_plan: tuple[int, ...] | None
    wait_for_policy: bool
    policy_timeout: float
    respawn: bool
    respawn_delay: float
    respawn_retries: int
    config: Path | None
    trace_bag: Path | None
    domain_id: int | None
    discovery: str | None
    interface: str = 'cli'
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def of(cls, mode: str, interface: str = 'cli', **values: Any) -> RunOptions:
        """Options of ``mode``: each value typed or as text (parsed), the others the table's defaults."""
        unknown = sorted(set(values) - set(TABLE))
        if unknown:
            raise ConfigError(f'unknown run option {unknown[0]!r}: choose one of {", ".join(TABLE)}')
        _check_choice('interface', interface, INTERFACES)
        parsed: dict[str, Any] = {}
        notes = []
        for option in OPTIONS:
            value = values.get(option.name, option.default)
            value = _parse(interface, option, value) if isinstance(value, str) else value
            if not option.replaced_by:
                parsed[option.name] = value
            elif value:  # a deprecated name: it counts unless the new one was given too
                new = TABLE[option.replaced_by]
                if values.get(new.name, new.default) == new.default:
                    parsed[new.name] = value
                notes.append(f'{spell(interface, option.name)} is deprecated: use '
                             f'{spell(interface, new.name)} (the old name goes in the next release)')
        options = cls(mode=mode, interface=interface, warnings=tuple(notes), **parsed)
        options.validate()
        return options

    @classmethod
    def from_text(cls, mode: str, texts: Mapping[str, str], interface: str = 'launch') -> RunOptions:
        """Options from launch-argument strings (every declared argument, as launch passes them)."""
        return cls.of(mode, interface, **{name: texts[name] for name in TABLE if name in texts})

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunOptions:
        """Options from ``calf run``'s parsed arguments (``add_arguments``): the flags given, as text."""
        given = {name: getattr(args, name) for name in TABLE if getattr(args, name, None) is not None}
        return cls.of(args.mode, 'cli', **given)

    def spell(self, name: str, value: object = None) -> str:
        """Option ``name`` as this run's interface spells it (see ``spell``)."""
        return spell(self.interface, name, value)

    def validate(self) -> None:
        """Every check of the options, each failing with one line that names the option as the user wrote it."""
        _check_choice('mode', self.mode, (*MODES, IMPAIR))
        if not self.time_scale > 0:
            raise ConfigError(f'bad {self.spell("time_scale", f"{self.time_scale:g}")}: must be > 0')
        if not 0 < self.respawn_delay <= 3600:
            raise ConfigError(f'bad {self.spell("respawn_delay", f"{self.respawn_delay:g}")}: must be > 0 and at '
                              f'most 3600 (seconds)')
        if not 1 <= self.respawn_retries <= 1000:
            raise ConfigError(f'bad {self.spell("respawn_retries", self.respawn_retries)}: must be 1 to 1000')
        if self.mode == IMPAIR:
            self._validate_impair()
            return
        _check_choice('role', self.role, ROLES, self.spell('role'))
        _check_choice('placement', self.placement, PLACEMENTS, self.spell('placement'))
        if self.episodes < 0:
            raise ConfigError(f'bad {self.spell("episodes", self.episodes)}: must be >= 0')
        if not self.policy_timeout >= 0:
            raise ConfigError(f'bad {self.spell("policy_timeout", f"{self.policy_timeout:g}")}: must be >= 0 (0 waits '
                              f'forever)')
        if self.mode == 'local_sim' and self.network != CLEAN_NETWORK:
            raise ConfigError(f'local_sim has no network (got {self.spell("network", self.network)}): use sim_net '
                              f'or edge_sim to add one')
        if self.role != 'desktop' and self.placement != 'flat_edge':
            self._validate_network()

    def _validate_network(self) -> None:
        """Load the shim's profile (a name, a YAML file or a trace bag) here, so that a bad one stops the run
        before any node starts."""
        try:
            resolve_network(self.network)
        except ConfigError as err:
            raise ConfigError(f'bad {self.spell("network", self.network)}: {err}') from None

    def _validate_impair(self) -> None:
        if not self.config:
            raise ConfigError(f'impair needs a relay config: pass {self.spell("config", "FILE.yaml")} '
                              f'(example: calf_bringup/config/impair_cmd_vel.yaml)')
        load_relay_config(self.config.resolve())
        if self.trace_bag and self.trace_bag.resolve().exists():
            raise ConfigError(f'trace bag {self.trace_bag.resolve()} already exists: pass a new directory to '
                              f'{self.spell("trace_bag")}')


def _parse(interface: str, option: Option, text: str) -> Any:
    try:
        return option.parse(text)
    except ValueError as err:
        reason = {int: 'not an integer', float: 'not a number'}.get(option.parse, str(err))
        raise ConfigError(f'bad {spell(interface, option.name, text)}: {reason}') from None


def node_parameters(options: RunOptions, node: str) -> dict[str, Any]:
    """The parameters of ``node`` (its name in the graph: env, shim, generic_shim, arbiter) that run options
    set, in table order: every option whose ``to`` names it, but an unset one (None) or, for ``always=False``,
    one at its default. Paths are forwarded resolved, tuples as lists."""
    params: dict[str, Any] = {}
    for option in OPTIONS:
        for target in option.to:
            owner, _, param = target.partition('.')
            value = getattr(options, option.name)
            if owner != node or value is None or (not option.always and value == option.parse(option.default)):
                continue
            params[param] = str(value.resolve()) if isinstance(value, Path) else \
                list(value) if isinstance(value, tuple) else value
    return params


def launch_arguments(run: str) -> tuple[tuple[str, str, str], ...]:
    """(name, default, description) of every option of ``run`` (NODES or SHIM), as launch declares them."""
    return tuple((o.name, o.default, o.help) for o in OPTIONS if run in o.runs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--name`` for every option, default None (the table's default applies), values kept as text."""
    for option in OPTIONS:
        only = ' (impair only)' if option.runs == (SHIM,) else ''
        default = f' (default: {option.default})' if option.default else ''
        parser.add_argument(spell('cli', option.name), dest=option.name, metavar=option.name.upper(),
                            help=option.help + only + default)


def _check_choice(kind: str, value: str, choices: tuple[str, ...], name: str = '') -> None:
    if value not in choices:
        raise ConfigError(f'unknown {kind} {value!r}{f" ({name})" if name else ""}: choose one of {", ".join(choices)}')
