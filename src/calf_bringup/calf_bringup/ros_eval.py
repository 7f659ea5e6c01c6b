"""``calf eval --backend ros``: evaluate a checkpoint through the live Mode 2 graph over DDS.

The env node, the shim and the policy node run as separate processes (``runner.Graph``). The env
node appends each counted episode's result to a file this process reads as it grows (the env node's
``results_file``): DDS discovery, which on a loaded host sometimes never matched a listener here with
the env's ``episode_result`` publisher, cannot lose an episode. One more node of the graph, the eval
monitor (``calf_bringup.eval_monitor_node``), writes the shim's LinkStats (losses) and the sub-policies it
heard to a second such file. This process turns both into the same report as ``--backend sim``; each wait
is bounded and ends in one line naming what did not arrive. It joins no DDS domain itself, so its end is
the graph's bounded stop, never a wait inside DDS.

DDS discovery gives no order, but the env node counts no episode before a policy answers (its start
gate): it ticks uncounted warm-up episodes until the first action arrives, then starts episode 0 of
the count with a reset seeded by ``seed``. So the evaluation counts the env's first ``episodes``
EpisodeResults, and replays the same initial states for a seed.

Losses are the shim's counters over the counted episodes, read from LinkStats published every
``STATS_PERIOD_S`` (exact to within one period at each end, the start being when the env's results
file says the count started); 0 for ``flat_edge``, which has no shim.

``placement`` places the policy (``calf_bringup.graph``). For ``hierarchical`` the loop is complete
only once every sub-policy has been heard on ``/calf/edge/candidates``, so counting starts after
that episode; the report adds the share of the env's actions that came from each sub-policy, as the env
node counted them by ``Action.source`` (its results file's ``sources``).

Latencies are measured in real time and multiplied by ``time_scale``, so the report is in the
profile's units whatever the speed-up.

Nothing torch is imported before the nodes start (the env comes from the checkpoint's meta.json): on a busy
host that import, at this process's normal priority, was most of the time to the first counted episode.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from calf_agent.hierarchy import load_hierarchy
from calf_bringup.graph import NAMESPACE, NodeSpec, build_graph
from calf_bringup.run_options import RunOptions
from calf_bringup.runner import Graph
from calf_core import progress as progress_bars
from calf_core.envs import env_spec, make_env
from calf_core.errors import CalfError, ConfigError
from calf_core.network import resolve_network
from calf_core.yaml_files import read_json
from calf_msgs.msg import LinkStats

STARTUP_TIMEOUT_S = 60.0  # until an action reaches the env: processes start, torch loads, DDS discovers
STATS_PERIOD_S = 0.05  # the shim's LinkStats period during an evaluation
POLL_S = 0.05  # how often the nodes' files are read
DIRECTIONS = (LinkStats.DIRECTION_UPLINK, LinkStats.DIRECTION_DOWNLINK)


class JsonLinesFile:
    """A file of JSON objects, one per line, that a node appends to: read as it grows."""

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what = path, what
        self._offset, self._partial = 0, b''

    def poll(self) -> list[dict[str, Any]]:
        """The complete lines written since the last poll."""
        try:
            with self.path.open('rb') as file:
                file.seek(self._offset)
                chunk = file.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b'\n')
        records = []
        for line in lines:
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError(line)
            except ValueError:
                raise CalfError(f'{self.what} {self.path} has an unreadable line: {line[:80]!r}') from None
            records.append(record)
        return records


class ResultsFile(JsonLinesFile):
    """The env node's ``results_file``: one line per counted episode, after the line that opens the count."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, 'the env node\'s results file')
        self.results: dict[int, dict[str, Any]] = {}  # by seq, the fields of EpisodeResult
        self.counting = False  # the env's start gate opened: its count started

    def poll(self) -> list[dict[str, Any]]:
        records = super().poll()
        for result in records:
            if 'seq' in result:
                self.results[result['seq']] = result
            self.counting = True
        return records


