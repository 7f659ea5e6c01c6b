"""``raise_priority``: the live loop's nodes ahead of normal processes, on every thread, as far as permitted."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = '''
import os, threading
from calf_ros.node_main import raise_priority
before = threading.Event()
threading.Thread(target=before.wait, daemon=True).start()  # a thread started before, as DDS's or torch's
said = raise_priority()
after = threading.Event()
threading.Thread(target=after.wait, daemon=True).start()  # one started later inherits it
tids = [int(t) for t in os.listdir('/proc/self/task')]
print(said)
print(sorted({(os.sched_getscheduler(t), os.getpriority(os.PRIO_PROCESS, t)) for t in tids}))
'''


def probe(scheduling: str | None) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if k != 'CALF_SCHEDULING'}
    if scheduling is not None:
        env['CALF_SCHEDULING'] = scheduling
    done = subprocess.run([sys.executable, '-c', PROBE], capture_output=True, text=True, env=env, check=True, timeout=60)
    said, threads = done.stdout.splitlines()
    return said, threads


@pytest.mark.skipif(not os.path.isdir('/proc/self/task'), reason='Linux only')
@pytest.mark.slow
def test_every_thread_gets_what_raise_priority_says() -> None:
    said, threads = probe(None)
    if said.startswith('SCHED_FIFO'):
        assert threads == f'[({os.SCHED_FIFO}, 0)]'  # every thread, the one started before too
    elif said.startswith('nice'):
        assert threads == f'[({os.SCHED_OTHER}, -10)]'
    else:
        assert said == 'normal (neither SCHED_FIFO nor a lower nice value permitted)'
    assert probe('normal') == ('normal (CALF_SCHEDULING=normal)', f'[({os.SCHED_OTHER}, {os.getpriority(os.PRIO_PROCESS, 0)})]')


ORDINARY_PROBE = '''
import os, threading
from calf_ros.scheduling import ordinary_priority, restore_ordinary_priority
os.setpriority(os.PRIO_PROCESS, 0, max(15, os.getpriority(os.PRIO_PROCESS, 0)))  # as Ray starts its workers
before = threading.Event()
threading.Thread(target=before.wait, daemon=True).start()  # a thread started before, as Ray's own
print(ordinary_priority())
print(sorted({os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir('/proc/self/task')}))
print(restore_ordinary_priority())
'''


@pytest.mark.skipif(not os.path.isdir('/proc/self/task'), reason='Linux only')
def test_ordinary_priority_undoes_a_ray_workers_nice_15_on_every_thread_or_says_how() -> None:
    """Beside four CPU-bound processes, Ray's experiment cells at nice 15 got about 2 % of a core each, and a
    table of eight small cells did not finish in 10 minutes."""
    done = subprocess.run([sys.executable, '-c', ORDINARY_PROBE], capture_output=True, text=True, check=True,
                          timeout=60)
    said, threads, refused = done.stdout.splitlines()
    if said.startswith('nice 0 (was '):
        assert threads == '[0]'
        assert refused == 'None'
    else:
        assert 'lowering it is not permitted' in said and 'RAY_worker_niceness=0' in said
        assert threads != '[0]'
        assert 'lowering it is not permitted' in refused
