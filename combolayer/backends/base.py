"""What a backend is: its declared capabilities, where ``"auto"`` ranks it, and
the default check of a problem against them.

A backend subclasses `Backend`, sets ``name``, ``requires`` (the
packages it imports), ``capabilities`` (a `Capability` flag set),
``kinds`` (the problem kinds it solves with an algorithm of its own) and its
tiers, and defines ``compile(spec, config) -> Kernel``. Registering it
([`register_backend`][combolayer.backends.register_backend] or the entry-point group
``combolayer.backends``) is the only other step.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import ClassVar

from ..specs.base import Spec
from .config import BackendConfig
from .solver import FunctionKernel, Kernel


class Capability(enum.Flag):
    """What a backend can solve beyond its own problem kinds."""

    NONE = 0
    #: Any canonical form with continuous variables (a linear program).
    LP = enum.auto()
    #: Integer variables that need branching (a mixed-integer program).
    MIP = enum.auto()
    #: Lazily separated constraints (``CanonicalForm.separator``).
    LAZY_CUTS = enum.auto()
    #: A whole batch in one vectorised call rather than a loop over instances.
    #: (Whether kernels take torch tensors on any device is ``Backend.array_api``.)
    BATCHED = enum.auto()
    #: Per-call rows ``A x <= b`` (``kernel(costs, rows=...)``, `combolayer.backends.rows`),
    #: put into the kept model in place.
    ROWS = enum.auto()


class Tier(enum.IntEnum):
    """Where ``backend="auto"`` looks for a solver, lower first: the whole order in one
    place. A backend's ``rank(spec)`` returns one of these levels; the levels between
    ``GENERIC`` and ``LAST`` order the generic solvers as benchmarks/backends.py,
    benchmarks/enumeration.py and benchmarks/tsp_backends.py measured them.
    """

    #: A formula on the tensor itself, batched on its device (top-k, ranking).
    CLOSED_FORM = 0
    #: An algorithm for the problem kind (Dijkstra, assignment, knapsack DP, Held-Karp).
    SPECIALISED = 1
    #: A batched torch kernel for a kind that a host algorithm solves faster on the CPU
    #: (Bellman-Ford shortest paths: first on an accelerator, second here).
    SPECIALISED_TORCH = 2
    #: Slow but independent: for cross-checks, never faster.
    REFERENCE = 50
    #: Every generic solver ranks above this.
    GENERIC = 100
    #: A fast LP solver on LPs (HiGHS).
    LP_SOLVER = 110
    #: A licensed LP solver on LPs (Gurobi).
    LP_SOLVER_LICENSED = 111
    #: Small binary MIPs enumerated in one batched torch call.
    MIP_ENUMERATION = 115
    #: A licensed MIP solver on MIPs (Gurobi).
    MIP_SOLVER_LICENSED = 116
    #: HiGHS's TSP cut loop, on TSPs up to its node limit.
    TSP_CUT_LOOP = 117
    #: A licensed MIP solver on TSPs (Gurobi).
    TSP_LICENSED = 118
    #: The MIP solver with the least set-up per solve (SCIP).
    MIP_SOLVER = 120
    #: A dedicated algorithm measured slower than the MIP solver on this instance.
    SPECIALISED_SLOW = 122
    #: A MIP solver with more set-up per solve (HiGHS on MIPs).
    MIP_SOLVER_SLOW = 125
    #: A modelling layer in front of a solver (cvxpy).
    MODELLING = 130
    #: Never the automatic choice while anything else can solve the problem.
    LAST = 1000


class Backend:
    """Base of every backend: the default capability check and ranking."""

    name: ClassVar[str]
    #: Python packages the backend imports (checked with ``importlib.util.find_spec``).
    requires: ClassVar[tuple[str, ...]] = ()
    capabilities: ClassVar[Capability] = Capability.NONE
    #: Problem kinds solved by an algorithm of the backend's own.
    kinds: ClassVar[frozenset[str]] = frozenset()
    #: The tier on the problem kinds in ``kinds``, and on everything else.
    native_tier: ClassVar[int] = Tier.SPECIALISED
    generic_tier: ClassVar[int] = Tier.LAST
    #: What the compiled kernels take: ``"numpy"`` or ``"torch"``.
    array_api: ClassVar[str] = "numpy"
    #: Whether ``"auto"`` logs (INFO, once per reason) that it passed over this backend,
    #: installed but refusing the problem (Gurobi: a licence too small for the model).
    announce_fallback: ClassVar[bool] = False
    #: Keys of ``BackendConfig.options`` that configure the backend itself, not its
    #: solver (``"pyepo"``'s ``"model"``): without them it solves nothing, so ``"auto"``
    #: never picks it, and they are not handed on to another backend.
    config_options: ClassVar[tuple[str, ...]] = ()
    #: Whether its solver takes ``BackendConfig.options`` (HiGHS, SCIP, Gurobi, cvxpy):
    #: others are warned of as doing nothing (`combolayer.backends.registry`).
    takes_options: ClassVar[bool] = False
    #: Whether its solver stops at ``BackendConfig.time_limit`` and ``mip_gap`` (HiGHS,
    #: SCIP, Gurobi, cvxpy's HiGHS and SCIP), read through `ignored_limits`.
    stops_at_limits: ClassVar[bool] = False

    @classmethod
    def ignored_limits(cls, config: BackendConfig) -> str | None:
        """Why ``config``'s ``time_limit`` and ``mip_gap`` stop none of this backend's
        solves, or None where they do (`stops_at_limits`): ignored ones are warned of
        (`combolayer.backends.registry`), and executors give workers no time budget
        from a limit no solve stops at (a healthy solve was killed as hung)."""
        return None if cls.stops_at_limits else "its algorithm runs to the end"

    @classmethod
    def label(cls, config: BackendConfig) -> str:
        """The ``backend`` label of this backend's solvers under ``config``: its name,
        or more (``"pyepo:shortestPathModel"``)."""
        return cls.name

    @classmethod
    def rank(cls, spec: Spec) -> int:
        """Where ``"auto"`` ranks this backend for ``spec``; lower is tried first.
        Override when the speed depends on the instance."""
        return cls.native_tier if spec.kind in cls.kinds else cls.generic_tier

    @classmethod
    def row_rank(cls, spec: Spec) -> int:
        """Where ``"auto"`` ranks this backend for the calls on ``spec`` that bring
        per-call rows ``A x <= b`` (which make a problem with an integral LP a MIP:
        `CanonicalForm.for_rows`); `rank` unless overridden."""
        return cls.rank(spec)

    def accepts(self, spec: Spec) -> str | None:
        """Why this backend cannot solve ``spec`` (its packages being installed), or None.
        Extend it with ``super().accepts(spec) or <own checks>``."""
        if spec.kind in self.kinds:
            return None
        if not self.capabilities & Capability.LP:
            return f"it solves only {sorted(self.kinds)}, not {spec.kind!r}"
        if spec.is_mip and not self.capabilities & Capability.MIP:
            return "it cannot handle integer variables"
        return None

    def compile(self, spec: Spec, config: BackendConfig) -> Kernel:
        raise NotImplementedError


class FunctionBackend(Backend):
    """A backend made of one kernel builder per problem kind, each returning a
    function on a ``(B, N)`` batch of minimisation costs of the backend's
    ``array_api``, or a `Kernel` of its own."""

    builders: ClassVar[dict[str, Callable[[Spec], Callable]]] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "builders" in cls.__dict__ and "kinds" not in cls.__dict__:
            cls.kinds = frozenset(cls.builders)

    def compile(self, spec: Spec, config: BackendConfig) -> Kernel:
        function = self.builders[spec.kind](spec)
        return function if isinstance(function, Kernel) else FunctionKernel(function,
                                                                             self.array_api)
