"""A pool of distinct feasible solutions, searched with one matmul.

The solution cache of PyEPO's ``solve_ratio`` (Mulamba et al., "Contrastive
losses and solution caching for predict-and-optimize", IJCAI 2021) and the
contrastive and learning-to-rank losses share it: every solution a solver
returned (or the training set's true solutions) goes in once, and
`SolutionPool.best` answers a batch of costs with the cheapest solution
in the pool, ``argmin_{y in pool} <c, y>``, as one ``(B, N) @ (N, P)`` product on
the costs' device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..transforms.noise import generator_device
from .solver import Solver

#: How many solutions a pool keeps unless told otherwise: a (32, N) x (N, 10^4)
#: lookup stays well under a millisecond for the problem sizes of the examples.
DEFAULT_MAX_SIZE = 10_000


class SolutionPool:
    """Distinct ``(N,)`` solutions, at most ``max_size`` of them.

    Solutions are flattened to ``N = prod(cost_shape)`` outputs. Adding a
    solution already in the pool does nothing; once the pool is full, a new
    solution replaces the oldest one that was not seeded (seeded solutions, the
    training set's true ones, stay).
    """

    def __init__(self, num_outputs: int, max_size: int = DEFAULT_MAX_SIZE) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be at least 1, got {max_size}")
        self.num_outputs = num_outputs
        self.max_size = max_size
        # CPU float64 rows, oldest first, in the first _size rows of a buffer that
        # doubles when full, so adding is in place. Callers get copies (made once per
        # change and device): a view would change under a graph that saved it.
        self._buffer = torch.empty(0, num_outputs, dtype=torch.float64)
        self._size = 0
        self._keys: dict[bytes, int] = {}  # row bytes -> 1 when seeded, 0 otherwise
        self._seeded = 0
        self._converted: dict[tuple[torch.device, torch.dtype], Tensor] = {}

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"SolutionPool({len(self)} of at most {self.max_size}, N={self.num_outputs})"

    @property
    def solutions(self) -> Tensor:
        """The pool as a ``(P, N)`` float64 CPU tensor, oldest first."""
        return self._on(torch.device("cpu"), torch.float64)

    def seed(self, solutions: Tensor) -> int:
        """Add solutions that stay in the pool whatever comes later; returns how many were new."""
        return self._add(solutions, seeded=True)

    def add(self, solutions: Tensor) -> int:
        """Add ``(..., N)`` solutions not yet in the pool; returns how many were new."""
        return self._add(solutions, seeded=False)

    def best(self, costs: Tensor) -> Tensor:
        """The cheapest pooled solution for each row of ``(B, N)`` minimisation costs,
        on the costs' device and dtype. Raises ``RuntimeError`` on an empty pool."""
        if not self._size:
            raise RuntimeError("the solution pool is empty: seed it or solve exactly first")
        pool = self._on(costs.device, costs.dtype)
        return pool[(costs @ pool.T).argmin(dim=1)]

    def _add(self, solutions: Tensor, seeded: bool) -> int:
        rows = torch.as_tensor(solutions).detach().to("cpu", torch.float64)
        # + 0.0 turns -0.0 (which solvers return) into 0.0, so the byte keys match;
        # numpy rows, as iterating a tensor would build a tensor per row
        rows = rows.reshape(-1, self.num_outputs).numpy() + 0.0
        added = 0
        for row in rows:
            key = row.tobytes()
            if key in self._keys:
                continue
            if self._size >= self.max_size and not self._evict_oldest():
                break  # full of seeded solutions
            self._keys[key] = int(seeded)
            self._seeded += int(seeded)
            self._append(row)
            added += 1
        if added:
            self._converted.clear()
        return added

    def _append(self, row: np.ndarray) -> None:
        if self._size == len(self._buffer):
            grown = torch.empty(min(self.max_size, max(16, 2 * self._size)), self.num_outputs,
                                dtype=torch.float64)
            grown[: self._size] = self._buffer[: self._size]
            self._buffer = grown
        self._buffer[self._size] = torch.from_numpy(row)
        self._size += 1

    def _evict_oldest(self) -> bool:
        rows = self._buffer[: self._size].numpy()
        for index in range(self._size):
            key = bytes(rows[index])
            if not self._keys[key]:
                del self._keys[key]
                self._buffer[index : self._size - 1] = self._buffer[index + 1 : self._size].clone()
                self._size -= 1
                return True
        return False

    def _on(self, device: torch.device, dtype: torch.dtype) -> Tensor:
        key = (device, dtype)
        converted = self._converted.get(key)
        if converted is None:
            converted = self._converted[key] = self._buffer[: self._size].to(
                device=device, dtype=dtype, copy=True)
        return converted


def check_solve_ratio(solve_ratio: float) -> float:
    """``solve_ratio`` as a float in [0, 1], or ``ValueError`` naming what it got."""
    ratio = float(solve_ratio)
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"solve_ratio must be in [0, 1], got {solve_ratio} (it is the "
                         "probability of an exact solve)")
    return ratio


