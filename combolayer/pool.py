"""A pool of distinct feasible solutions, searched with one matmul.

The solution cache of PyEPO's ``solve_ratio`` (Mulamba et al., "Contrastive
losses and solution caching for predict-and-optimize", IJCAI 2021) and the
contrastive and learning-to-rank losses share it: every solution a solver
returned (or the training set's true solutions) goes in once, and
`SolutionPool.best` answers a batch of costs with the cheapest solution
in the pool, ``argmin_{y in pool} <c, y>``, as one ``(B, N) @ (N, P)`` product on
the costs' device.

A pool belongs to one problem: the first layer or loss that uses it binds it to
its spec (`SolutionPool.bind`), and another problem, even one with the same
number of outputs, is refused, since its answers would come from rows infeasible
for it. All reads and writes hold the pool's lock, so layers and losses on
several threads may share one.
"""

from __future__ import annotations

import hashlib
import json
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .backends.outcome import INFEASIBLE, POOLED, Solved, statuses_of
from .backends.solver import Solver, pool_width
from .errors import InputError, SolverError
from .func_transforms import hidden_from_transforms
from .specs.base import is_real
from .specs.canonical import CanonicalForm, IntegerRows, canonical_form, rounding
from .transforms.noise import generator_device

#: How many solutions a pool keeps unless told otherwise: a (32, N) x (N, 10^4)
#: lookup stays well under a millisecond for the problem sizes of the examples.
DEFAULT_MAX_SIZE = 10_000

#: A pooled solution meets a per-call row up to this share of the row's size (`rounding`:
#: its terms and its bound), the rounding a solver's answer carries, not its absolute
#: tolerance.
POOL_ROW_TOL = 1e-9

#: A seeded row meets its problem up to this share of each value and row size: the
#: feasibility tolerance of the solvers that made it (PyEPO's Gurobi models: 1e-6).
SEED_TOL = 1e-6

#: ``allowed(pooled) -> (B, P) bool``: which pooled rows ``(P, N)`` (on the costs' device
#: and dtype) may answer each instance, e.g. those feasible for its per-call constraint rows.
Allowed = Callable[[Tensor], Tensor]

_WHOLE = ("; a spec with a known cost keeps whole solutions in its pool, concat(y, aux) of "
          "{width} values, not the {n} outputs: seed it with concat(y, aux)")


def spec_signature(spec: Any) -> str:
    """A digest of what makes a solution feasible for ``spec``: the spec itself without
    its ``sense`` (the pool answers minimisation costs; the sense is folded in first).
    Two specs share a pool exactly when their signatures are equal."""
    data = spec.model_dump(mode="json", exclude={"sense"})
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class SeedCheck:
    """What a seeded row must meet, read off the spec's form at the first seed (not when
    a layer binds its pool: a Ranking(3000)'s form has 9e6 variables): the bounds and
    integrality of the pooled columns, the form's rows that only they weigh (a row with
    an auxiliary the pool does not keep is left out: a necessary condition), both to
    `SEED_TOL`, and, where the pool keeps every variable, the form's lazy cuts (a tour's
    subtours)."""

    def __init__(self, spec: Any, width: int) -> None:
        self.spec, self.width, self.label = spec, width, spec.label
        self.form: CanonicalForm | None = None

    @cached_property
    def rows(self) -> IntegerRows:
        """The form's rows that weigh the pooled columns alone."""
        return IntegerRows.of(*self.form.rows(), np.arange(self.form.num_vars) < self.width)

    def __call__(self, rows: np.ndarray, what: str = "seeded solution") -> None:
        """``InputError`` naming the first row (``(M, width)``) that breaks the problem,
        as ``what`` (a seed's, or a solution added)."""
        if self.form is None:
            self.form = canonical_form(self.spec)
        form, width = self.form, self.width
        slack = SEED_TOL * (1.0 + np.abs(rows))
        broken = ((rows < form.lower[:width] - slack) | (rows > form.upper[:width] + slack)
                  | (form.integer[:width] & (np.abs(rows - np.rint(rows)) > slack)))
        bad = np.flatnonzero(broken.any(axis=1))
        first = int(bad[0]) if bad.size else None
        if first is None:
            points = np.zeros((len(rows), form.num_vars))
            points[:, :width] = rows  # the kept rows weigh no other column
            breach = self.rows.breach(points, SEED_TOL)
            first = None if breach is None else breach[0]
        if first is None and form.separator is not None and form.num_vars == width:
            # on integral points, the separators' own input
            first = next((i for i, row in enumerate(rows) if form.separator(np.rint(row))),
                         None)
        if first is not None:
            raise InputError(f"{what} {first} is not feasible for {self.label} (its "
                             f"bounds, integrality or rows): {rows[first][:8].tolist()}"
                             f"{' ...' if rows.shape[1] > 8 else ''}; give the pool the "
                             "training set's true solutions")


