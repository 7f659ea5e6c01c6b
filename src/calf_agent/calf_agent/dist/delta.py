"""Weights that cost less on the wire: deltas of changed tensors in reduced precision, checked by checksum.

The learner remembers, per worker, the state it last sent (as the worker holds it). A delta carries only
the tensors whose reduced value differs from that state, float32 ones cast to fp16 or bf16 (other dtypes
travel as they are: the normaliser's float64 statistics, integer buffers). The worker applies a delta
only onto exactly its ``base_version`` and checks that the result has the ``checksum`` the learner
computed; otherwise it asks for a snapshot (every tensor, full precision). The learner also sends a
snapshot when the reduced policy strays from the full-precision one by more than ``KL_BOUND``.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch
from torch import Tensor

PRECISIONS = {'fp16': torch.float16, 'bf16': torch.bfloat16}
DEFAULT_PRECISION = 'fp16'
KL_BOUND = 1e-3
"""Largest mean KL(full ‖ reduced) on the learner's last batch a delta may cause; above it, a snapshot."""

State = dict[str, Tensor]


def checksum(state: Mapping[str, Tensor]) -> str:
    """SHA-256 of every tensor's name, dtype, shape and bytes, in name order (hex)."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().contiguous()
        digest.update(f'{name}|{tensor.dtype}|{tuple(tensor.shape)}|'.encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b'')
    return digest.hexdigest()


def reduced(tensor: Tensor, precision: str) -> Tensor:
    """``tensor`` as it travels in a delta: float32 cast to ``precision``, anything else unchanged."""
    return tensor.to(PRECISIONS[precision]) if tensor.dtype == torch.float32 else tensor


def make_delta(current: Mapping[str, Tensor], held: Mapping[str, Tensor], precision: str) -> tuple[State, State]:
    """``(delta, result)``: the reduced tensors of ``current`` that differ from ``held``, and the state
    a worker holding ``held`` has once it applied them."""
    delta, result = {}, {}
    for name, tensor in current.items():
        wire = reduced(tensor.detach(), precision)
        value = wire.to(tensor.dtype)
        if name in held and torch.equal(value, held[name]):
            result[name] = held[name]
        else:
            delta[name], result[name] = wire.clone(), value.clone()
    return delta, result


def apply_delta(held: Mapping[str, Tensor], delta: Mapping[str, Tensor]) -> State:
    """``held`` with ``delta``'s tensors in place, each cast to the held dtype; ValueError if one is unknown
    or of another shape."""
    result = dict(held)
    for name, tensor in delta.items():
        if name not in held or tensor.shape != held[name].shape:
            raise ValueError(f'delta tensor {name[:60]!r} {tuple(tensor.shape)} fits no tensor of the policy')
        if tensor.is_floating_point() != held[name].is_floating_point():
            raise ValueError(f'delta tensor {name[:60]!r} is {tensor.dtype}, the policy\'s {held[name].dtype}')
        result[name] = tensor.to(held[name].dtype)
    return result
