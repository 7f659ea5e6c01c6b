"""Whether ``ros2 launch`` can run here, and if not, exactly what is missing (one line)."""
from __future__ import annotations

import importlib
import importlib.util
import shutil

GET_THEM = 'a ROS 2 install has them; without one, make launch-tools LAUNCH_BUNDLE=DIR (see the README)'


def missing_launch_tools(command: bool = False) -> str | None:
    """None if the launch API imports (and, with ``command``, the ``ros2 launch`` verb exists), else why not."""
    try:
        importlib.import_module('launch.actions')
    except ImportError:
        return f'launch / launch_ros are not installed: they have no PyPI wheel; {GET_THEM}'
    try:
        importlib.import_module('composition_interfaces.srv')
    except ImportError:
        return ('composition_interfaces is missing (launch_ros imports it): build it with make launch-tools, '
                'and source env.sh, which sources the overlay it builds')
    try:
        importlib.import_module('launch_ros.actions')
    except ImportError as err:
        return f'launch_ros is not installed or broken ({err}); {GET_THEM}'
    if command and (shutil.which('ros2') is None or importlib.util.find_spec('ros2launch') is None):
        return f'the ros2 command or its launch verb (ros2cli, ros2launch) is not installed; {GET_THEM}'
    return None