def row_key(row: np.ndarray) -> bytes:
    # A 16-byte digest, not the row's bytes: at N = 900 the bytes of 10^4 keys would be
    # a second copy of the pool. A hit is confirmed against the stored row.
    return hashlib.blake2b(row.tobytes(), digest_size=16).digest()


class SolutionPool:
    """Distinct ``(N,)`` solutions of one problem, at most ``max_size`` of them.

    Solutions are flattened to ``N = prod(cost_shape)`` outputs. Adding a
    solution already in the pool does nothing (seeding it marks it seeded); once
    the pool is full, a new solution takes the place of the oldest one that was
    not seeded (seeded solutions, the training set's true ones, stay). Replacing
    a row costs O(N), whatever the pool's size.

    ``SolutionPool(spec)`` binds the pool to ``spec`` at once; ``SolutionPool(N)``
    is bound by the first layer or loss it is given to (`bind`). Every method
    holds the pool's lock: threads may share a pool.
    """

    def __init__(self, num_outputs: int | Any, max_size: int = DEFAULT_MAX_SIZE) -> None:
        spec = None
        if hasattr(num_outputs, "cost_shape"):
            spec, num_outputs = num_outputs, pool_width(num_outputs)
        if not is_real(num_outputs, integer=True) or num_outputs < 1:
            raise InputError(f"num_outputs must be an int >= 1 (or a spec), got {num_outputs!r}")
        if not is_real(max_size, integer=True) or max_size < 1:
            raise InputError(f"max_size must be an int >= 1, got {max_size!r}")
        self.num_outputs = int(num_outputs)
        self.max_size = int(max_size)
        self._signature: str | None = None
        self._label: str | None = None
        self._check: SeedCheck | None = None  # set by bind
        self._cost_shape: tuple[int, ...] | None = None
        self._hint = ""
        #: The auxiliaries of whole solutions a `CachedSolver` solved for per-call rows that
        #: weigh them, by the digest of their pooled columns (`row_key`), oldest first: a
        #: pool that keeps the outputs alone checks such rows with them (`keep_aux`).
        self._aux: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._reset(torch.empty(0, self.num_outputs, dtype=torch.float64), [], [])
        self._init_runtime()
        if spec is not None:
            self.bind(spec)

    def _reset(self, rows: Tensor, seeded: list[bool], order: list[int]) -> None:
        """Fill the pool with ``rows`` (slot order), their seeded flags and the
        eviction order of the unseeded ones (oldest first)."""
        # The one copy of the pool: CPU float64 rows in the first _size slots of a buffer
        # that doubles when full. A full pool replaces rows in place.
        self._buffer = rows
        self._rows = rows.numpy()
        self._size = len(rows)
        self._seeded = list(seeded)
        self._fifo: OrderedDict[int, None] = OrderedDict.fromkeys(order)
        self._keys: dict[bytes, int] = {}
        self._slot_keys: list[bytes | None] = []
        for slot in range(self._size):
            key = row_key(self._rows[slot])
            self._slot_keys.append(None if key in self._keys else key)
            self._keys.setdefault(key, slot)

    def _init_runtime(self) -> None:
        self._lock = threading.RLock()
        # Copies on other devices, in the costs' dtype, for `best`; updated row by row.
        self._mirrors: dict[tuple[torch.device, torch.dtype], Tensor] = {}

    def __getstate__(self) -> dict:
        with self._lock:
            state = {name: getattr(self, name) for name in (
                "num_outputs", "max_size", "_signature", "_label", "_cost_shape", "_hint",
                "_check")}
            state["_aux"] = OrderedDict(self._aux)
            state["rows"] = self._buffer[: self._size].clone()
            state["seeded"] = list(self._seeded)
            state["order"] = list(self._fifo)
        return state

    def __setstate__(self, state: dict) -> None:
        rows, seeded, order = state.pop("rows"), state.pop("seeded"), state.pop("order")
        state.setdefault("_aux", OrderedDict())  # a pool pickled before it kept them
        state.setdefault("_check", None)
        self.__dict__.update(state)
        self._reset(rows.to(torch.float64).contiguous(), seeded, order)
        self._init_runtime()

    def keep_aux(self, keys: list[bytes], aux: np.ndarray) -> None:
        """Keep ``aux[i]``, the auxiliaries of a whole solution whose pooled columns have the
        digest ``keys[i]``, dropping the oldest beyond ``max_size``."""
        with self._lock:
            for key, row in zip(keys, aux, strict=True):
                self._aux[key] = row.copy()
                self._aux.move_to_end(key)
            while len(self._aux) > self.max_size:
                self._aux.popitem(last=False)

    def kept_aux(self) -> tuple[list[bytes], list[np.ndarray]]:
        """The digests and auxiliaries `keep_aux` kept, oldest first."""
        with self._lock:
            return list(self._aux), list(self._aux.values())

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        of = f", {self._label}" if self._label else ""
        return f"SolutionPool({len(self)} of at most {self.max_size}, N={self.num_outputs}{of})"

    @property
    def spec_label(self) -> str | None:
        """The label of the problem the pool is bound to, or None while unbound."""
        return self._label

    def bind(self, spec: Any) -> SolutionPool:
        """Tie the pool to ``spec`` (the first call) or check that ``spec`` is the problem
        it is tied to: the same spec up to its sense. Returns the pool.

        Raises:
            ValueError: the pool holds solutions of another problem.
        """
        signature = spec_signature(spec)
        with self._lock:
            if self._signature is None:
                width = pool_width(spec)
                hint = (_WHOLE.format(n=spec.num_outputs, width=width)
                        if width != spec.num_outputs else "")
                if width != self.num_outputs:
                    raise InputError(f"pool holds solutions of {self.num_outputs} outputs but "
                                     f"{spec.label} has {width}" if not hint else
                                     f"pool holds rows of {self.num_outputs} values but "
                                     f"{spec.label} keeps {width}{hint}")
                # seeds given before, while unbound, meet it too
                check = SeedCheck(spec, width)
                seeded = [slot for slot in range(self._size) if self._seeded[slot]]
                if seeded:
                    check(self._rows[seeded])
                self._signature, self._label, self._hint = signature, spec.label, hint
                self._check = check
                # rows may be given in the cost shape when the pool keeps the outputs only
                self._cost_shape = (tuple(spec.cost_shape) if width == spec.num_outputs
                                    else (width,))
            elif self._check is None and signature == self._signature:
                self._check = SeedCheck(spec, pool_width(spec))  # a pool pickled without
            elif signature != self._signature:
                raise InputError(
                    f"this pool holds solutions of {self._label}, not of {spec.label}: a pool "
                    f"is shared only between layers and losses on the same problem (the same "
                    f"spec, the sense aside), as another problem's rows may be infeasible for "
                    f"it; give this one its own pool (pool=None)")
        return self

    @property
    def solutions(self) -> Tensor:
        """A copy of the pool, ``(P, N)`` float64 on the CPU, in slot order (a row that
        replaced an evicted one has its slot)."""
        with self._lock:
            return self._buffer[: self._size].clone()

    def snapshot(self, like: Tensor) -> Tensor:
        """A copy of the pool ``(P, N)`` on ``like``'s device and dtype, never changed
        afterwards (a graph that saved it stays valid while the pool grows)."""
        with self._lock:
            return self._buffer[: self._size].to(device=like.device, dtype=like.dtype,
                                                 copy=True)

    def seed(self, solutions: Tensor) -> int:
        """Add solutions that stay in the pool whatever comes later (one already in the
        pool becomes seeded); returns how many were new."""
        return self._add(solutions, seeded=True, checked=True)

    def add(self, solutions: Tensor) -> int:
        """Add ``(..., N)`` solutions not yet in the pool, checked as `seed` checks them
        (a user's rows: an infeasible one was answered in training); returns how many
        were new."""
        return self._add(solutions, seeded=False, checked=True)

    def add_solved(self, solutions: Tensor) -> int:
        """`add` for a solver's own solutions, which need no check (the solution
        cache's and the losses' exact solves)."""
        return self._add(solutions, seeded=False)

    def best(self, costs: Tensor, allowed: Allowed | None = None) -> Tensor:
        """The cheapest pooled solution for each instance of ``(B, N)`` minimisation
        costs, on the costs' device and dtype. ``allowed`` restricts each instance to
        some pooled solutions (see `lookup`). Raises `SolverError` (a RuntimeError) on
        an empty pool, or when ``allowed`` leaves an instance without a solution."""
        y, found = self.lookup(costs, allowed)
        if not bool(found.all()):
            instance = int((~found).nonzero()[0, 0])
            raise SolverError(f"no pooled solution is allowed for instance {instance} "
                               f"({len(self)} in the pool): solve it exactly")
        return y

    @hidden_from_transforms
    def lookup(self, costs: Tensor, allowed: Allowed | None = None) -> tuple[Tensor, Tensor]:
        """``(y, found)``: for each instance of ``(B, N)`` minimisation costs the cheapest
        pooled solution ``y`` (costs' device and dtype) among those ``allowed``, and
        whether there was one (``(B,)`` bool; an instance without one gets zeros).

        ``allowed(pooled)`` takes the pooled rows ``(P, N)`` on the costs' device and
        dtype and returns a ``(B, P)`` bool mask, e.g. the rows feasible for per-call
        constraints; it runs under the pool's lock. Raises `SolverError` on an
        empty pool."""
        with self._lock, torch.no_grad():
            if not self._size:
                raise SolverError("the solution pool is empty: seed it or solve exactly first")
            pool = self._on(costs.device, costs.dtype)
            scores = costs.to(pool.dtype) @ pool.T
            found = torch.ones(len(costs), dtype=torch.bool, device=costs.device)
            if allowed is not None:
                mask = allowed(pool if pool.dtype == costs.dtype else pool.to(costs.dtype))
                if tuple(mask.shape) != tuple(scores.shape):
                    raise InputError(f"allowed returned a mask of shape {tuple(mask.shape)}, "
                                     f"expected {tuple(scores.shape)} (instances, pooled rows)")
                mask = mask.to(device=scores.device, dtype=torch.bool)
                scores = scores.masked_fill(~mask, torch.inf)
                found = mask.any(dim=1)
            y = pool[scores.argmin(dim=1)].to(costs.dtype)
            if allowed is not None:
                y[~found] = 0.0
            return y, found

    def slots(self, keys: list[bytes]) -> list[int | None]:
        """Where the rows with these digests (`row_key`) are: each one's index among the
        pooled rows that `lookup` hands ``allowed``, or None for a row not (or no longer)
        in the pool."""
        with self._lock:
            return [self._keys.get(key) for key in keys]

    def _flat_rows(self, solutions: Any) -> np.ndarray:
        """``solutions`` as ``(M, N)`` float64 rows, refused unless their trailing shape
        is the problem's cost shape (or ``(N,)``) and every value is finite."""
        tensor = torch.as_tensor(solutions).detach()
        shape = tuple(tensor.shape)
        n = self.num_outputs
        if self._cost_shape is not None:
            k = len(self._cost_shape)
            ok = shape[len(shape) - k:] == self._cost_shape or shape[-1:] == (n,)
            expected = f"(..., {', '.join(map(str, self._cost_shape))})"
            if self._cost_shape != (n,):
                expected += f" or (..., {n})"
            expected += self._hint
        else:
            ok = any(int(np.prod(shape[i:])) == n for i in range(len(shape)))
            expected = f"trailing dimensions that multiply to N = {n}"
        if not ok:
            of = f" of {self._label}" if self._label else ""
            raise InputError(f"pool solutions{of} must have shape {expected}, got {shape}")
        # + 0.0 turns -0.0 (which solvers return) into 0.0, so equal rows match
        rows = tensor.to("cpu", torch.float64).reshape(-1, n).numpy() + 0.0
        if not np.isfinite(rows).all():
            bad = int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])
            raise InputError(f"pool solutions must be finite, got {rows[bad][:8]} in row {bad}")
        return rows

    @hidden_from_transforms
    def _add(self, solutions: Any, seeded: bool, checked: bool = False) -> int:
        """Add rows (seeded ones stay whatever comes later), checked against the spec
        (`SeedCheck`) where ``checked``: a user's rows, not a solver's."""
        rows = self._flat_rows(solutions)
        with self._lock:
            if checked and self._check is not None:
                # a user's rows: an infeasible or fractional one was answered in training
                self._check(rows, "seeded solution" if seeded else "added solution")
            added, written = 0, []
            for row in rows:
                key = row_key(row)
                slot = self._keys.get(key)
                if slot is not None and np.array_equal(self._rows[slot], row):
                    if seeded and not self._seeded[slot]:
                        self._seeded[slot] = True
                        del self._fifo[slot]
                    continue
                slot = self._free_slot()
                if slot is None:  # full of seeded solutions
                    if seeded:
                        warnings.warn(
                            f"the solution pool is full of {self.max_size} seeded solutions "
                            f"(its max_size): the rest of the seeds are left out, and no "
                            f"solve joins the pool any more; give it a larger max_size",
                            RuntimeWarning, stacklevel=3)
                    break
                self._rows[slot] = row
                self._seeded[slot] = seeded
                if not seeded:
                    self._fifo[slot] = None
                # a digest shared with another row (never seen in practice) is left out
                # of the index: the row may then appear twice, never be mistaken
                self._slot_keys[slot] = None if key in self._keys else key
                self._keys.setdefault(key, slot)
                written.append(slot)
                added += 1
            self._update_mirrors(written)
        return added

    def _free_slot(self) -> int | None:
        """The slot for a new row: the next empty one, else the oldest unseeded row's
        (its row leaves the pool), else None (every row is seeded)."""
        if self._size < self.max_size:
            if self._size == len(self._buffer):
                self._grow()
            self._size += 1
            self._seeded.append(False)
            self._slot_keys.append(None)
            return self._size - 1
        if not self._fifo:
            return None
        slot, _ = self._fifo.popitem(last=False)
        old = self._slot_keys[slot]
        if old is not None:
            del self._keys[old]
        return slot

    def _grow(self) -> None:
        grown = torch.empty(min(self.max_size, max(16, 2 * self._size)), self.num_outputs,
                            dtype=torch.float64)
        grown[: self._size] = self._buffer[: self._size]
        self._buffer, self._rows = grown, grown.numpy()
        self._mirrors.clear()  # rebuilt at the new capacity on the next lookup

    def _update_mirrors(self, slots: list[int]) -> None:
        if not slots or not self._mirrors:
            return
        index = torch.tensor(slots)
        rows = self._buffer[index]
        for mirror in self._mirrors.values():
            mirror[index.to(mirror.device)] = rows.to(device=mirror.device, dtype=mirror.dtype)

    #: Where lookups use the buffer itself (tests point it elsewhere to run the mirrors).
    _buffer_device = "cpu"

    def _on(self, device: torch.device, dtype: torch.dtype) -> Tensor:
        """The pool's first rows for a lookup: the buffer itself on the CPU (costs are
        multiplied in float64), a mirror kept up to date on another device."""
        if device.type == self._buffer_device:
            return self._buffer[: self._size]
        key = (device, dtype)
        mirror = self._mirrors.get(key)
        if mirror is None:
            mirror = self._mirrors[key] = self._buffer.to(device=device, dtype=dtype, copy=True)
        return mirror[: self._size]


