"""Negative costs that a layer or a loss made itself, on problems that cannot take them.

A problem with `Spec.nonnegative_costs` (shortest paths on graphs with cycles,
solved by Dijkstra) refuses a user's negative cost with an error that says how
to fix it. A negative that the library itself made, from costs the user gave
non-negative, is another matter: the layer's noise, a Blackbox step, a
perturbation, or a loss's own term (SPO+'s ``2 c_hat - c``, PG's
``c_hat - h c``, Fenchel-Young's ``c - sigma Z``). `ClipNegatives` sets those
to 0 before the solver, with one warning that names where they came from. The
layer and every loss use it, so the rule is the same everywhere.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .wrapper import SolverWrapper


class ClipNegatives(SolverWrapper):
    """``solver`` for costs that ``source`` made: entries of the ``floor`` mask (over
    the ``N`` outputs) below 0 are set to 0, with a ``RuntimeWarning`` the first time
    (``once`` says per what). Every other attribute is the solver's."""

    def __init__(self, solver: Any, floor: Any, source: str, once: str) -> None:
        super().__init__(solver)
        self._floor = torch.as_tensor(np.asarray(floor, dtype=bool))
        self._source = source
        self._once = once
        self._warned = False

    def clip(self, costs: Any, known: Any = None) -> Any:
        """``costs`` (``(..., *cost_shape)``, numpy or torch) with the entries in the floor
        set where they are negative (a copy), or ``costs`` itself when there are none. With
        ``known``, a known cost the solve adds (``(..., num_vars)``, broadcast onto the
        costs' batch), the total is what must not be negative: such an entry is raised to
        minus the known cost's."""
        solver = self._solver
        n = solver.num_outputs
        flat = costs.reshape(-1, n)
        is_torch = isinstance(flat, Tensor)
        floor = self._floor.to(flat.device) if is_torch else self._floor.numpy()
        least = 0.0
        if known is not None:
            batch = tuple(costs.shape[: costs.ndim - len(solver.cost_shape)])
            shift = known[..., :n]
            shift = (shift.expand(*batch, n) if is_torch else
                     np.broadcast_to(shift, (*batch, n))).reshape(-1, n)
            least = -shift[:, floor]
        if not bool((flat[:, floor] < least).any()):
            return costs
        if not self._warned:
            warnings.warn(f"{solver.spec.label}: {self._source} made some costs "
                          f"negative, which this problem cannot take; they are set to 0 (with a "
                          f"known cost: so that their total with it is 0) "
                          f"(warned once per {self._once})", RuntimeWarning, stacklevel=4)
            self._warned = True
        flat = flat.clone() if is_torch else flat.copy()
        flat[:, floor] = (torch.maximum(flat[:, floor], torch.as_tensor(least).to(flat))
                          if is_torch else np.maximum(flat[:, floor], least))
        return flat.reshape(costs.shape)

    def solve_min(self, costs: Any, *args: Any, **kwargs: Any) -> Any:
        return self._solver.solve_min(self.clip(costs, kwargs.get("known")), *args, **kwargs)


def clip_negatives(solver: Any, source: str, once: str) -> Any:
    """``solver`` wrapped in `ClipNegatives` when its problem needs non-negative costs,
    else ``solver`` itself."""
    floor = solver.spec.nonnegative_costs()
    return solver if floor is None else ClipNegatives(solver, floor, source, once)
