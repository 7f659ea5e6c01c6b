"""Live start-up on a busy host: ``calf run`` imports no torch before its nodes start, and the live loop's nodes
start ahead of normal processes from their first instruction (bench/bench_startup.py measures the time)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ros_helpers import Lines

from calf_bringup.graph import NodeSpec
from calf_bringup.runner import Graph

SCHEDULING = 'import os\nprint((os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)), flush=True)'


@pytest.mark.parametrize('command, modules', [('run', ''), ('eval', 'import calf_bringup.ros_eval')])
def test_calf_run_and_eval_over_ros_start_their_nodes_without_importing_torch(command: str, modules: str) -> None:
    """torch's import was most of the start-up at load 4 (calf run checks the policy once the nodes started;
    calf eval --backend ros imports torch for its report then)."""
    code = (f'import sys\nfrom calf_bringup.cli import build_parser\nbuild_parser([{command!r}])\n{modules}\n'
            f'print("torch" in sys.modules)')
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == 'False'


def stand_in(root: Path, name: str, realtime: bool) -> NodeSpec:
    """A node whose program prints its scheduling policy and nice value, then exits."""
    exe = root / 'fake' / 'lib' / 'fake' / name
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f'#!{sys.executable}\n{SCHEDULING}\n')
    exe.chmod(0o755)
    return NodeSpec('fake', name, name, '/calf', {}, [], 'edge', {}, realtime)


def test_a_live_loop_node_runs_ahead_of_normal_processes_from_its_first_instruction(tmp_path: Path) -> None:
    """What ``raise_priority`` applies (SCHED_FIFO, or nice -10, as permitted) holds before the node's program
    runs; a node outside the live loop keeps the runner's scheduling."""
    raised = subprocess.run([sys.executable, '-c', f'from calf_ros.scheduling import raise_priority\n'
                             f'raise_priority()\n{SCHEDULING}'], capture_output=True, text=True, check=True, timeout=60)
    normal = str((os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)))
    output = Lines()
    with Graph([stand_in(tmp_path, 'live', True), stand_in(tmp_path, 'other', False)], output=output,  # type: ignore[arg-type]
               install_root=tmp_path):
        assert output.wait_for_prefix('[live] ', 60) and output.wait_for_prefix('[other] ', 60), output.lines
    assert f'[live] {raised.stdout.strip()}' in output.lines
    assert f'[other] {normal}' in output.lines