class MonitorFile(JsonLinesFile):
    """The eval monitor node's ``out_file`` (``calf_bringup.eval_monitor_node``): the shim's latest counters per
    direction, and the env episode in which each sub-policy was first heard."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, 'the eval monitor\'s file')
        self.stats: dict[int, tuple[int, int]] = {}  # direction: (LinkStats seq, messages lost so far)
        self.heard: list[tuple[str, int]] = []  # (source, episode), in the order they were first heard

    def poll(self) -> list[dict[str, Any]]:
        records = super().poll()
        for record in records:
            if 'stats' in record:
                self.stats[record['stats']] = (record['seq'], record['lost'])
            elif 'heard' in record:
                self.heard.append((record['heard'], record['episode']))
        return records


class Listener:
    """Episode results from the env's results file; the shim's counters and the sub-policies heard, from the
    monitor's file."""

    def __init__(self, results: ResultsFile, monitor: MonitorFile, sources: tuple[str, ...] = ()) -> None:
        self.file, self.monitor = results, monitor
        self.results = results.results
        self.sources = sources

    def shares(self, seqs: range) -> dict[str, float]:
        """The share of each source among the actions the env applied in the episodes ``seqs``."""
        counts: Counter[str] = Counter()
        for seq in seqs:
            counts.update(self.results[seq].get('sources', {}))
        total = sum(counts.values()) or 1
        return {source: round(n / total, 4) for source, n in sorted(counts.items())}

    def ready_episode(self) -> int | None:
        """The env episode in which the last of the sources was first heard (0 without sources; None before)."""
        if not self.sources:
            return 0
        self.monitor.poll()
        heard = self.monitor.heard
        return heard[-1][1] if {source for source, _ in heard} >= set(self.sources) else None

    def first_counted(self) -> int | None:
        """The seq of the first episode to count (None until known): 0 once the env counts; for a
        hierarchy, the one after the first episode in which an action reached the env with every source heard."""
        self.file.poll()
        ready = self.ready_episode()
        if not self.file.counting or ready is None:
            return None
        if not self.sources:
            return 0
        live = min((seq for seq, result in self.results.items()
                    if result['actions_applied'] > 0 and result['episode'] >= ready), default=None)
        return None if live is None else live + 1

    def has(self, seqs: range) -> bool:
        self.file.poll()
        return all(seq in self.results for seq in seqs)

    def stats_seq(self) -> int:
        """The newest seq of the shim's LinkStats (-1 before the first)."""
        self.monitor.poll()
        return max((seq for seq, _ in self.monitor.stats.values()), default=-1)

    def stats_newer_than(self, seq: int) -> bool:
        """Both directions' counters were published after LinkStats ``seq``."""
        self.monitor.poll()
        return all(d in self.monitor.stats and self.monitor.stats[d][0] > seq for d in DIRECTIONS)

    def lost(self) -> dict[int, int]:
        """Messages the shim dropped so far (injected by the model, or queue overflow), per direction."""
        return {d: self.monitor.stats[d][1] for d in DIRECTIONS}


def evaluation_timeout_s(env: str, episodes: int, time_scale: float) -> float:
    """Twice the longest possible run of ``episodes`` episodes, plus a minute of headroom."""
    spec = env_spec(env)
    gym_env = make_env(env)
    max_ticks = gym_env.spec.max_episode_steps or gym_env.unwrapped.max_steps
    return 2.0 * episodes * max_ticks * spec.dt / time_scale + 60.0


