"""Running statistics for continuous control: observation normalisation (saved with a policy) and
reward scaling by the discounted return's spread (training only), as gymnasium's NormalizeObservation
and NormalizeReward do them."""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn


class RunningNorm(nn.Module):
    """Running mean and variance of observations (parallel Welford, as gymnasium's NormalizeObservation):
    ``forward`` standardises and clips to ``±clip``, but for the columns ``unscaled`` (``(start, stop)``), which
    it passes on as they are. The statistics are buffers, so they are saved with the weights."""

    def __init__(self, size: int, clip: float = 10.0, epsilon: float = 1e-8,
                 unscaled: tuple[int, int] = (0, 0)) -> None:
        super().__init__()
        if size < 1 or clip <= 0:
            raise ValueError(f'size must be >= 1 and clip > 0, got {size} and {clip}')
        if len(unscaled) != 2 or not 0 <= unscaled[0] <= unscaled[1] <= size:
            raise ValueError(f'unscaled must be columns (start, stop) with 0 <= start <= stop <= {size}, got {unscaled}')
        self.clip, self.epsilon = clip, epsilon
        self.unscaled = (int(unscaled[0]), int(unscaled[1]))
        self.register_buffer('mean', torch.zeros(size, dtype=torch.float64))
        self.register_buffer('var', torch.ones(size, dtype=torch.float64))
        self.register_buffer('count', torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: Tensor | np.ndarray) -> None:
        """Fold a batch ``[B, size]`` into the statistics (in numpy: a few small arrays, where torch's per-operation
        cost would be most of the work)."""
        x = np.asarray(batch, dtype=np.float64).reshape(-1, self.mean.shape[0])
        mean, var, count = self.mean.numpy(), self.var.numpy(), float(self.count)
        n = x.shape[0]
        batch_mean = x.mean(0)
        delta, total = batch_mean - mean, count + n
        m2 = var * count + x.var(0) * n + delta ** 2 * count * n / total
        mean += delta * n / total
        var[:] = m2 / total
        self.count.fill_(total)

    def forward(self, x: Tensor) -> Tensor:
        scaled = ((x - self.mean.float()) / torch.sqrt(self.var.float() + self.epsilon)).clamp(-self.clip, self.clip)
        start, stop = self.unscaled
        if start == stop:
            return scaled
        return torch.cat([scaled[..., :start], x[..., start:stop], scaled[..., stop:]], -1)


class ReturnNormalizer:
    """Scales each env's rewards by the running std of its discounted return (not centred), so the
    critic sees returns of order one whatever the reward scale."""

    def __init__(self, num_envs: int, gamma: float, epsilon: float = 1e-8) -> None:
        self.gamma, self.epsilon = gamma, epsilon
        self.returns = np.zeros(num_envs)
        self.stats = RunningNorm(1)

    def scale(self, reward: np.ndarray, done: np.ndarray) -> np.ndarray:
        """``reward / std(return)`` for one vector step; ``done`` ends the envs' running returns."""
        self.returns = self.returns * self.gamma + reward
        self.stats.update(self.returns[:, None])
        scaled = reward / np.sqrt(self.stats.var.item() + self.epsilon)
        self.returns[np.asarray(done, dtype=bool)] = 0.0
        return scaled.astype(np.float32)
