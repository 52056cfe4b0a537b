"""``ComboLayer``: a combinatorial solver as a differentiable PyTorch module."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor, nn

from .backends.config import BackendConfig
from .backends.registry import make_solver
from .backends.solver import check_costs
from .estimators import Estimator, resolve_method
from .io import load_spec, read_mapping
from .schedules import Schedule, make_schedule
from .specs import Spec
from .transforms import SignNoise, Transform, make_projection


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
            any object with ``sample(shape, generator=...)``. Change it later
            with :meth:`set_noise`.
        noise_schedule: the noise level per epoch, applied by :meth:`set_epoch`:
            a callable ``epoch -> alpha``, or a name from
            :mod:`combolayer.schedules` (``"constant"``, ``"step_off"``,
            ``"linear_decay"``) or a dict with ``name`` and its arguments
            (``{"name": "step_off", "until": 10}``), starting at ``noise``.
        backend: a backend name, a :class:`BackendConfig` or a dict.
        generator: the ``torch.Generator`` noise is drawn from (seed it to
            reproduce a run).

    Everything is compiled here, once; ``forward`` only checks, transforms and
    dispatches.
    """

    def __init__(
        self,
        spec: Spec | str | os.PathLike | dict,
        method: str | dict | Estimator = "identity",
        projection: str | Transform = "auto",
        noise: float | Any = 0.0,
        backend: str | BackendConfig | dict = "auto",
        generator: torch.Generator | None = None,
        noise_schedule: str | dict | Schedule | None = None,
    ) -> None:
        super().__init__()
        self.spec = load_spec(spec)
        self.solver = make_solver(self.spec, backend)
        self.method = resolve_method(method)
        self.projection = make_projection(projection, self.spec)
        self.set_noise(noise)
        self.noise_schedule = (None if noise_schedule is None else
                               make_schedule(noise_schedule, self.noise_level))
        self.generator = generator
        self._solve = self.method.build(self.solver)

    @classmethod
    def from_config(cls, source: str | os.PathLike | dict) -> ComboLayer:
        """Build from a dict or YAML/JSON with keys problem, method, projection, noise, backend."""
        config = dict(read_mapping(source, what="layer config"))
        known = {"problem", "method", "projection", "noise", "backend", "noise_schedule"}
        unknown = set(config) - known
        if unknown or "problem" not in config:
            raise ValueError(
                f"layer config needs 'problem' and may have {sorted(known - {'problem'})}; "
                f"got keys {sorted(config)}"
            )
        return cls(config.pop("problem"), **config)

    def set_noise(self, noise: float | Any | None) -> None:
        """Set the training-mode noise: ``alpha`` for xi ~ U({-alpha/2, alpha/2}^N),
        a noise object with ``sample(shape, generator=...)``, or 0 / None for none.

        Eval mode never adds noise, whatever is set here.
        """
        if noise is None or isinstance(noise, (int, float)):
            alpha = float(noise or 0.0)
            if not alpha >= 0 or alpha == float("inf"):
                raise ValueError(f"noise must be a finite alpha >= 0, got {noise}")
            noise = SignNoise(alpha) if alpha > 0 else None
        self.noise = noise

    def set_epoch(self, epoch: int) -> float:
        """Apply ``noise_schedule`` for ``epoch`` and return the noise level now in force
        (without a schedule the noise is left as it is)."""
        if self.noise_schedule is not None:
            self.set_noise(self.noise_schedule(epoch))
        return self.noise_level

    @property
    def noise_level(self) -> float:
        """The current margin noise ``alpha`` (0 when there is none)."""
        return float(getattr(self.noise, "alpha", 0.0)) if self.noise is not None else 0.0

    def extra_repr(self) -> str:
        return f"{self.spec.label}, method={self.method}, backend={self.solver.backend!r}"

    def forward(self, w: Tensor, target: Tensor | None = None) -> Tensor:
        check_costs(self.spec, w, "w")
        u = self.projection(w)
        if self.training and self.noise is not None:
            u = u + self.noise.sample(u.shape, generator=self.generator).to(u)
        costs = u if self.solver.sign == 1.0 else -u  # the objective sense, folded in once
        needs_grad = torch.is_grad_enabled() and costs.requires_grad
        if target is not None:
            check_costs(self.spec, target, "target")
            target = target.to(costs)
        return self._solve(costs, target=target, needs_grad=needs_grad, training=self.training)
