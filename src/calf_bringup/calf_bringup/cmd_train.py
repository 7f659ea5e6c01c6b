"""``calf train``: PPO under a training regime or any network profile."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import gymnasium as gym

from calf_agent.checkpoint_meta import MAX_ACTION_HISTORY, MAX_FRAMES, MAX_PLAN_HORIZON
from calf_agent.dist.key import KEY_ENV, KEY_FILE, create_key, parse_key, read_key_file
from calf_agent.dist.learner import MAX_WORKERS as DEFAULT_MAX_WORKERS
from calf_agent.dist.learner import SUMMARY
from calf_agent.dist.sync import DEFAULT_APS_DELTA, DEFAULT_LAG_CAP, parse_sync
from calf_agent.dynamics import MAX_MEMBERS
from calf_agent.imitation import train_student
from calf_agent.planner import AUTO, LONG_FIT_EPOCHS, MAX_MODEL_EPOCHS, PlannerConfig, tail_network, train_planner
from calf_agent.regimes import REGIMES, default_representation, regime_profile, train_defaults, train_policy
from calf_agent.representation import Representation
from calf_agent.train_state import EVERY_SECONDS, EVERY_STEPS
from calf_bringup.cli_args import MAX_ENVS, MAX_STEPS, count
from calf_bringup.distributed import run_training, training_graph
from calf_core import progress
from calf_core.atomic import check_out_parent
from calf_core.envs import add_env_arguments, make_env, resolve_env_arg
from calf_core.errors import ConfigError
from calf_core.network import resolve_network
from calf_core.task_spec import ALGOS, SAC_ALGOS

MAX_WORKERS = 256


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('train', help='train a policy with PPO, SAC or BPQL under a network regime')
    add_env_arguments(parser)
    parser.add_argument('--regime', choices=sorted(REGIMES), default='full',
                        help='baseline (sim_clean), delay_only, or full (full_net_aware)')
    parser.add_argument('--network', help='train under this profile or trace instead of the regime\'s')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--algo', choices=ALGOS,
                        help='ppo, or sac for continuous (Box) actions: off-policy, a replay buffer, one env by '
                             'default; or bpql: sac whose critic learns on the true, undelayed state while the '
                             'actor acts on what the network delivers (default: the env spec\'s algo, else ppo)')
    parser.add_argument('--smoothness', type=float, metavar='LAMBDA',
                        help='sac, bpql: weight of a smoothness term (CAPS) in the actor\'s loss, the change of the '
                             'mean action from one decision to the next; smooth actors suit motors and survive a '
                             'late action better (default 0, e.g. 0.5)')
    parser.add_argument('--steps', type=count(1, MAX_STEPS), help='environment decisions to train for (default per env)')
    parser.add_argument('--envs', type=count(1, MAX_ENVS), help='envs per rollout (default 8 for CartPole; SAC: 1, one update per env step); from 32 they '
                                                 'run as one vector env, with the links of all of them in numpy')
    parser.add_argument('--frames', type=count(1, MAX_FRAMES), help='frame stack k (default: d + 1, d = typical delay in ticks)')
    parser.add_argument('--action-history', type=count(0, MAX_ACTION_HISTORY), help='actions remembered (default: d)')
    parser.add_argument('--delay-state', action=argparse.BooleanOptionalAction, default=None,
                        help='also give the policy the delay state: which of its remembered actions were still in '
                             'flight, the frames\' spacing, the applied action\'s delay and whether the env held '
                             '(from Observation.applied_obs_seq/applied_index; default: the regime\'s choice)')
    parser.add_argument('--obs-age', action='store_true',
                        help='also give the policy the age of the newest observation (sim only: a policy node '
                             'has no clock shared with the env)')
    parser.add_argument('--plan-horizon', type=_plan_horizon, default=1, metavar='H',
                        help='actions per message: a plan for the H ticks after the observation (default 1); '
                             'model planner: auto covers 99.9 %% of the ticks\' silences on the training network '
                             '(auto:NETWORK: on NETWORK), cut to the ticks its model predicts')
    parser.add_argument('--planner', choices=('ppo', 'model'), default='ppo',
                        help='how plans are made: ppo (one head per element, loss on executed elements) or '
                             'model (a base policy on the bare env, PPO or with --algo sac SAC, plus a learned '
                             'dynamics model rolled forward; the rollout lead adapts to the round trips the '
                             'observations report); default ppo')
    parser.add_argument('--plan-lead', type=count(0, MAX_PLAN_HORIZON - 1), metavar='L',
                        help='model planner: a fixed count of ticks before a plan can arrive (default: adaptive, the '
                             '90th percentile of the last 20 reported round trips less one, at most the network\'s '
                             'p95 round trip in ticks less one, which also stands before the first report)')
    parser.add_argument('--ensemble', type=count(1, MAX_MEMBERS), metavar='K',
                        help='model planner: dynamics models in the ensemble; plans follow their mean and are cut '
                             'where they disagree (default 5)')
    parser.add_argument('--model-epochs', type=count(1, MAX_MODEL_EPOCHS), metavar='E',
                        help='model planner: epochs of the dynamics model\'s first fit, each refit running half as '
                             f'many (default {PlannerConfig.epochs}, enough for the pendulums; {LONG_FIT_EPOCHS} '
                             'raised HalfCheetah-v5 behind wifi_degraded from 73 %% to 91 %% of its clean return, '
                             'for about 10 minutes more of fitting)')
    parser.add_argument('--silence-lengths', action='store_true',
                        help='model planner with --plan-horizon auto: cut each plan to the length the silence before '
                             'it calls for on that link (shorter while the link is good; off by default: it cost '
                             'CartPole returns behind outage_burst)')
    parser.add_argument('--feedback-plans', action='store_true',
                        help='model planner, continuous (Box) actions: each plan element carries the base policy\'s '
                             'gains at its predicted state, and the env corrects it by what it observes as it applies '
                             'it (over a SAC base, --algo sac: kept 88 %% of the double pendulum\'s clean return behind '
                             'Wi-Fi-D over 3 seeds: results/robots_double_pendulum.md)')
    parser.add_argument('--expert', type=Path, metavar='DIR',
                        help='imitation: distil this clean-link policy (a --regime baseline checkpoint of the same '
                             'env) into a delay-aware student by DAgger; the student acts on what the network '
                             'delivers, the expert labels with the true state (continuous actions)')
    dist = parser.add_argument_group('distributed training (a learner and rollout workers over DDS)')
    dist.add_argument('--workers', type=count(1, MAX_WORKERS), metavar='N',
                      help='start a learner node and N local rollout worker processes (each runs --envs envs)')
    dist.add_argument('--sync', default='every', metavar='every|period:K|aps[:DELTA]',
                      help='when a worker gets new weights: after every update, every K updates, or when its policy '
                           f'has drifted more than DELTA (mean KL; aps alone: {DEFAULT_APS_DELTA:g}); default every')
    dist.add_argument('--lag-cap', type=count(1, MAX_STEPS), default=DEFAULT_LAG_CAP,
                      help=f'a worker lagging more versions gets weights under any --sync (default {DEFAULT_LAG_CAP})')
    dist.add_argument('--learner-network', metavar='PROFILE',
                      help='route every learner<->worker topic through the generic shim with this profile')
    dist.add_argument('--eval-every', type=count(1, MAX_STEPS), default=10_000,
                      help='env steps between checkpoint + deterministic evaluation (eval.csv; default 10000)')
    dist.add_argument('--stop-return', type=float, default=0.0,
                      help='stop once an evaluation reaches this mean return (default 0: the whole budget)')
    dist.add_argument('--resume', action='store_true',
                      help='continue a stopped training in --out: a distributed one from its checkpoint, a SAC or '
                           'BPQL one from its snapshot (train_state.safetensors), on a fresh episode')
    dist.add_argument('--key', metavar='FILE',
                      help=f'key file shared with the workers (mode 0600); default: the key in {KEY_ENV}, else '
                           f'OUT/{KEY_FILE} (created if missing; copy it to remote workers: calf worker --key)')
    dist.add_argument('--max-workers', type=count(1, MAX_WORKERS), default=DEFAULT_MAX_WORKERS,
                      help=f'workers the learner admits at most, local and remote (default {DEFAULT_MAX_WORKERS})')
    dist.add_argument('--domain-id', type=int, help='ROS_DOMAIN_ID of the processes (default: inherited)')
    dist.add_argument('--cluster', metavar='ray[:ADDRESS]',
                      help='run the workers as Ray actors on a cluster (ray: the running one, ray:local: start '
                           'one here, ray:HOST:PORT), frames through Ray\'s object store; needs Ray '
                           '(pip install -r requirements-ray.lock)')
    parser.add_argument('--snapshot-every', type=count(1, MAX_STEPS), metavar='STEPS',
                        help=f'sac, bpql: env steps between snapshots --resume continues from (also every '
                             f'{EVERY_SECONDS / 60:g} min; default {EVERY_STEPS})')
    parser.add_argument('--out', type=Path, required=True, help='checkpoint directory')
    parser.add_argument('--quiet', action='store_true', help='no progress bar')
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    args.env = resolve_env_arg(args.env, args.env_spec)
    network = args.network or regime_profile(args.regime)
    check_out_parent(args.out, 'checkpoint directory')  # before any work: trainings create it
    if (isinstance(args.plan_horizon, str) or args.silence_lengths) and args.planner != 'model':
        raise ConfigError(f'--plan-horizon {args.plan_horizon} and --silence-lengths are the model planner\'s: add '
                          '--planner model, or give a number of ticks')
    if args.algo in SAC_ALGOS and args.workers is not None:
        raise ConfigError(f'--algo {args.algo} trains in one process: drop --workers, or use --algo ppo')
    sac = (args.workers is None and args.expert is None and args.planner != 'model'
           and train_defaults(args.env, args.algo).algo in SAC_ALGOS)
    if args.snapshot_every is not None and not sac:
        raise ConfigError('--snapshot-every spaces the snapshots of a single-process SAC or BPQL training: add '
                          '--algo sac or bpql, or drop it')
    if args.workers is not None:
        return _train_distributed(args, network)
    if args.learner_network or args.sync != 'every' or args.key or args.cluster:
        raise ConfigError('--sync, --learner-network, --key and --cluster need --workers N')
    if args.resume and not sac:
        raise ConfigError('--resume continues a SAC or BPQL training from its snapshot (add --algo sac or bpql) or a '
                          'distributed one (add --workers N)')
    if args.expert is not None:
        return _train_student(args, network)
    if args.ensemble is not None and args.planner != 'model':
        raise ConfigError('--ensemble sizes the model planner\'s dynamics ensemble: add --planner model')
    if args.model_epochs is not None and args.planner != 'model':
        raise ConfigError('--model-epochs sets how long the model planner\'s dynamics model is fitted: add --planner '
                          'model')
    if args.feedback_plans and args.planner != 'model':
        raise ConfigError('--feedback-plans gives the model planner\'s plans feedback: add --planner model')
    if args.planner == 'model':
        return _train_model_planner(args, network)
    rep = _representation(args, network)
    result = train_policy(args.env, network, args.seed, args.out, steps=args.steps, regime=args.regime,
                          rep=rep, plan_horizon=args.plan_horizon, progress=not args.quiet, num_envs=args.envs,
                          algo=args.algo, smoothness=args.smoothness, resume=args.resume,
                          snapshot_every=args.snapshot_every or EVERY_STEPS)
    print(json.dumps({'out': str(result.out_dir), 'steps': result.global_steps,
                      'mean_return': result.mean_return, 'wall_time_s': round(result.wall_time_s, 1)}))
    return 0


def _plan_horizon(text: str) -> int | str:
    """``--plan-horizon``: ticks in [1, MAX_PLAN_HORIZON], ``auto`` or ``auto:NETWORK``."""
    if text == AUTO or text.startswith(AUTO + ':') and len(text) > len(AUTO) + 1:
        return text
    try:
        return count(1, MAX_PLAN_HORIZON)(text)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f'{err}, or auto, or auto:NETWORK') from None


def _train_model_planner(args: argparse.Namespace, network: str) -> int:
    """The base policy on the bare env into OUT/base (PPO, or SAC with ``--algo sac`` or a spec's ``algo:
    sac``), then the dynamics model and the planner into OUT."""
    if isinstance(args.plan_horizon, str):
        resolve_network(tail_network(args.plan_horizon, network) or network)  # a bad name fails before training
    elif args.silence_lengths:
        raise ConfigError('--silence-lengths cuts plans of an automatic horizon: add --plan-horizon auto')
    elif args.plan_horizon < 2:
        raise ConfigError('--planner model needs --plan-horizon >= 2 (16 covers wifi_degraded), or auto')
    if train_defaults(args.env).agent != 'mlp':
        raise ConfigError(f'--planner model rolls a fully observed state forward, and {args.env} trains a '
                          f'memory (LSTM) policy on partial observations: use --planner ppo')
    if args.plan_lead is not None and isinstance(args.plan_horizon, int) and not 0 <= args.plan_lead < args.plan_horizon:
        raise ConfigError(f'--plan-lead must be in [0, {args.plan_horizon}), got {args.plan_lead}')
    if args.feedback_plans and not isinstance(make_env(args.env).action_space, gym.spaces.Box):
        raise ConfigError(f'--feedback-plans corrects continuous actions, and {args.env}\'s are discrete: drop it')
    algo = train_defaults(args.env, args.algo).algo
    if algo not in ('ppo', 'sac'):
        raise ConfigError(f'--planner model plans over a PPO or SAC base policy, not {algo.upper()}: use --algo sac '
                          'or ppo')
    base = train_policy(args.env, regime_profile('baseline'), args.seed, args.out / 'base', steps=args.steps,
                        regime='baseline', progress=not args.quiet, algo=algo)
    cfg = PlannerConfig(members=args.ensemble or PlannerConfig.members, silence_lengths=args.silence_lengths,
                        feedback=args.feedback_plans, epochs=args.model_epochs or PlannerConfig.epochs)
    meta = train_planner(base.out_dir, args.out, network, args.plan_horizon, args.seed, lead=args.plan_lead,
                         cfg=cfg, progress=not args.quiet)
    print(json.dumps({'out': str(args.out), 'base_mean_return': base.mean_return, 'lead': meta['planner']['lead'],
                      'dynamics': meta['planner']['dynamics']}))
    return 0


def _train_distributed(args: argparse.Namespace, network: str) -> int:
    """A learner node plus ``--workers`` worker processes; the checkpoint is the same as ``calf train``'s."""
    if args.planner == 'model' or args.expert is not None:
        raise ConfigError(f'--{"planner model" if args.planner == "model" else "expert"} trains in one process '
                          '(a dynamics model, or a student by imitation): drop --workers')
    defaults = train_defaults(args.env, 'ppo')
    if defaults.agent == 'lstm' and (args.envs or defaults.num_envs) < defaults.ppo.num_minibatches:
        raise ConfigError(f'{args.env} trains a memory (LSTM) policy on whole env sequences in '
                          f'{defaults.ppo.num_minibatches} minibatches: give each worker --envs '
                          f'{defaults.ppo.num_minibatches} or more')
    parse_sync(args.sync, args.lag_cap)
    if args.max_workers < args.workers:
        raise ConfigError(f'--max-workers {args.max_workers} admits fewer than the {args.workers} local --workers')
    if args.resume and not (args.out / 'meta.json').is_file():
        raise ConfigError(f'--resume: {args.out} holds no checkpoint (meta.json): train without --resume first')
    key_file = _key_file(args)
    params = {'out': str(args.out.resolve()), 'env': args.env, 'network': network, 'regime': args.regime,
              'frames': args.frames or 0, 'action_history': -1 if args.action_history is None else args.action_history,
              'delay_state': -1 if args.delay_state is None else int(args.delay_state),
              'obs_age': args.obs_age, 'plan_horizon': args.plan_horizon,
              'steps': args.steps or defaults.total_steps, 'seed': args.seed, 'sync': args.sync,
              'lag_cap': args.lag_cap, 'eval_every': args.eval_every, 'stop_return': float(args.stop_return),
              'resume': args.resume, 'max_workers': args.max_workers}
    if args.cluster:
        return _train_on_ray(args, params, args.envs or defaults.num_envs, key_file)
    specs = training_graph(params, args.workers, args.envs or defaults.num_envs, args.seed,
                           args.learner_network, args.out, key_file)
    _make_key(args, key_file)
    with progress.watching(args.out / '.progress', 'step', 'train', allowed=not args.quiet):
        code = run_training(specs, args.domain_id)
    return _report(args, code)