def evaluate_ros(policy_dir: Path | str, network: str, episodes: int, seed: int, time_scale: float = 1.0,
                 output: TextIO | None = None, placement: str = 'flat_desktop', keep_samples: bool = False,
                 domain_id: int | None = None, progress: bool = False) -> dict[str, Any]:
    """Run ``episodes`` episodes of the checkpoint through env node -> shim(``network``) -> policy node
    (or the nodes ``placement`` places); ``progress``: a bar over the counted episodes (``calf_core.progress``).

    The graph runs in ``domain_id``, by default one derived from this process's id, so that two
    evaluations on one machine do not hear each other."""
    if episodes < 1:
        raise ConfigError(f'--episodes must be >= 1, got {episodes}')
    profile = resolve_network(network)
    hierarchy = load_hierarchy(policy_dir) if placement == 'hierarchical' else None
    sources = hierarchy.sources if hierarchy else ()
    env = hierarchy.env if hierarchy else checkpoint_env(policy_dir)
    options = RunOptions.of('sim_net', network=network, policy=Path(policy_dir).resolve(), env=env, seed=seed,
                            time_scale=time_scale, placement=placement)
    workdir = tempfile.TemporaryDirectory(prefix='calf_eval_')
    results = ResultsFile(Path(workdir.name) / 'results.jsonl')
    monitor = MonitorFile(Path(workdir.name) / 'monitor.jsonl')
    extra_parameters = {'shim': {'stats_period_s': STATS_PERIOD_S}, 'env': {'results_file': str(results.path)}}
    specs = [spec._replace(parameters={**spec.parameters, **extra_parameters[spec.name]})
             if spec.name in extra_parameters else spec for spec in build_graph(options)]
    with_shim = any(spec.name == 'shim' for spec in specs)
    if with_shim or sources:
        specs.append(NodeSpec('calf_bringup', 'eval_monitor_node', 'eval_monitor', NAMESPACE,
                              {'out_file': str(monitor.path), 'sources': ','.join(sources)}, [], 'edge',
                              dict(specs[0].additional_env)))
    domain = domain_id if domain_id is not None else 1 + os.getpid() % 100
    try:
        listener = Listener(results, monitor, sources)
        with Graph(specs, domain_id=domain, output=output) as nodes:
            wait = partial(_wait, nodes)
            wait(lambda: listener.first_counted() is not None, STARTUP_TIMEOUT_S, 'a first action to reach the env')
            first = listener.first_counted()
            counted = range(first, first + episodes)
            before = _fresh_counters(wait, listener) if with_shim else dict.fromkeys(DIRECTIONS, 0)
            with progress_bars.bar(episodes, 'episode', 'eval', allowed=progress) as bar:
                def all_counted() -> bool:
                    done = listener.has(counted)
                    bar.update(sum(seq in listener.results for seq in counted) - bar.n)
                    return done
                wait(all_counted, evaluation_timeout_s(env, episodes, time_scale), f'{episodes} episodes')
            after = _fresh_counters(wait, listener) if with_shim else before
        from calf_agent.evaluate import EpisodeLog  # torch: not before the nodes start

        log = EpisodeLog()
        for seq in counted:
            result = listener.results[seq]
            log.add(result['episode_return'], result['length'], result['success'],
                    [sample * time_scale for sample in result['e2e_samples_ms']])
        log.obs_lost, log.actions_lost = (after[d] - before[d] for d in DIRECTIONS)
        log.compute_ms = [sample * time_scale for seq in counted
                          for sample in listener.results[seq]['compute_samples_ms']]
        extra = {'forwarded_share': listener.shares(counted)} if sources else {}
        return log.report('ros', profile, keep_samples, time_scale=time_scale, policy=str(policy_dir), seed=seed,
                          graph=placement, **extra)
    finally:
        workdir.cleanup()


def checkpoint_env(policy_dir: Path | str) -> str:
    """The env a checkpoint was trained on, from its meta.json; a checkpoint without a readable one is loaded,
    so that its one-line error says what is wrong."""
    try:
        meta = read_json(Path(policy_dir) / 'meta.json', 'checkpoint meta')
    except ConfigError:
        meta = None
    if isinstance(meta, dict) and isinstance(meta.get('env'), str):
        return meta['env']
    from calf_agent.checkpoint import load_checkpoint

    return load_checkpoint(policy_dir)[1]['env']


def _fresh_counters(wait: Callable[..., None], listener: Listener) -> dict[int, int]:
    """The shim's loss counters from LinkStats published after this call."""
    seq = listener.stats_seq()
    wait(lambda: listener.stats_newer_than(seq), 20 * STATS_PERIOD_S + 5.0, 'the shim\'s LinkStats')
    return listener.lost()


def _wait(graph: Graph, done: Callable[[], bool], timeout_s: float, waiting_for: str) -> None:
    """Poll ``done()`` until it holds; raise CalfError if a node exits first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not done():
        for spec in graph.specs:
            code = graph.returncode(spec.name)
            if code is not None:
                last = next((line for line in reversed(graph.tail(spec.name)) if line.strip()), 'no output')
                raise CalfError(f'{spec.name} node exited with code {code}: {last}')
        if time.monotonic() > deadline:
            raise CalfError(f'timed out after {timeout_s:.0f} s waiting for {waiting_for}')
        graph.wait_any(POLL_S)
