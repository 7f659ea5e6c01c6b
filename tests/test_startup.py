"""Live start-up on a busy host: ``calf run`` imports no torch before its nodes start, and the live loop's nodes
start ahead of normal processes from their first instruction, under ``calf run`` and ``ros2 launch`` alike
(bench/bench_startup.py measures the time)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from ros_helpers import Lines

from calf_bringup.graph import NodeSpec
from calf_bringup.launch_tools import missing_launch_tools
from calf_bringup.runner import Graph

SCHEDULING = 'import os\nprint((os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)), flush=True)'
WAITS = 'import signal, sys\nsignal.signal(signal.SIGINT, lambda *_: sys.exit(0))\nsignal.pause()'  # until stopped
LAUNCH = """from calf_bringup.graph import NodeSpec
from calf_bringup.launch_support import node_action
from launch import LaunchDescription


def generate_launch_description():
    return LaunchDescription([node_action(spec) for spec in {specs!r}])
"""


@pytest.mark.parametrize('command, modules', [('run', ''), ('eval', 'import calf_bringup.ros_eval')])
@pytest.mark.slow
def test_calf_run_and_eval_over_ros_start_their_nodes_without_importing_torch(command: str, modules: str) -> None:
    """torch's import was most of the start-up at load 4 (calf run checks the policy once the nodes started;
    calf eval --backend ros imports torch for its report then)."""
    code = (f'import sys\nfrom calf_bringup.cli import build_parser\nbuild_parser([{command!r}])\n{modules}\n'
            f'print("torch" in sys.modules)')
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == 'False'


def stand_in(root: Path, name: str, realtime: bool, then: str = '') -> NodeSpec:
    """A node of package ``fake`` installed under ``root`` (an ament prefix) whose program prints its scheduling
    policy and nice value first, then runs ``then``."""
    exe = root / 'fake' / 'lib' / 'fake' / name
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f'#!{sys.executable}\n{SCHEDULING}\n{then}\n')
    exe.chmod(0o755)
    marker = root / 'fake' / 'share' / 'ament_index' / 'resource_index' / 'packages' / 'fake'
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    return NodeSpec('fake', name, name, '/calf', {}, [], 'edge', {}, realtime)


def raised_and_normal() -> tuple[str, str]:
    """What a process prints under ``raise_priority`` (SCHED_FIFO, or nice -10, as permitted), and without."""
    raised = subprocess.run([sys.executable, '-c', f'from calf_ros.scheduling import raise_priority\n'
                             f'raise_priority()\n{SCHEDULING}'], capture_output=True, text=True, check=True, timeout=60)
    return raised.stdout.strip(), str((os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)))


def test_a_live_loop_node_runs_ahead_of_normal_processes_from_its_first_instruction(tmp_path: Path) -> None:
    """What ``raise_priority`` applies (SCHED_FIFO, or nice -10, as permitted) holds before the node's program
    runs; a node outside the live loop keeps the runner's scheduling."""
    raised, normal = raised_and_normal()
    output = Lines()
    with Graph([stand_in(tmp_path, 'live', True), stand_in(tmp_path, 'other', False)], output=output,  # type: ignore[arg-type]
               install_root=tmp_path):
        assert output.wait_for_prefix('[live] ', 60) and output.wait_for_prefix('[other] ', 60), output.lines
    assert f'[live] {raised}' in output.lines
    assert f'[other] {normal}' in output.lines


def test_the_launch_prefix_raises_the_priority_then_becomes_the_program(tmp_path: Path) -> None:
    """``python -m calf_ros.scheduling PROGRAM``: the program's first instruction runs raised; a program that
    cannot run is one line."""
    raised, _ = raised_and_normal()
    stand_in(tmp_path, 'live', True)
    argv = [sys.executable, '-m', 'calf_ros.scheduling']
    done = subprocess.run([*argv, str(tmp_path / 'fake' / 'lib' / 'fake' / 'live')], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.strip() == raised
    missing = subprocess.run([*argv, str(tmp_path / 'absent')], capture_output=True, text=True, timeout=60)
    assert (missing.returncode, missing.stderr) == (
        1, f'calf_ros.scheduling: cannot run {tmp_path / "absent"}: No such file or directory\n')


MISSING_LAUNCH = missing_launch_tools(command=True)


@pytest.mark.slow
@pytest.mark.skipif(MISSING_LAUNCH is not None, reason=str(MISSING_LAUNCH))
def test_ros2_launch_starts_a_live_loop_node_ahead_of_normal_processes_from_its_first_instruction(
        tmp_path: Path) -> None:
    """The launch files' node actions (``launch_support.node_action``) start a live-loop node raised before its
    program runs, as ``calf run`` does, and leave the others' scheduling alone."""
    raised, normal = raised_and_normal()
    specs = [stand_in(tmp_path, 'live', True, WAITS), stand_in(tmp_path, 'other', False, WAITS)]
    (tmp_path / 'stand_ins.launch.py').write_text(LAUNCH.format(specs=specs))
    env = {**os.environ, 'AMENT_PREFIX_PATH': f'{tmp_path / "fake"}:{os.environ["AMENT_PREFIX_PATH"]}'}
    launch = subprocess.Popen(['ros2', 'launch', str(tmp_path / 'stand_ins.launch.py')], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    output = Lines()
    threading.Thread(target=lambda: [output.write(line) for line in launch.stdout], daemon=True).start()
    try:
        assert output.wait_for_prefix('[live-', 120) and output.wait_for_prefix('[other-', 60), output.lines
    finally:
        os.killpg(launch.pid, signal.SIGINT)
        try:
            launch.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(launch.pid, signal.SIGKILL)
            launch.wait()
    shown = [re.sub(r'^\[(\w+)-\d+\]', r'[\1]', line) for line in output.lines]  # [live-1] -> [live]
    assert f'[live] {raised}' in shown and f'[other] {normal}' in shown, output.lines