def _make_key(args: argparse.Namespace, key_file: str) -> None:
    """Create OUT/dist.key if the nodes are to read it (once every argument has been checked)."""
    if key_file == str(args.out.resolve() / KEY_FILE):
        create_key(Path(key_file))
        print(f'distributed-training key: {key_file} (remote workers: calf worker --key COPY_OF_IT)', file=sys.stderr)


def _train_on_ray(args: argparse.Namespace, params: dict, envs: int, key_file: str) -> int:
    """The learner here, ``--workers`` Ray actors on the cluster ``--cluster`` names."""
    from calf_agent.dist.learner_node import PARAMETERS, learner_config
    from calf_bringup.distributed_ray import train_on_ray
    from calf_bringup.experiment_ray import parse_cluster
    address = parse_cluster(args.cluster)
    if args.learner_network or args.domain_id is not None:
        raise ConfigError('--learner-network and --domain-id shape DDS traffic; with --cluster ray the frames travel '
                          'through Ray\'s object store: drop them')
    _make_key(args, key_file)
    cfg = learner_config({**{name: default for name, (default, _) in PARAMETERS.items()}, **params,
                          'key_file': key_file})
    with progress.watching(args.out / '.progress', 'step', 'train', allowed=not args.quiet):
        train_on_ray(cfg, address, args.workers, envs, args.seed, params['network'],
                     log=lambda line: print(line, file=sys.stderr))
    return _report(args, 0)


