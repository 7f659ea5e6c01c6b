"""The one place where random, numpy and torch are seeded."""
from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int, torch_threads: int | None = 1) -> np.random.Generator:
    """Seed ``random``, numpy and torch; return a fresh Generator for explicit draws.

    ``torch_threads`` caps torch's intra-op threads (1 is fastest for small nets on CPU);
    ``None`` leaves torch's setting alone.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    return np.random.default_rng(seed)
