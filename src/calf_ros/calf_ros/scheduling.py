"""Process priority of the live loop's nodes (env, shim, policy) and of CALF's Ray workers: pure, no rclpy.

``raise_priority`` moves the calling process's threads to SCHED_FIFO at ``REALTIME_PRIORITY`` where permitted
(root, CAP_SYS_NICE or an rtprio limit), else to nice ``NICE``, else leaves them; every thread started later
inherits it. ``CALF_SCHEDULING=normal`` in the environment leaves scheduling alone. A node calls it when it
starts (``calf_ros.node_main``); ``calf run`` calls it in the node's process before the node's program runs
(``calf_bringup.runner``), so that its imports, most of its start-up, do not wait behind a busy host's processes.
``ros2 launch`` cannot run code in a child before its program, so the launch files start those nodes through
``python -m calf_ros.scheduling PROGRAM ARG...`` (a launch prefix), which raises the priority and then runs the
program in its own place (``exec``: same process, the scheduling kept).

``ordinary_priority`` undoes Ray's choice for its workers, nice 15 (``RAY_worker_niceness``): beside other
CPU-bound work such a worker gets a few percent of a core, so an experiment cell or a rollout worker on a busy
machine hardly runs. Experiment cells and rollout actors call it when they start, through
``restore_ordinary_priority``, and say so where it is refused.
"""
from __future__ import annotations

import os
import sys

REALTIME_PRIORITY = 10  # SCHED_FIFO priority of the live loop's nodes: above every normal process, low among RT ones
NICE = -10  # the fallback where SCHED_FIFO is not permitted


def raise_priority() -> str:
    """Move this process's threads (and the threads they start later, which inherit it) ahead of normal
    processes, as far as permitted; say what was applied."""
    if os.environ.get('CALF_SCHEDULING', 'realtime') == 'normal':
        return 'normal (CALF_SCHEDULING=normal)'
    threads = _threads()
    try:
        for tid in threads:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
        return f'SCHED_FIFO priority {REALTIME_PRIORITY}'
    except (OSError, AttributeError):
        pass
    try:
        for tid in threads:
            os.setpriority(os.PRIO_PROCESS, tid, NICE)  # on Linux, per thread
        return f'nice {NICE} (SCHED_FIFO not permitted)'
    except (OSError, AttributeError):
        return 'normal (neither SCHED_FIFO nor a lower nice value permitted)'


def ordinary_priority() -> str:
    """Bring this process's threads from a positive nice value back to 0, as far as permitted (lowering it needs
    root, CAP_SYS_NICE or a nice limit); say what was applied."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current <= 0:
        return f'nice {current}'
    try:
        for tid in _threads():
            os.setpriority(os.PRIO_PROCESS, tid, 0)  # on Linux, per thread
    except OSError:
        return (f'nice {current}: lowering it is not permitted here, so this process yields to all other work; '
                f'start Ray with RAY_worker_niceness=0 in the environment of `ray start`')
    return f'nice 0 (was {current})'


def restore_ordinary_priority() -> str | None:
    """``ordinary_priority``: None once this process runs at ordinary priority, else what stopped it."""
    said = ordinary_priority()
    return said if os.getpriority(os.PRIO_PROCESS, 0) > 0 else None


def _threads() -> list[int]:
    """This process's thread ids (0, the calling thread, where /proc is missing)."""
    return [int(tid) for tid in os.listdir('/proc/self/task')] if os.path.isdir('/proc/self/task') else [0]


def main(argv: list[str] | None = None) -> None:
    """``python -m calf_ros.scheduling PROGRAM [ARG ...]``: raise this process's priority, then become PROGRAM."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        sys.exit('usage: python -m calf_ros.scheduling PROGRAM [ARG ...]')
    raise_priority()
    try:
        os.execvp(argv[0], argv)
    except OSError as err:
        sys.exit(f'calf_ros.scheduling: cannot run {argv[0]}: {err.strerror}')


if __name__ == '__main__':
    main()