def draw_exact(solve_ratio: float, generator: torch.Generator | None) -> bool:
    """One draw for a whole batch: whether it is solved exactly (always at
    ``solve_ratio`` 1), from ``generator`` on its own device."""
    return solve_ratio >= 1.0 or float(
        torch.rand((), generator=generator, device=generator_device(generator))) < solve_ratio


class CachedSolver(Solver):
    """A `Solver` that solves each instance exactly with probability ``solve_ratio``
    and answers the others from ``pool`` (PyEPO's ``solve_ratio``, Mulamba et al. 2021).

    It is the wrapped solver with only `solve_rows` (and the numpy path of
    `solve_min`) changed, so every estimator and loss that calls
    ``solve_min`` / ``solve_rows`` uses the cache without knowing it. Exact
    solutions go into the pool (distinct, up to ``pool.max_size``); an instance
    drawn for the pool while the pool is empty is solved exactly. Draws come from
    ``generator`` (the global RNG when None), one uniform per instance.
    """

    def __init__(self, solver: Solver, solve_ratio: float, pool: SolutionPool,
                 generator: torch.Generator | None = None) -> None:
        super().__init__(solver.spec, solver.kernel, solver.backend, solver.config)
        if pool.num_outputs != solver.num_outputs:
            raise ValueError(f"pool holds solutions of {pool.num_outputs} outputs but "
                             f"{solver.spec.label} has {solver.num_outputs}")
        self.exact = solver
        self.solve_ratio = check_solve_ratio(solve_ratio)
        self.pool = pool
        self.generator = generator

    def __repr__(self) -> str:
        return f"CachedSolver({self.exact!r}, solve_ratio={self.solve_ratio}, pool={self.pool!r})"

    def solve_min(self, costs: Any) -> Any:
        if isinstance(costs, np.ndarray):
            flat = torch.from_numpy(np.ascontiguousarray(costs, dtype=np.float64))
            return super().solve_min(flat).numpy()
        return super().solve_min(costs)

    def solve_rows(self, costs: Tensor) -> Tensor:
        exact = torch.rand(costs.shape[0], generator=self.generator,
                           device=generator_device(self.generator)) < self.solve_ratio
        num_exact = int(exact.sum())
        if num_exact == len(exact) or len(self.pool) == 0:
            return self._solve_exactly(costs)
        # every row's pool answer in one lookup (a new tensor), then the drawn rows
        # overwritten with their exact solutions
        y = self.pool.best(costs)
        if num_exact:
            exact = exact.to(costs.device)
            y[exact] = self._solve_exactly(costs[exact])
        return y

    def _solve_exactly(self, costs: Tensor) -> Tensor:
        """Exact solves, each started from the pool's best solution under its cost where
        the kernel takes a MIP start (HiGHS: 0.86-0.96x the time without it,
        docs/performance.md); the solutions join the pool."""
        start = None
        if len(self.pool) and getattr(self.exact.kernel, "takes_start", False):
            start = self.pool.best(costs).to("cpu", torch.float64).numpy()
        y = self.exact.solve_rows(costs, start=start)
        self.pool.add(y)
        return y