def as_pool(pool: Any, spec: Any) -> SolutionPool:
    """The pool of a layer or loss on ``spec``, bound to it: a new one from ``None``,
    ``pool`` itself when it is a `SolutionPool` (shared; refused when it belongs to
    another problem), or a new one seeded with solutions ``(..., *cost_shape)`` or a
    data set holding them (``.solutions``, as ``cl.data``'s, or PyEPO's
    ``optDataset.sols``).

    Raises:
        ValueError: the pool belongs to another problem, or the solutions do not have
            the problem's trailing shape.
    """
    if isinstance(pool, SolutionPool):
        return pool.bind(spec)
    fresh = SolutionPool(spec)
    if hasattr(pool, "sols") and hasattr(pool, "model") and not hasattr(pool, "solutions"):
        from .interop.pyepo import dataset_solutions  # a PyEPO optDataset: its own order

        pool = torch.from_numpy(dataset_solutions(pool, pool_width(spec)))
    if pool is not None:
        fresh.seed(getattr(pool, "solutions", pool))
    return fresh


def cache_setting(name: str, value: Any, spec: Any) -> Any:
    """``value`` checked as a layer's or loss's ``solve_ratio`` (`check_solve_ratio`) or
    ``pool`` (`as_pool`, for ``spec``; None while there is none yet) where ``name`` is
    one, else as it is: what setting either attribute stores, whenever it is set."""
    if name == "solve_ratio":
        return check_solve_ratio(value)
    if name == "pool" and spec is not None:
        return as_pool(value, spec)
    return value


