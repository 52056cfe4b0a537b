"""The perturbed Fenchel-Young loss (Berthet et al.)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..backends.registry import as_solver
from ..backends.solver import KnownBound, Recorder, check_costs, inner
from ..errors import InputError
from ..estimators import Perturbed
from ..pool import SolutionPool
from .base import SolverLoss, check_reduction, check_solution, reduce


class FenchelYoungLoss(SolverLoss):
    """The perturbed Fenchel-Young loss, built on [`Perturbed`][combolayer.Perturbed].

    With ``c`` the predicted min-sense cost (theta = -c in the paper's max
    form), ``Z_s`` the perturbations and ``y_s = y(c - sigma Z_s)``:
    ``loss = <c, y_true> - 1/S sum_s <c - sigma Z_s, y_s>``, the Monte-Carlo
    estimate of ``F_sigma(theta) - <theta, y_true>`` (the constant
    ``Omega(y_true)`` is dropped, so the value is >= 0 only in expectation), and
    ``d loss / d c = y_true - mean_s y_s``, i.e. ``y_sigma(theta) - y_true`` in
    the paper's form. All samples are one batch call. With a known cost
    (`combolayer.ILP.known_cost`, ``k``) each objective counts it:
    ``+ <k[:N], y_true> - 1/S sum_s <k, x_s>`` over the samples' whole solutions
    (``<k[N:], aux_true>`` is a constant, dropped with ``Omega(y_true)``); a known cost
    of each instance (``known_cost=``, ``(*batch, num_vars)`` or ``(num_vars,)``, the
    spec's sense) is added to the spec's and counted the same way.

    Args:
        spec: the problem: a spec, a compiled [`Solver`][combolayer.backends.Solver]
            or a ComboLayer.
        sigma: the perturbation's scale.
        num_samples: ``S``, the perturbed samples per instance.
        noise: ``Z``'s distribution, as for [`Perturbed`][combolayer.Perturbed].
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` over instances.
        backend: a backend name/config to compile a spec with (or a compiled
            `Solver`).
        generator: the ``torch.Generator`` the noise and ``solve_ratio`` draws come from.
        solve_ratio: PyEPO's solution cache below 1: each perturbed sample is solved
            exactly with this probability, otherwise it is the best solution in ``pool``.
        pool: a `combolayer.pool.SolutionPool` (new by default; pass
            ``layer.pool`` to share one, seed it with ``loss.pool.seed(y_train)``; with
            a known cost, whole solutions ``concat(y, aux)``).
        perturbation: ``"additive"`` (default) or ``"multiplicative"``, PyEPO's
            ``perturbedFenchelYoungMul`` (PFYMul): ``c - sigma Z_s`` becomes ``c * f_s``,
            ``f_s = exp(sigma Z_s - sigma^2/2)``, so
            ``d loss / d c = y_true - mean_s f_s * y_s``.

    Reference: Berthet, Blondel, Teboul, Cuturi, Vert, Bach, "Learning with
    Differentiable Perturbed Optimizers", NeurIPS 2020.
    """

    counts_known_cost = True  # see _with_known_cost / _known_part

    def __init__(self, spec: Any, sigma: float = 1.0, num_samples: int = 1,
                 noise: Any = "gaussian", reduction: str = "mean", backend: Any = "auto",
                 generator: torch.Generator | None = None, solve_ratio: float = 1.0,
                 pool: SolutionPool | None = None, perturbation: str = "additive") -> None:
        self.solver = as_solver(spec, backend)
        self.spec = self.solver.spec
        self.solve_ratio = solve_ratio  # checked on setting (`cache_setting`)
        self.pool = pool  # a SolutionPool for the spec (`cache_setting`)
        try:
            self.perturbed = Perturbed(sigma=sigma, num_samples=num_samples, noise=noise,
                                       generator=generator, perturbation=perturbation)
        except InputError as error:  # named as the loss the user built
            raise InputError(str(error).replace("Perturbed", "FenchelYoungLoss")) from None
        self.reduction = check_reduction(reduction)

    @property
    def generator(self) -> torch.Generator | None:
        """The generator of the noise (`Perturbed`'s) and of the ``solve_ratio`` draws;
        setting it sets both."""
        return self.perturbed.generator

    @generator.setter
    def generator(self, generator: torch.Generator | None) -> None:
        self.perturbed = self.perturbed.model_copy(update={"generator": generator})

    def __repr__(self) -> str:
        p = self.perturbed
        return (f"FenchelYoungLoss({self.spec.label}, sigma={p.sigma}, "
                f"num_samples={p.num_samples}, noise={p.noise!r})")

    def __call__(self, cost_pred: Tensor, y_true: Tensor,
                 known_cost: Tensor | None = None) -> Tensor:
        check_costs(self.spec, cost_pred, "cost_pred")
        y_true = check_solution(self.solver, y_true, cost_pred, "y_true")
        c = self.solver.sign * cost_pred
        self.check_nonnegative(c, "cost_pred")
        solver = self.own_step(self.cached_solver, "c - sigma Z")
        known = self.instance_known(known_cost, c)
        counts_known = self.solver.known is not None or known is not None
        # the samples' auxiliaries weigh in the known cost's share: kept by the recorder
        recorder = solver = Recorder(solver) if counts_known else solver
        if known is not None:
            solver = KnownBound(solver, known)
        z, samples = self.perturbed.perturbed_solutions(solver, c)
        k = len(self.spec.cost_shape)
        perturbed_value = inner(self.perturbed.perturb(c, z), samples, k).mean(0)
        loss = inner(c, y_true, k) - perturbed_value
        if counts_known:
            loss = loss + self._known_part(y_true, samples, recorder.aux, known)
        return reduce(loss, self.reduction)

    def _known_part(self, y_true: Tensor, samples: Tensor, box: list,
                    known: Tensor | None = None) -> Tensor:
        """The known cost's share of the loss (min form, ``k`` the sense-folded known
        cost): ``<k[:N], y_true> - 1/S sum_s <k, x_s>``, with ``x_s`` the samples' whole
        solutions. ``<k[N:], aux_true>`` does not depend on the prediction and is dropped
        with ``Omega(y_true)``; the gradient (``y_true - mean_s y_s``) is unchanged.
        ``known``: each instance's own (min form), counted on top of the spec's."""
        solver = self.solver if known is None else KnownBound(self.solver, known)
        batch = samples.shape[1 : samples.dim() - len(self.spec.cost_shape)]
        # the samples were solved instance by instance (solve_samples): in order (*batch, S)
        if solver.num_aux:
            aux = box[0].to(samples).reshape(*batch, len(samples), solver.num_aux)
            aux = aux.movedim(len(batch), 0)
        else:  # nothing to keep: the recorder holds no auxiliaries
            aux = samples.new_zeros(len(samples), *batch, 0)
        sampled = solver.sign * solver.known_value(samples, aux)
        flat_true = y_true.reshape(*batch, solver.num_outputs)
        return self.target_known_value(flat_true, known) - sampled.mean(0)
