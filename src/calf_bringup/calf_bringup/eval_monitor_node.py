"""The evaluation monitor: what ``calf eval --backend ros`` needs from the graph's topics, as a file.

It listens to the shim's LinkStats and, for a hierarchy, to the sub-policies' candidates, and appends
JSON lines to ``out_file``: ``{"stats": direction, "seq": n, "lost": m}`` for every LinkStats (``lost``:
the messages the shim dropped so far in that direction, by its model or its full queue), and
``{"heard": source, "episode": e}`` the first time each of ``sources`` is heard. ``calf eval`` reads
the file as it grows, as it reads the env's results file (``calf_bringup.ros_eval``).

So the evaluating process itself joins no DDS domain. Destroying its in-process node once waited in
Fast DDS's C code for over ten minutes, where no signal could end it; a node process is stopped with a
bounded wait, then killed (``calf_bringup.runner``).
"""
from __future__ import annotations

import sys
from typing import Any

from rclpy.node import Node

from calf_bringup.graph import CANDIDATES, SHIM_STATS
from calf_core.errors import ConfigError
from calf_msgs.msg import Action, LinkStats
from calf_ros.json_lines import JsonLinesWriter
from calf_ros.node_main import run_node
from calf_ros.node_params import declare_parameters
from calf_ros.qos import RESULTS, STREAM

PARAMETERS: dict[str, tuple[Any, str]] = {
    'out_file': ('', 'append what was heard to this file, as JSON lines'),
    'sources': ('', 'comma-separated sub-policy names whose first candidate action to report ("": none)'),
}


class EvalMonitorNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__('eval_monitor', **kwargs)
        p = declare_parameters(self, PARAMETERS)
        if not p['out_file']:
            raise ConfigError('no out_file given: pass --ros-args -p out_file:=PATH')
        self._out = JsonLinesWriter(p['out_file'], 'out_file')
        self._unheard = {name for name in p['sources'].split(',') if name}
        self.create_subscription(LinkStats, SHIM_STATS, self._on_stats, RESULTS)
        if self._unheard:
            self.create_subscription(Action, CANDIDATES, self._on_candidate, STREAM.profile())

    def _on_stats(self, msg: LinkStats) -> None:
        self._out.write({'stats': int(msg.direction), 'seq': int(msg.seq),
                         'lost': int(msg.dropped_injected + msg.dropped_queue)})

    def _on_candidate(self, msg: Action) -> None:
        if msg.source in self._unheard:
            self._unheard.discard(msg.source)
            self._out.write({'heard': msg.source, 'episode': int(msg.episode)})

    def destroy_node(self) -> None:
        self._out.close()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    return run_node('eval_monitor_node', EvalMonitorNode, args)


if __name__ == '__main__':
    sys.exit(main())
