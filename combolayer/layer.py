"""``ComboLayer``: a combinatorial solver as a differentiable PyTorch module."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .analysis import analyze
from .backends.config import BackendConfig
from .backends.registry import make_solver
from .backends.solver import check_costs
from .estimators import Estimator, resolve_method
from .io import load_spec, read_mapping
from .noise import SignNoise
from .projections import make_projection
from .schedules import Schedule, make_schedule
from .specs import Spec
from .transforms import NORM_EPS, Transform


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
        # Problems that need non-negative costs (shortest paths on graphs with
        # cycles): the solver must be able to take what the layer gives it.
        floor = self.spec.nonnegative_costs()
        self._floor = None if floor is None else torch.as_tensor(floor)
        self._normals = (torch.tensor(analyze(self.spec).normals)
                         if floor is not None and projection in ("plane", "auto") else None)
        solver = self.solver if floor is None else _ClipPerturbations(self.solver, self._floor)
        self._solve = self.method.build(solver)

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

    def _hull_offset(self, w: Tensor, u: Tensor) -> Tensor:
        """A constant that gives the solver the cost before the hull step, and the check
        that this cost is one the problem accepts (:meth:`Spec.nonnegative_costs`).

        ``"plane"`` and ``"auto"`` remove the components of ``w`` along directions on
        which every solution has the same objective, then ``"auto"`` scales by a
        positive factor: ``s * w`` has the argmin of ``P(w)`` and the signs of
        ``w``. The solver sees ``s * w`` while gradients flow through ``P(w)``
        unchanged, so a positive cost stays one that Dijkstra can take.
        """
        with torch.no_grad():
            offset = torch.zeros((), dtype=u.dtype, device=u.device)
            n = self.spec.num_outputs
            flat_w = w.reshape(-1, n)
            if self._normals is not None:
                basis = self._normals.to(dtype=w.dtype, device=w.device)
                removed = (flat_w @ basis.T) @ basis
                scale = u.reshape(-1, n).norm(dim=-1, keepdim=True) / (
                    (flat_w - removed).norm(dim=-1, keepdim=True).clamp_min(NORM_EPS))
                offset = (self.solver.sign * scale * removed).reshape(u.shape)
            given = (self.solver.sign * u + offset).reshape(-1, n)[:, self._floor.to(w.device)]
            if (given < 0).any():
                b, j = (given < 0).nonzero()[0].tolist()
                raise self.spec.negative_cost_error(
                    f"w after projection, instance {b}, value {float(given[b, j]):.4g}")
        return offset

    def extra_repr(self) -> str:
        return f"{self.spec.label}, method={self.method}, backend={self.solver.backend!r}"

    def forward(self, w: Tensor, target: Tensor | None = None) -> Tensor:
        if not isinstance(w, Tensor):
            if not isinstance(w, np.ndarray):
                raise TypeError(f"w must be a torch.Tensor (or a numpy array), got "
                                f"{type(w).__name__}")
            w = torch.from_numpy(w)
        if not w.is_floating_point():
            raise TypeError(f"w must be a floating-point tensor, got {w.dtype}: pass w.float()")
        check_costs(self.spec, w, "w")
        u = self.projection(w)
        costs = self.solver.sign * u  # the objective sense, folded in once
        if self._floor is not None:
            costs = costs + self._hull_offset(w, u)
        if self.training and self.noise is not None:
            costs = costs + self.solver.sign * self.noise.sample(
                u.shape, generator=self.generator).to(u)
        needs_grad = torch.is_grad_enabled() and costs.requires_grad
        if target is not None:
            check_costs(self.spec, target, "target")
            target = target.to(costs)
        return self._solve(costs, target=target, needs_grad=needs_grad, training=self.training)


class _ClipPerturbations:
    """The layer's solver for problems that need non-negative costs: the user's cost is
    checked in ``forward``, so a negative entry here comes from the layer's own noise or
    an estimator's step (Blackbox's ``c + lam dL/dy``, a perturbation). It is set to 0,
    with a warning the first time."""

    def __init__(self, solver: Any, floor: Tensor) -> None:
        self._solver = solver
        self._floor = floor
        self._warned = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._solver, name)

    def solve_min(self, costs: Any) -> Any:
        n = self._solver.num_outputs
        flat = costs.reshape(-1, n)
        floor = self._floor.to(flat.device) if isinstance(flat, Tensor) else self._floor.numpy()
        negative = (flat[:, floor] < 0).any()
        if bool(negative):
            if not self._warned:
                warnings.warn(f"{self._solver.spec.label}: the layer's noise or the estimator's "
                              "step made some costs negative, which this problem cannot take; "
                              "they are set to 0 (warned once per layer)", RuntimeWarning,
                              stacklevel=3)
                self._warned = True
            flat = flat.clone() if isinstance(flat, Tensor) else flat.copy()
            flat[:, floor] = flat[:, floor].clamp_min(0) if isinstance(flat, Tensor) else \
                np.maximum(flat[:, floor], 0)
            costs = flat.reshape(costs.shape)
        return self._solver.solve_min(costs)
