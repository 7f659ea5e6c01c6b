"""What ``--network`` names, as a :class:`~calf_core.profiles.Profile`: the one entry point for it, everywhere CALF
takes a network (the ``calf`` commands, the nodes, :func:`calf_core.wrap`)."""
from __future__ import annotations

from pathlib import Path

from calf_core.profiles import Profile, check_network_name, load_profile, trace_profile
from calf_core.traces import is_bag_path


def resolve_network(name_or_path: str | Path) -> Profile:
    """A built-in profile's bare name or a .yaml/.yml/.json profile file (:func:`~calf_core.profiles.load_profile`),
    or a trace bag: its replay profile, from a seeded random row each episode (:func:`~calf_core.profiles.trace_profile`)."""
    check_network_name(name_or_path)
    if is_bag_path(name_or_path):
        from calf_core.bags import read_trace_bag  # rosbags is imported for bags only

        path = Path(name_or_path)
        return trace_profile(read_trace_bag(path), path.stem)
    return load_profile(name_or_path)