def _report(args: argparse.Namespace, code: int) -> int:
    """The run's one JSON line from its ``distributed.json``; ``code``."""
    summary = args.out / SUMMARY
    if code == 0 and summary.is_file():
        done = json.loads(summary.read_text())
        print(json.dumps({'out': str(args.out), 'steps': done['env_steps'], 'updates': done['updates'],
                          'wall_time_s': done['wall_time_s'], 'weights_bytes': done['weights_sent']['bytes'],
                          'wasted_fraction': done['wasted_fraction'], 'evals': done['evals'][-1:]}))
    return code


def _key_file(args: argparse.Namespace) -> str:
    """The key file the nodes read: --key, none (they read CALF_DIST_KEY), or OUT/dist.key (created later)."""
    if args.key:
        read_key_file(Path(args.key))
        return str(Path(args.key).resolve())
    if os.environ.get(KEY_ENV):
        parse_key(os.environ[KEY_ENV], KEY_ENV)
        return ''
    return str(args.out.resolve() / KEY_FILE)


def _representation(args: argparse.Namespace, network: str) -> Representation | None:
    """The representation the flags ask for, or None for the network's default."""
    if args.frames is None and args.action_history is None and not args.obs_age and args.delay_state is None:
        return None
    default = default_representation(args.env, resolve_network(network), args.delay_state)
    return Representation(frames=args.frames or default.frames,
                          actions=default.actions if args.action_history is None else args.action_history,
                          obs_age=args.obs_age, delay_state=default.delay_state)


def _train_student(args: argparse.Namespace, network: str) -> int:
    if args.algo is not None or args.planner == 'model':
        raise ConfigError('--expert trains a student by imitation: drop --algo and --planner model')
    result = train_student(args.expert, args.env, network, args.seed, args.out, steps=args.steps,
                           plan_horizon=args.plan_horizon, rep=_representation(args, network), regime=args.regime,
                           num_envs=args.envs, progress=not args.quiet)
    print(json.dumps({'out': str(result.out_dir), 'steps': result.global_steps,
                      'mean_return': result.mean_return, 'wall_time_s': round(result.wall_time_s, 1)}))
    return 0
