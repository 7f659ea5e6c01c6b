"""Launch actions from graph descriptions: the one body of every launch file in ``launch/``.

Only the launch files import this module, so it may import ``launch`` and ``launch_ros``, which
exist on a full ROS 2 install only (or from the launch bundle, see the README).

A launch ends when its work ends: when any node exits on its own, the launch logs which one and
with what code, and shuts the others down. A node that finished (the env node after ``episodes:=N``)
ends the launch with exit code 0; a node that failed (exit code other than 0, e.g. a bad
checkpoint at start-up) ends it with exit code 1, after the node's own error line. With
``respawn:=true``, launch starts a failed node again (``respawn_delay``, ``respawn_retries``) and the
launch ends only when a node finishes, or fails once more than ``respawn_retries`` allows.

The live loop's nodes (``NodeSpec.realtime``) start through ``calf_ros.scheduling`` as their launch prefix, after
any ``--launch-prefix`` given: their priority is raised before their program's first instruction, as under ``calf
run`` (``--launch-prefix-filter`` does not apply to them).
"""
from __future__ import annotations

import shlex
import sys
from collections.abc import Callable

from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction, SetEnvironmentVariable, Shutdown
from launch.events.process import ProcessExited
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from calf_bringup.graph import NodeSpec, build_graph
from calf_bringup.run_options import IMPAIR, NODES, SHIM, RunOptions, launch_arguments
from launch import LaunchContext, LaunchDescription

REALTIME_PREFIX = f'{shlex.quote(sys.executable)} -m calf_ros.scheduling'
"""Raises the process's priority, then runs the node's program in its place (``calf_ros.scheduling.main``)."""


class NodeFailed(RuntimeError):
    """A node of the launch exited with an error code: raised so that ``ros2 launch`` exits with 1."""


def launch_description(mode: str) -> LaunchDescription:
    """Declare the run options of ``mode`` as arguments; at launch, start its graph (``build_graph``),
    after ROS_DOMAIN_ID when one is given, with a warning for each deprecated argument used."""
    arguments = launch_arguments(SHIM if mode == IMPAIR else NODES)

    def nodes(context: LaunchContext) -> list:
        values = {name: LaunchConfiguration(name).perform(context) for name, _, _ in arguments}
        options = RunOptions.from_text(mode, values)
        actions: list = [LogInfo(msg=f'warning: {note}') for note in options.warnings]
        if options.domain_id is not None:
            actions.append(SetEnvironmentVariable('ROS_DOMAIN_ID', str(options.domain_id)))
        retries = options.respawn_retries if options.respawn else 0
        return actions + [node_action(spec, options.respawn, options.respawn_delay, retries)
                          for spec in build_graph(options)]

    declared = [DeclareLaunchArgument(name, default_value=default, description=text)
                for name, default, text in arguments]
    return LaunchDescription([*declared, OpaqueFunction(function=nodes)])


def node_action(spec: NodeSpec, respawn: bool = False, delay_s: float = 0.0, retries: int = 0) -> Node:
    """The launch action that starts ``spec`` (a live-loop node through ``REALTIME_PREFIX``), its output on the
    screen under its executable's name; with ``respawn``, started again ``delay_s`` after a failure, ``retries``
    times at most."""
    prefix = [LaunchConfiguration('launch-prefix', default=''), f' {REALTIME_PREFIX}'] if spec.realtime else None
    return Node(package=spec.package, executable=spec.executable, exec_name=spec.executable, name=spec.name,
                namespace=spec.namespace, parameters=[spec.parameters], remappings=spec.remappings,
                additional_env=spec.additional_env, output='screen', prefix=prefix, respawn=respawn,
                respawn_delay=delay_s, respawn_max_retries=retries, on_exit=_on_exit(spec.name, retries, delay_s))


def _on_exit(name: str, retries: int, delay_s: float) -> Callable[[ProcessExited, LaunchContext], list | None]:
    """What happens when node ``name`` exits: nothing while the launch is shutting down; after a failure
    that launch's respawn will restart (``retries`` per node), a line saying so; else a shutdown."""
    failures = 0

    def handler(event: ProcessExited, context: LaunchContext) -> list | None:
        nonlocal failures
        if context.is_shutdown:
            return None
        if event.returncode != 0 and failures < retries:
            failures += 1
            return [LogInfo(msg=f'{name} exited with code {event.returncode}: starting it '
                                f'again in {delay_s:g} s (restart {failures} of {retries})')]
        if event.returncode != 0:
            raise NodeFailed(f'{name} exited with code {event.returncode} (its error is above): stopping the launch')
        return [LogInfo(msg=f'{name} finished (exit code 0): stopping the launch'),
                Shutdown(reason=f'{name} finished')]

    return handler