def check_solve_ratio(solve_ratio: float) -> float:
    """``solve_ratio`` as a float in [0, 1], or ``ValueError`` naming what it got."""
    if isinstance(solve_ratio, bool) or not isinstance(solve_ratio, (int, float, np.number)):
        raise InputError(f"solve_ratio must be a number in [0, 1] (the probability of an "
                         f"exact solve), got {solve_ratio!r}")
    ratio = float(solve_ratio)
    if not 0.0 <= ratio <= 1.0:
        raise InputError(f"solve_ratio must be in [0, 1], got {solve_ratio} (it is the "
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

    It is the wrapped solver with only `_full_batch` changed, so every estimator and
    loss that calls ``solve_min`` / ``solve_batch`` uses the cache without knowing it. Exact
    solutions go into the pool (distinct, up to ``pool.max_size``); an instance
    drawn for the pool while the pool is empty is solved exactly. Draws come from
    ``generator`` (the global RNG when None), one uniform per instance.

    The pool keeps rows of width ``pool_width``: the outputs, or whole solutions
    when the spec has a known cost (the pool then ranks them with it). Calls that
    ask for the auxiliaries of a pool that does not keep them are solved exactly.
    With per-call rows, an instance drawn for the pool gets the cheapest pooled solution
    that meets its rows ``A x <= b``: checked on the pooled columns, and where the
    rows weigh auxiliaries the pool does not keep, on the whole solution
    ``concat(y, aux)`` with the auxiliaries an exact solve of ``y`` for such rows
    returned (kept by the pool, `SolutionPool.keep_aux`); a pooled ``y``
    without them (seeded, or solved elsewhere) does not answer such rows.

    The statuses of a call (``solve(..., return_status=True)``) cover every instance: the
    exact solver's status for the instances it solved (an instance its per-call rows leave
    infeasible is always among them: no pooled solution meets its rows), `POOLED`
    for the others.
    """

    def __init__(self, solver: Solver, solve_ratio: float, pool: SolutionPool,
                 generator: torch.Generator | None = None) -> None:
        super().__init__(solver.spec, solver.kernel, solver.backend, solver.config)
        pool.bind(solver.spec)
        self.exact = solver
        self.solve_ratio = check_solve_ratio(solve_ratio)
        self.pool = pool
        self.generator = generator

    def __repr__(self) -> str:
        return f"CachedSolver({self.exact!r}, solve_ratio={self.solve_ratio}, pool={self.pool!r})"

    def __reduce__(self) -> tuple:
        # the exact solver copies as its recipe; the pool and the generator as they are
        return CachedSolver, (self.exact, self.solve_ratio, self.pool, self.generator)

    def close(self) -> None:
        self.exact.close()  # its kernel, and the solver it made for per-call rows

    def _full_batch(self, costs: Tensor, start: np.ndarray | None = None, full: bool = False,
                    rows: Any = None, aux_known: Any = None) -> Solved:
        # a per-call known cost reaches here already folded into the costs on the outputs
        # (Solver.fold_known); on the auxiliaries (aux_known) it ranks whole solutions
        wide = full or self.known is not None or aux_known is not None
        if wide and self.pool_width < self.num_vars:  # no auxiliaries in the pool
            solved = self._solve_exactly(costs, wide, rows, aux_known=aux_known)
        else:
            solved = self._cached(costs, wide, rows, aux_known)
        y = solved.values
        return Solved(y if wide else y[:, : self.num_outputs], solved.statuses)

    @staticmethod
    def _mixed(y: Tensor, exact: Tensor, solved: Solved | None) -> Solved:
        """``y`` with each instance's status: ``solved``'s (the exact answer, or None) for
        the instances of the mask ``exact``, `POOLED` for the others. A flagged infeasible
        instance must reach the estimators that read statuses (CombOptNet)."""
        statuses = [POOLED] * len(y)
        if solved is not None:
            for position, status in zip(exact.nonzero().flatten().tolist(),
                                        statuses_of(solved)):
                statuses[position] = status
        return Solved(y, tuple(statuses))

    def _cached(self, costs: Tensor, wide: bool, rows: Any = None,
                aux_known: Any = None) -> Solved:
        """One lookup answers every instance (a new tensor) with the cheapest pooled
        solution that meets its per-call rows, if any; the instances drawn for an exact
        solve, and those no pooled solution answers, are overwritten with their solutions."""
        allowed, keep_aux = None, False
        if rows is not None:
            rows = rows.torch(costs)
            allowed, keep_aux = self._allowed(rows)
        drawn = self._draw(len(costs))
        if bool(drawn.all()) or len(self.pool) == 0:
            return self._solve_exactly(costs, wide, rows, keep_aux, aux_known)
        y, found = self.pool.lookup(self._keyed(costs, aux_known), allowed)
        exact = drawn.to(costs.device) | ~found.to(costs.device)
        solved = None
        if bool(exact.any()):
            solved = self._solve_exactly(costs[exact], wide,
                                         None if rows is None else rows.take(exact), keep_aux,
                                         _take(aux_known, exact))
            y[exact] = solved.values.to(y)
        return self._mixed(y, exact, solved)

    def _allowed(self, rows: Any) -> tuple[Allowed, bool]:
        """`SolutionPool.lookup`'s ``allowed`` for per-call rows ``A x <= b`` (as tensors),
        and whether some rows weigh auxiliaries the pool does not keep: those are checked
        with the auxiliaries kept for each pooled ``y`` (`_pooled_aux`), and a pooled ``y``
        without them does not answer such rows."""
        width = self.pool_width
        # per instance: whether its rows weigh the auxiliaries the pool does not keep
        weighs = (rows.A[..., width:] != 0).flatten(1).any(dim=1)[rows.index]
        keep_aux = bool(weighs.any())

        def allowed(pooled: Tensor) -> Tensor:
            # in float64, as the rows are (`Rows.torch`): float32 rounds large coefficients
            A, b = rows.A[rows.index], rows.b[rows.index]
            whole = pooled.to(A)
            if keep_aux:
                aux, known = self._pooled_aux(pooled)
                whole = torch.cat([whole, aux.to(A)], dim=1)
            lhs = torch.einsum("bmk,pk->bmp", A[..., : whole.shape[1]], whole)
            # to the row's own size (an absolute 1e-6 let a row of 1e-7 take what it
            # forbids, and flagged no infeasible instance): a pooled solution a row
            # refuses within the solver's tolerance is solved again, never answered wrong
            size = torch.einsum("bmk,pk->bmp", A[..., : whole.shape[1]].abs(), whole.abs())
            ok = (lhs <= b[..., None] + rounding(size, b.abs()[..., None], POOL_ROW_TOL)
                  ).all(dim=1)
            if keep_aux:
                ok = ok & (known[None, :] | ~weighs.to(ok.device)[:, None])
            return ok

        return allowed, keep_aux

    def _pooled_aux(self, pooled: Tensor) -> tuple[Tensor, Tensor]:
        """For the pooled rows ``(P, N)`` (`lookup`'s, in slot order), the auxiliaries
        kept for each ``(P, num_aux)`` (zeros where none) and whether there are ``(P,)``."""
        keys, values = self.pool.kept_aux()
        aux = pooled.new_zeros(len(pooled), self.num_aux)
        known = torch.zeros(len(pooled), dtype=torch.bool, device=pooled.device)
        hits = [(slot, i) for i, slot in enumerate(self.pool.slots(keys))
                if slot is not None and slot < len(pooled)]
        if hits:
            index = torch.tensor([slot for slot, _ in hits], device=pooled.device)
            aux[index] = torch.from_numpy(np.stack([values[i] for _, i in hits])).to(pooled)
            known[index] = True
        return aux, known

    def _keep_aux(self, x: Tensor) -> None:
        """Keep the auxiliaries of whole solutions ``x`` ``(B, num_vars)`` beside the pool,
        by the digest of their outputs (`SolutionPool.keep_aux`): they copy with it."""
        whole = x.detach().to("cpu", torch.float64).numpy() + 0.0
        keys = [row_key(np.ascontiguousarray(row[: self.pool_width])) for row in whole]
        self.pool.keep_aux(keys, whole[:, self.pool_width :])

    def _draw(self, count: int) -> Tensor:
        """Which of ``count`` instances are solved exactly: one uniform each from the
        generator, on its own device, below ``solve_ratio``."""
        return torch.rand(count, generator=self.generator,
                          device=generator_device(self.generator)) < self.solve_ratio

    def _keyed(self, costs: Tensor, aux_known: Any = None) -> Tensor:
        """The costs the pool ranks its rows by: the whole objective where the spec has a
        known cost (its rows are then whole solutions, `pool_width`; with ``aux_known``,
        the instance's own on the auxiliaries), else the costs of the outputs."""
        return costs if self.known is None else self.widen(costs, aux_known)

    def _solve_exactly(self, costs: Tensor, wide: bool, rows: Any = None,
                       keep_aux: bool = False, aux_known: Any = None) -> Solved:
        """Exact solves, each started from the pool's best solution under its cost where
        the kernel takes a MIP start (it saves time: benchmarks/warm_start.py); the
        solutions join the pool (not those of per-call rows,
        whose flagged infeasible instances are zeros). ``keep_aux``: solved whole, and the
        auxiliaries kept beside the pool (`_keep_aux`) for per-call rows that weigh them."""
        start = None
        if rows is None and len(self.pool) and self.exact.kernel.takes_start:
            start = self.pool.best(self._keyed(costs, aux_known)).to("cpu",
                                                                     torch.float64).numpy()
        solved = (self.exact._full_batch(costs, start, full=wide or keep_aux, rows=rows)
                  if aux_known is None else
                  self.exact._full_batch(costs, start, wide or keep_aux, rows, aux_known))
        x = solved.values
        if rows is None:
            self.pool.add_solved(x[:, : self.pool_width])
        else:  # flagged infeasible instances are zeros, not solutions: left out
            kept = torch.tensor([status != INFEASIBLE for status in statuses_of(solved)],
                                dtype=torch.bool, device=x.device)
            if keep_aux:
                self._keep_aux(x[kept])
            self.pool.add_solved(x[kept][:, : self.pool_width])
        return Solved(x if wide or not keep_aux else x[:, : self.num_outputs], solved.statuses)


def _take(aux_known: Any, selected: Tensor) -> Any:
    """A per-call known cost on the auxiliaries for the instances ``selected`` (a mask),
    or None."""
    return None if aux_known is None else aux_known[selected.to(aux_known.device)]
