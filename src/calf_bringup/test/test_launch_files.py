"""The launch files: each one builds its mode's graph through calf_bringup.graph.

The structural checks always run. Loading the files through the real launch API runs only where
``launch`` and ``launch_ros`` import (a ROS 2 install, or the launch bundle: ``make launch-tools``);
the PyPI wheels lack them. tests/test_launch_system.py runs the files with ``ros2 launch``.
"""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from calf_bringup.graph import build_graph
from calf_bringup.launch_tools import missing_launch_tools
from calf_bringup.run_options import IMPAIR, MODES, RunOptions, launch_arguments
from calf_core.errors import ConfigError

LAUNCH_DIR = Path(__file__).resolve().parents[3] / 'launch'
FILES = {mode: LAUNCH_DIR / f'{mode}.launch.py' for mode in (*MODES, IMPAIR)}


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, 'id', getattr(node.func, 'attr', None)) == name]


def _mode_constant(tree: ast.Module) -> str | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, 'id', None) for t in node.targets] == ['MODE']:
            return ast.literal_eval(node.value)
    return None


@pytest.mark.parametrize('mode', (*MODES, IMPAIR))
def test_launch_file_builds_its_modes_graph(mode: str) -> None:
    tree = ast.parse(FILES[mode].read_text(), filename=str(FILES[mode]))
    assert _mode_constant(tree) == mode
    calls = _calls(tree, 'launch_description')
    assert len(calls) == 1 and isinstance(calls[0].args[0], ast.Name) and calls[0].args[0].id == 'MODE'
    assert [fn.name for fn in tree.body if isinstance(fn, ast.FunctionDef)][-1] == 'generate_launch_description'


def test_launch_values_become_the_same_graph_as_calf_run() -> None:
    values = {name: default for name, default, _ in launch_arguments('nodes')}
    values.update(policy='/ckpt', network='wifi_normal', seed='3', time_scale='2', episodes='5')
    assert build_graph(RunOptions.from_text('sim_net', values)) == build_graph(
        RunOptions.of('sim_net', network='wifi_normal', policy='/ckpt', seed=3, time_scale=2.0, episodes=5))
    with pytest.raises(ConfigError, match='bad seed:=x: not an integer'):
        RunOptions.from_text('sim_net', {**values, 'seed': 'x'})
    edge = build_graph(RunOptions.from_text('edge_sim', {**values, 'role': 'edge', 'start_plan': '[0,1]'}))
    assert edge[0].parameters['start_plan'] == [0, 1]
    with pytest.raises(ConfigError, match='bad start_plan:=left: start_plan must be a list of integer actions'):
        RunOptions.from_text('edge_sim', {**values, 'start_plan': 'left'})


def test_launch_arguments_cover_the_issue_contract() -> None:
    names = {name for name, _, _ in launch_arguments('nodes')}
    assert {'role', 'network', 'policy', 'env', 'domain_id', 'time_scale', 'placement', 'wait_for_policy'} <= names


def _skip_without_launch() -> None:
    """Skip unless the real launch API imports, naming what is missing."""
    missing = missing_launch_tools()
    if missing:
        pytest.skip(missing)


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.name.replace('.', '_'), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize('mode, expected', [('local_sim', ['env_node', 'policy_node']),
                                            ('sim_net', ['env_node', 'shim_node', 'policy_node']),
                                            ('edge_sim', ['env_node', 'policy_node'])])
def test_generate_launch_description_yields_the_nodes(mode: str, expected: list[str]) -> None:
    _skip_without_launch()
    from launch.actions import (
        DeclareLaunchArgument,
        OpaqueFunction,
        SetEnvironmentVariable,
    )
    from launch.utilities import perform_substitutions
    from launch_ros.actions import Node

    from launch import LaunchContext

    description = _load(FILES[mode]).generate_launch_description()
    context = LaunchContext()
    overrides = {'policy': '/ckpt', 'domain_id': '42'}
    for entity in description.entities:
        if isinstance(entity, DeclareLaunchArgument):
            default = perform_substitutions(context, entity.default_value)
            context.launch_configurations[entity.name] = overrides.get(entity.name, default)
    opaque = [entity for entity in description.entities if isinstance(entity, OpaqueFunction)]
    actions = opaque[0].execute(context) or []
    assert isinstance(actions[0], SetEnvironmentVariable)
    nodes = [action for action in actions if isinstance(action, Node)]
    assert [node.node_executable for node in nodes] == expected


def test_impair_launch_description_yields_the_generic_shim() -> None:
    _skip_without_launch()
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch.utilities import perform_substitutions
    from launch_ros.actions import Node

    from launch import LaunchContext

    description = _load(LAUNCH_DIR / 'impair.launch.py').generate_launch_description()
    context = LaunchContext()
    config = Path(__file__).resolve().parents[1] / 'config' / 'impair_cmd_vel.yaml'
    for entity in description.entities:
        if isinstance(entity, DeclareLaunchArgument):
            default = perform_substitutions(context, entity.default_value)
            context.launch_configurations[entity.name] = str(config) if entity.name == 'config' else default
    opaque = [entity for entity in description.entities if isinstance(entity, OpaqueFunction)]
    nodes = [action for action in opaque[0].execute(context) or [] if isinstance(action, Node)]
    assert [node.node_executable for node in nodes] == ['generic_shim_node']


@pytest.mark.parametrize('absent, reason', [
    ('launch.actions', 'launch / launch_ros are not installed: they have no PyPI wheel'),
    ('composition_interfaces.srv', 'composition_interfaces is missing (launch_ros imports it)'),
])
def test_what_keeps_ros2_launch_from_running_is_named(monkeypatch: pytest.MonkeyPatch, absent: str,
                                                      reason: str) -> None:
    if absent != 'launch.actions' and (missing_launch_tools() or '').startswith('launch / launch_ros'):
        pytest.skip('launch is not installed, so it is what is named missing (make launch-tools)')
    real = importlib.import_module

    def import_module(name: str, *args: object) -> ModuleType:
        if name == absent:
            raise ModuleNotFoundError(f'No module named {name!r}')
        return real(name, *args)

    monkeypatch.setattr(importlib, 'import_module', import_module)
    assert (missing_launch_tools() or '').startswith(reason)
