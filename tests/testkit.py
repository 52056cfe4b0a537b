"""Helpers shared by the estimator, loss and metric tests."""

from __future__ import annotations

import pytest
import torch

from combolayer.backends.registry import capable_backends


class FixedNoise:
    """Deterministic 'noise': returns the given draws, so the formulas can be checked exactly."""

    def __init__(self, z: torch.Tensor, grad_nu=lambda z: z) -> None:
        self.z = z
        self._grad_nu = grad_nu

    def sample(self, shape, generator=None):
        assert tuple(shape) == tuple(self.z.shape)
        return self.z.clone()

    def grad_nu(self, z):
        return self._grad_nu(z)


def backend_or_skip(name: str, spec) -> str:
    if name not in capable_backends(spec):
        pytest.skip(f"backend {name!r} is not installed or cannot solve {spec.label}")
    return name
