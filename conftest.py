"""Test-wide settings: DDS traffic stays on this machine, in a domain private to this test run and to each test
module, so that a node one module left running cannot talk to the next module's graph."""
from __future__ import annotations

import itertools
import os
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

DOMAINS = 100  # test domains 1..100 (test_two_hosts adds 100 for its own: at most 232)
_modules = itertools.count()


def pytest_configure(config) -> None:
    os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % DOMAINS))
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    os.environ.setdefault('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp')
    os.environ['ROS_PYTHON_CHECK_FIELDS'] = '1'


@pytest.fixture(autouse=True, scope='module')
def module_domain() -> Iterator[int]:
    """A ROS domain of the module's own; after the module, any process still running in it is killed and named
    in a warning (a node a test failed to stop)."""
    base = int(os.environ['ROS_DOMAIN_ID'])
    domain = 1 + (base + next(_modules)) % DOMAINS
    os.environ['ROS_DOMAIN_ID'] = str(domain)
    try:
        yield domain
    finally:
        os.environ['ROS_DOMAIN_ID'] = str(base)
        left = processes_in_domain(domain)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if left:
            warnings.warn(f'processes left running in ROS domain {domain} were killed: {left}', stacklevel=1)


def processes_in_domain(domain: int) -> dict[int, str]:
    """This user's processes (but this one) started with ROS_DOMAIN_ID=``domain``: their command lines by pid."""
    wanted = f'ROS_DOMAIN_ID={domain}'.encode()
    found = {}
    for proc in Path('/proc').glob('[0-9]*'):
        try:
            pid = int(proc.name)
            if pid != os.getpid() and wanted in (proc / 'environ').read_bytes().split(b'\0'):
                found[pid] = (proc / 'cmdline').read_bytes().replace(b'\0', b' ').decode(errors='replace')[:120]
        except OSError:
            continue
    return found
