"""Weights that cost less on the wire: deltas of changed tensors in reduced precision, checked by checksum.

The learner remembers, per worker, the state it last sent (as the worker holds it). A delta carries only
the tensors whose reduced value differs from that state. With ``fp16`` or ``bf16`` a float32 tensor
travels cast to that type. With ``int8`` it travels as its difference from the held tensor, quantised to
integers in [-L, L] times one float32 step per tensor (the largest difference over L; ``<name>#step`` in
the delta): the worker adds ``q * step`` to what it holds. L is the first of ``INT8_LADDER`` whose delta keeps
the worker's policy within the KL bound (``delta_levels``). What
rounding leaves out is not lost: the next delta is taken against the state the worker then holds, so
it carries the remainder (error feedback). Other dtypes travel as they are (the normaliser's float64
statistics, integer buffers). The worker applies a delta only onto exactly its ``base_version`` and
checks that the result has the ``checksum`` the learner computed; otherwise it asks for a snapshot
(every tensor, full precision). The learner also sends a snapshot when the reduced policy strays from
the full-precision one by more than ``KL_BOUND``.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch
from torch import Tensor

PRECISIONS = {'fp16': torch.float16, 'bf16': torch.bfloat16, 'int8': torch.int8}
DEFAULT_PRECISION = 'int8'
KL_BOUND = 1e-3
"""Largest mean KL(full ‖ reduced) on the learner's last batch a delta may cause; above it, a snapshot."""
INT8_LEVELS = 2
"""Largest quantised step of an ``int8`` difference: 5 levels, so that zstd packs a value into about 2.5
bits (CartPole: 12x fewer bytes per delta than a float32 snapshot, 15 levels gave 8x); the remainder
rides on the next delta, and the KL bound holds the worker's policy to the learner's."""
INT8_LADDER = (INT8_LEVELS, 7, 127)
"""The levels L the learner tries in turn, each finer delta only when the coarser one strays past the KL
bound, before a snapshot."""
STEP = '#step'
"""Suffix of the name under which an ``int8`` difference's step travels."""

State = dict[str, Tensor]


def checksum(state: Mapping[str, Tensor]) -> str:
    """SHA-256 of every tensor's name, dtype, shape and bytes, in name order (hex)."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().contiguous()
        digest.update(f'{name}|{tensor.dtype}|{tuple(tensor.shape)}|'.encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b'')
    return digest.hexdigest()


def _plus_steps(held: Tensor, q: Tensor, step: Tensor) -> Tensor:
    """``held + q * step`` in float32, the same operations on the learner and the worker."""
    return held + q.to(torch.float32) * step


def delta_levels(precision: str) -> tuple[int, ...]:
    """The levels L to try in turn, coarsest first, before a snapshot (one entry: L is unused)."""
    return INT8_LADDER if precision == 'int8' else (INT8_LEVELS,)


def make_delta(current: Mapping[str, Tensor], held: Mapping[str, Tensor], precision: str,
               levels: int = INT8_LEVELS) -> tuple[State, State]:
    """``(delta, result)``: what of ``current`` differs from ``held`` in ``precision`` (int8: in ``levels``
    steps either side of 0), and the state a worker holding ``held`` has once it applied it."""
    delta, result = {}, {}
    for name, tensor in current.items():
        tensor = tensor.detach()
        base = held.get(name)
        if tensor.dtype != torch.float32:
            wire = tensor
        elif precision != 'int8' or base is None or base.shape != tensor.shape or base.dtype != tensor.dtype:
            wire = tensor.to(PRECISIONS['fp16' if precision == 'int8' else precision])
        else:
            diff = tensor - base
            step = (diff.abs().max() / levels).reshape(())
            q = (diff / step).round().clamp(-levels, levels).to(torch.int8) if step > 0 else None
            if q is None or not q.any():
                result[name] = base
            else:
                delta[name], delta[name + STEP] = q, step.clone()
                result[name] = _plus_steps(base, q, step)
            continue
        value = wire.to(tensor.dtype)
        if base is not None and torch.equal(value, base):
            result[name] = base
        else:
            delta[name], result[name] = wire.clone(), value.clone()
    return delta, result


def apply_delta(held: Mapping[str, Tensor], delta: Mapping[str, Tensor]) -> State:
    """``held`` with ``delta``'s tensors in place (cast to the held dtype, or an ``int8`` difference added
    in steps); ValueError if one is unknown, of another shape or type, or a step is missing or bad."""
    for name, step in delta.items():  # every step first: it belongs to an int8 difference and is a number
        base = delta.get(name[:-len(STEP)]) if name.endswith(STEP) else None
        if name.endswith(STEP) and (base is None or base.dtype != torch.int8 or step.dtype != torch.float32
                                    or step.shape != () or not bool(torch.isfinite(step))):
            raise ValueError(f'step {name[:60]!r} belongs to no int8 difference, or is no finite float32 scalar')
    result = dict(held)
    for name, tensor in delta.items():
        if name.endswith(STEP):
            continue
        if name not in held or tensor.shape != held[name].shape:
            raise ValueError(f'delta tensor {name[:60]!r} {tuple(tensor.shape)} fits no tensor of the policy')
        if tensor.dtype == torch.int8 and held[name].dtype == torch.float32:
            if name + STEP not in delta:
                raise ValueError(f'delta tensor {name[:60]!r} is an int8 difference without its step')
            result[name] = _plus_steps(held[name], tensor, delta[name + STEP])
            continue
        if tensor.is_floating_point() != held[name].is_floating_point():
            raise ValueError(f'delta tensor {name[:60]!r} is {tensor.dtype}, the policy\'s {held[name].dtype}')
        result[name] = tensor.to(held[name].dtype)
    return result
