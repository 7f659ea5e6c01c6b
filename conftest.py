"""Test-wide settings: DDS traffic stays on this machine, in a domain private to this test run."""
from __future__ import annotations

import os


def pytest_configure(config) -> None:
    os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    os.environ.setdefault('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp')
    os.environ['ROS_PYTHON_CHECK_FIELDS'] = '1'
