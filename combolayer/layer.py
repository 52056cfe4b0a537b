"""``ComboLayer``: a combinatorial solver as a differentiable PyTorch module."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import torch
from torch import Tensor, nn

from .backends.config import BackendConfig
from .backends.registry import make_solver
from .backends.solver import check_costs
from .estimators import Estimator, resolve_method
from .io import load_spec, read_mapping
from .specs import Spec
from .transforms import SignNoise, Transform, make_projection

logger = logging.getLogger(__name__)


class ComboLayer(nn.Module):
    """``y = argmin_{y in Y} <P(w) + xi, y>`` (or argmax) with a gradient estimator.

    Args:
        spec: the problem (a spec, a dict, or a YAML/JSON file or string).
        method: the gradient estimator: a name (``"identity"``, ``"blackbox"``,
            ...), a dict ``{"name": ..., **params}``, or an estimator object.
        projection: the cost projection P, applied on the forward pass and
            differentiated through: ``"auto"``, ``"plane"``, ``"mean"``,
            ``"norm"``, ``"std"``, ``"none"`` or a callable on costs of shape
            ``(..., *cost_shape)``.
        noise: ``alpha`` for xi ~ U({-alpha/2, alpha/2}^N) in training mode, or
            any object with ``sample(shape, generator=...)``.
        backend: a backend name, a :class:`BackendConfig` or a dict.
        generator: the ``torch.Generator`` noise is drawn from (seed it to
            reproduce a run).

    Everything is compiled here, once; ``forward`` only checks, transforms and
    dispatches. Costs and solutions have shape ``(*batch, *spec.cost_shape)``.

    Raises:
        SpecError: ``spec`` is invalid.
        BackendUnavailable: the backend's package is missing or it cannot solve
            ``spec``; the message names backends that can.
        ValueError: an unknown method or projection, or ``noise < 0``.

    Examples:
        >>> import torch, combolayer as cl
        >>> layer = cl.ComboLayer(cl.problems.TopK(n=4, k=2), projection="auto")
        >>> w = torch.tensor([[0.1, 0.9, 0.5, 0.2]], requires_grad=True)
        >>> y = layer(w)
        >>> y.tolist()
        [[0.0, 1.0, 1.0, 0.0]]
        >>> (y * torch.tensor([1.0, 0, 0, 0])).sum().backward()  # w.grad: the identity gradient
    """

    def __init__(
        self,
        spec: Spec | str | os.PathLike | dict,
        method: str | dict | Estimator = "identity",
        projection: str | Transform = "auto",
        noise: float | Any = 0.0,
        backend: str | BackendConfig | dict = "auto",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.spec = load_spec(spec)
        self.solver = make_solver(self.spec, backend)
        self.method = resolve_method(method)
        self.projection = make_projection(projection, self.spec)
        self._projection_name = (
            projection if isinstance(projection, str) else getattr(projection, "__name__", "custom")
        )
        if isinstance(noise, (int, float)):
            if noise < 0:
                raise ValueError(f"noise must be >= 0, got {noise}")
            noise = SignNoise(float(noise)) if noise > 0 else None
        self.noise = noise
        self.generator = generator
        self._solve = self.method.build(self.solver)
        logger.debug("ComboLayer(%s): backend %r chosen", self.spec.label, self.solver.backend)

    @classmethod
    def from_config(cls, source: str | os.PathLike | dict) -> ComboLayer:
        """Build from a dict or YAML/JSON with keys problem, method, projection, noise, backend.

        Raises:
            ValueError: ``problem`` is missing or a key is unknown.

        Examples:
            >>> layer = cl.ComboLayer.from_config(
            ...     {"problem": {"kind": "topk", "n": 5, "k": 2}, "method": "blackbox"})
        """
        config = dict(read_mapping(source, what="layer config"))
        known = {"problem", "method", "projection", "noise", "backend"}
        unknown = set(config) - known
        if unknown or "problem" not in config:
            raise ValueError(
                f"layer config needs 'problem' and may have {sorted(known - {'problem'})}; "
                f"got keys {sorted(config)}"
            )
        return cls(config.pop("problem"), **config)

    def extra_repr(self) -> str:
        config = self.solver.config
        noise = getattr(self.noise, "alpha", self.noise) if self.noise is not None else 0.0
        return (
            f"{self.spec.label}, method={self.method}, projection={self._projection_name!r}, "
            f"noise={noise}, backend={self.solver.backend!r}, "
            f"time_limit={config.time_limit}, workers={config.workers}"
        )

    def forward(self, w: Tensor, target: Tensor | None = None) -> Tensor:
        """Solve for costs ``w``; the backward pass is the estimator's.

        Args:
            w: costs of shape ``(*batch, *cost_shape)``, any float dtype and device.
            target: the true solutions, same shape, for estimators that use one
                (the informed margin); ignored by the others.

        Returns:
            The optimal solutions, with the shape, dtype and device of ``w``.

        Raises:
            ValueError: ``w`` (or ``target``) has NaN/inf or a trailing shape other
                than ``cost_shape``; the message names expected and got.
            InfeasibleError: the problem has no feasible solution.
            SolverError: the solver failed (time limit without a solution, a
                crashed worker, ...).
        """
        check_costs(self.spec, w, "w")
        u = self.projection(w)
        if self.training and self.noise is not None:
            u = u + self.noise.sample(u.shape, generator=self.generator).to(u)
        costs = self.solver.sign * u  # the objective sense, folded in once
        needs_grad = torch.is_grad_enabled() and costs.requires_grad
        if target is not None:
            check_costs(self.spec, target, "target")
            target = target.to(costs)
        if not logger.isEnabledFor(logging.DEBUG):
            return self._solve(costs, target=target, needs_grad=needs_grad, training=self.training)
        start = time.perf_counter()
        y = self._solve(costs, target=target, needs_grad=needs_grad, training=self.training)
        logger.debug("%s: batch of %d solved on %r in %.4f s", self.spec.label,
                     y.numel() // self.spec.num_outputs, self.solver.backend,
                     time.perf_counter() - start)
        return y
