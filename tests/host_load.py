"""How busy the host is, for the real-time tests that judge timing (returns, latencies, deadlines of a live loop).

Such a test calls ``skip_if_busy`` before it starts its nodes: it measures how late a thread scheduled as the
nodes are wakes from a short sleep (SCHED_FIFO where the nodes get it, ``calf_ros.node_main``; else normal), the
delay a tick or a message callback meets before it runs, and skips with the figure and the reason when that
delay is beyond a tenth of the test's tick. ``skip_if_missed`` skips after the run when the env node reported more
missed tick deadlines than the test can judge, ``skip_if_slower`` when the live loop's median E2E latency came out
further above virtual time's than the live pipeline's own cost explains. The messages give the load average and
CPU count as well.

Why a tenth: with the nodes at normal priority on a loaded 2-core host, threads woke 4.2 ms late at p95 (a
fifth of a 20 ms tick); the env node then missed 0.5 % of its deadlines and the live E2E p95 sat 40 % above
virtual time (bench/RESULTS.md, issue #30's rows). At SCHED_FIFO the same host woke them 0.14 ms late. A tenth of
a tick leaves half of that margin. Tests that only check correctness (a message arrives, a count adds up) do not
call these: they wait on events and tolerate any load.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

LATE_SHARE = 0.1  # of the test's tick: a p95 wake-up lateness beyond this is beyond what timing tests can judge
SAMPLES = 100  # sleeps of SLEEP_S: about 0.15 s of measuring
SLEEP_S = 0.001
REALTIME_PRIORITY = 10  # the nodes' (calf_ros.node_main.REALTIME_PRIORITY)


def load_figure() -> str:
    """The 1-minute load average per CPU, for messages."""
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    return f'load average {load:.1f} on {cpus} CPUs'


def wakeup_lateness_ms(realtime: bool) -> tuple[float, str]:
    """p95 of how late a thread wakes from a 1 ms sleep (ms), and how it was scheduled: SCHED_FIFO if
    ``realtime`` and permitted (and ``CALF_SCHEDULING`` is not ``normal``), else normal."""
    result: dict[str, object] = {}

    def probe() -> None:
        scheduling = 'normal priority'
        if realtime and os.environ.get('CALF_SCHEDULING', 'realtime') != 'normal':
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))  # this thread only
                scheduling = 'SCHED_FIFO'
            except (OSError, AttributeError):
                pass
        late = []
        for _ in range(SAMPLES):
            start = time.perf_counter()
            time.sleep(SLEEP_S)
            late.append(time.perf_counter() - start - SLEEP_S)
        result['late'], result['scheduling'] = float(np.percentile(late, 95)) * 1e3, scheduling

    thread = threading.Thread(target=probe, name='host-load-probe')
    thread.start()
    thread.join()
    return result['late'], result['scheduling']  # type: ignore[return-value]


def skip_if_busy(tick_s: float, realtime: bool) -> None:
    """Skip the calling test when threads scheduled as its nodes are (``realtime``: started by ``calf run``/``calf
    eval``, at SCHED_FIFO where permitted; False: nodes in the test's own process) wake more than a tenth of its
    tick (``tick_s``, real seconds) late at p95."""
    late_ms, scheduling = wakeup_lateness_ms(realtime)
    if late_ms > LATE_SHARE * tick_s * 1e3:
        pytest.skip(f'host too busy to judge timing: threads at {scheduling} wake {late_ms:.2f} ms late (p95), over '
                    f'{LATE_SHARE:.0%} of the {tick_s * 1e3:g} ms tick ({load_figure()})')


def skip_if_missed(missed: int, ticks: int, max_share: float = 0.01) -> None:
    """Skip after a live run whose env node missed more than ``max_share`` of its tick deadlines: the host's load,
    not the graph, then decided how the episodes went."""
    if missed > max_share * ticks:
        pytest.skip(f'the live graph missed {missed} of {ticks} tick deadlines, over {max_share:.0%} ({load_figure()}): '
                    f'beyond what a comparison of returns and latencies can judge')


HOST_EXCESS = 0.10  # live E2E p50 over virtual time's: the pipeline's own cost is 0.3-6 % (bench/RESULTS.md)


def skip_if_slower(live_p50_ms: float, model_p50_ms: float) -> None:
    """Skip after a live run whose E2E p50 exceeded virtual time's by more than ``HOST_EXCESS``: the host then added
    delays the model does not have, and a comparison of returns judges the host, not the graph."""
    if live_p50_ms > (1 + HOST_EXCESS) * model_p50_ms:
        pytest.skip(f'the live E2E p50 {live_p50_ms:.1f} ms is {live_p50_ms / model_p50_ms - 1:.0%} over virtual '
                    f'time\'s {model_p50_ms:.1f} ms, beyond the live pipeline\'s own cost ({load_figure()}): the host, '
                    f'not the graph, decided the returns')
