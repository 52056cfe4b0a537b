"""Problem specs: the declarative front end of every layer.

A spec is a frozen pydantic model with a ``kind`` tag. [`ILP`][combolayer.ILP] is the
general one; the named problems in [`combolayer.problems`][combolayer.problems] build on
`Spec` too and convert themselves to an [`ILP`][combolayer.ILP] with ``to_ilp()``.
Every validation failure raises `SpecError`.

Each spec class joins `SPEC_KINDS` with the `register_spec`
decorator, next to its definition; [`combolayer.load_spec`][combolayer.load_spec] reads every
registered kind, so adding a problem is one new module.
"""

from __future__ import annotations

import difflib
import itertools
import math
import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from functools import cached_property
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
import scipy.sparse as sp
from pydantic import (
    BaseModel,
    ConfigDict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..errors import InputError, InputTypeError, SpecError
from . import cvxpy_frontend
from .canonical import CanonicalForm, unit_rows

Sense = Literal["min", "max"]
Integrality = Literal["binary", "integer", "continuous"]
RowSense = Literal["<=", "==", ">="]
#: An integer bound within this of a whole number is that number (float noise).
INTEGER_TOL = 1e-9
#: Constraint coefficients and right-hand sides, finite bounds and known costs (and a
#: knapsack's data) must be smaller than this in magnitude: HiGHS refuses larger matrix
#: entries (its ``large_matrix_value``), and solvers read 1e20 as infinite.
MAX_COEFFICIENT = 1e15


def did_you_mean(key: str, options: Sequence[str]) -> str:
    """`` (did you mean 'epochs'?)`` for the option closest to a mistyped ``key``, or ``""``:
    the one hint every config and spec reader gives for an unknown key."""
    close = difflib.get_close_matches(key, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside a field's annotation (``list[Constraint]`` -> Constraint)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None


def _fields_at(model: type[BaseModel] | None, loc: tuple) -> list[str]:
    """The field names of the (nested) model that the location ``loc`` of an unknown key
    points into: ``("constraints", 0, "sens")`` in an ILP -> Constraint's fields."""
    for part in loc[:-1]:
        if model is None:
            return []
        if isinstance(part, str) and part in model.model_fields:
            model = _model_in(model.model_fields[part].annotation)
        elif isinstance(part, str) and part in SPEC_KINDS and model is Spec:
            model = SPEC_KINDS[part]  # the union's tag, as TypeAdapter writes it
    return [] if model is None else [name for name in model.model_fields if name != "kind"]


def _as_spec_error(error: ValidationError, model: type[BaseModel] | None = None) -> SpecError:
    # The same mistake in many rows (a wrong sense in every constraint) is one
    # message naming the rows, not one message per row.
    if model is None:
        model = next((cls for cls in (*SPEC_KINDS.values(), Constraint, Variable)
                      if cls.__name__ == error.title), Spec)
    grouped: dict[tuple, list[str]] = {}
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "spec"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            options = _fields_at(model, tuple(item["loc"]))
            message = (f"unknown key{did_you_mean(str(item['loc'][-1]), options)}; expected "
                       f"one of {', '.join(options)}" if options else "unknown key")
        pattern = tuple("#" if isinstance(part, int) else part for part in item["loc"])
        grouped.setdefault((pattern, message), []).append(where)
    lines = []
    for (_, message), places in grouped.items():
        shown = ", ".join(places[:5]) + (f" and {len(places) - 5} more" if len(places) > 5
                                         else "")
        lines.append(f"{shown}: {message}")
    title = error.title if error.title.isidentifier() else "spec"
    return SpecError(f"invalid {title}: " + "; ".join(lines))


def positional_fields(cls: type[BaseModel], args: tuple, data: dict[str, Any],
                      error: type[Exception], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``data`` with ``args`` bound to ``cls``'s fields in declaration order (``skip``
    left out), so a pydantic model takes positional arguments like a function:
    ``TSP(5)``, ``Blackbox(10.0)``. Too many or doubled ones raise ``error``."""
    names = [name for name in cls.model_fields if name not in skip]
    if len(args) > len(names):
        raise error(f"{cls.__name__} takes at most {len(names)} positional "
                    f"arguments ({', '.join(names)}), got {len(args)}")
    for name, value in zip(names, args):
        if name in data:
            raise error(f"{cls.__name__} got two values for {name!r}")
        data[name] = value
    return data


def _is_numeric(annotation: Any) -> bool:
    """True when a field's annotation holds ``int`` or ``float`` (``list[float]``,
    ``dict[int, float] | None``) and no ``bool``."""
    if annotation is bool:
        return False
    if annotation in (int, float):
        return True
    arguments = typing.get_args(annotation)
    return bool not in arguments and any(_is_numeric(a) for a in arguments)


def is_boolean(value: Any) -> bool:
    """Whether ``value`` is a boolean where a number is expected: Python's or numpy's, or
    a numpy array or torch tensor of booleans (Python, pydantic and ``float()`` all take
    ``True`` as 1)."""
    if isinstance(value, bool | np.bool_):
        return True
    return str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def boolean_in(value: Any, _seen: set[int] | None = None) -> Any:
    """The first boolean in ``value`` (`is_boolean`; itself, or its lists', tuples' and
    dicts' keys and items), or None. Each container is read once: YAML aliases make
    one list stand in many places (424 bytes described 10^8 numbers, read for 48 s)."""
    if is_boolean(value):
        return value
    if isinstance(value, list | tuple):
        items: Any = value
    elif isinstance(value, dict):
        items = itertools.chain(value.keys(), value.values())
    else:
        return None
    seen = set() if _seen is None else _seen
    if id(value) in seen:
        return None
    seen.add(id(value))
    for item in items:
        found = boolean_in(item, seen)
        if found is not None:
            return found
    return None


_INDEX = TypeAdapter(int)
_SIZES = TypeAdapter(list[int])


def _unique_index_keys(value: Any) -> Any:
    """A sparse ``{index: value}`` dict checked for two keys that name one index once
    read as whole numbers (``0`` and ``'0'``, ``'00'``), which would otherwise keep the
    last silently; any other value unchanged."""
    if not isinstance(value, dict):
        return value
    seen: dict[int, Any] = {}
    for key in value:
        try:
            index = _INDEX.validate_python(key)
        except ValidationError:
            continue  # pydantic names a key that is not an index
        if index in seen:
            raise InputError(f"the keys {seen[index]!r} and {key!r} both name index {index}; "
                             "expected each index once")
        seen[index] = key
    return value


def is_real(value: Any, integer: bool = False) -> bool:
    """Whether ``value`` is a real Python or numpy number (with ``integer``, a whole-number
    type), and no boolean: Python and pydantic take ``True`` as 1."""
    if is_boolean(value):
        return False
    return isinstance(value, (int, np.integer) if integer
                      else (int, float, np.integer, np.floating))


def refuse_booleans(annotation: Any, value: Any, name: str | None = None) -> None:
    """`InputError` when ``value``, for a field annotated ``annotation`` that holds numbers
    (`_is_numeric`), is or holds a boolean; the message starts with ``name`` where given
    (a model-wide check), else pydantic puts the field's location before it."""
    if not _is_numeric(annotation):
        return
    found = boolean_in(value)
    if found is not None:
        shown = "" if found is value else f" in {_Short(value)!r}"
        raise InputError(f"{name + ' ' if name else ''}must hold numbers, got the boolean "
                         f"{found!r}{shown}; write 1 or 0 for a number")


class NoBooleans(BaseModel):
    """A model whose numeric fields refuse booleans, nested ones included: pydantic reads
    ``true`` as 1, so a YAML ``time_limit: true`` is a one-second limit. The error is
    the model's own, at the field's location. (Specs check the same in a model
    validator: `_Validated`.)"""

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        refuse_booleans(cls.model_fields[info.field_name].annotation, value)
        return value


class _Validated(BaseModel):
    """Pydantic's ValidationError becomes [`SpecError`][combolayer.SpecError], keeping its locations
    and messages, for direct construction and for ``model_validate`` alike. No numeric
    field of any spec takes a boolean (`refuse_booleans`)."""

    @model_validator(mode="before")
    @classmethod
    def _no_booleans(cls, data: Any) -> Any:
        # A model validator, not a field validator for "*" (`NoBooleans`): pydantic allows
        # no "before" validator on the union's tag field (kind).
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                if name in data:
                    refuse_booleans(field.annotation, data[name], name)
        return data

    def __init__(self, *args: Any, **data: Any) -> None:
        # Positional arguments in field order, as API.md writes them: TSP(5), TopK(10, 3).
        data = positional_fields(type(self), args, data, SpecError, skip=("kind",))
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise _as_spec_error(error) from None

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any):  # type: ignore[override]
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as error:
            raise _as_spec_error(error) from None

    def __repr_args__(self) -> Any:
        # A short repr: long lists (constraints, weights, bounds) show their first
        # items and their length, never every number.
        for name, value in super().__repr_args__():
            yield name, _Short(value)


class _Short:
    """A value whose repr shows at most `SHOWN` items of each list, tuple or dict in it."""

    SHOWN = 3

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        value, shown = self.value, self.SHOWN
        if isinstance(value, (list, tuple)) and len(value) > 2 * shown:
            head = ", ".join(repr(_Short(v)) for v in value[:shown])
            return f"[{head}, ... {len(value)} in all]"
        if isinstance(value, dict) and len(value) > 2 * shown:
            head = ", ".join(f"{k!r}: {_Short(v)!r}" for k, v in list(value.items())[:shown])
            return f"{{{head}, ... {len(value)} in all}}"
        if isinstance(value, list):
            return "[" + ", ".join(repr(_Short(v)) for v in value) + "]"
        return repr(value)


#: The largest model a spec that is read (a YAML/JSON file or string, a dict, a train or
#: layer config, a run folder's spec.json) may declare, counted from its fields by
#: `Spec.model_size` before anything is built: this many variables...
MAX_VARIABLES = 1_000_000
#: ... and this many matrix entries (constraint nonzeros plus one per row): a few GB in
#: the canonical form, the solver's copy and the analysis together (``{kind: topk,
#: n: 1000000, k: 3}`` is near the limit in ``combolayer analyze``).
MAX_ENTRIES = 5_000_000
#: The variable limit `bounded` sets for the specs validated inside it (None: unchecked).
_size_limit: ContextVar[int | None] = ContextVar("combolayer_spec_size_limit", default=None)


@contextmanager
def bounded(max_variables: int | None = MAX_VARIABLES) -> Iterator[None]:
    """Within this block every spec kind checks its `Spec.model_size` against
    ``max_variables`` and `MAX_ENTRIES` before its own checks run or anything is
    allocated; ``None`` lifts both limits (trusted input). A context variable, not
    pydantic's validation context, because pydantic does not pass that context into
    a model with its own ``__init__`` (positional arguments). Specs built in Python
    outside it (``TSP(5000)``) are trusted and not checked."""
    token = _size_limit.set(max_variables)
    try:
        yield
    finally:
        _size_limit.reset(token)


def _too_large(label: str, variables: int, entries: int, limit: int) -> str:
    return (f"{label} compiles to a model of about {variables:,} variables and "
            f"{entries:,} matrix entries; expected at most {limit:,} variables and "
            f"{MAX_ENTRIES:,} entries for a spec that is read (pass max_variables=None to "
            "load_spec for trusted input, or build the spec in Python)")


def refuse_oversized(data: Any, max_variables: int | None) -> None:
    """Raise `SpecError` when the mapping ``data`` that is read declares a model above
    ``max_variables`` or `MAX_ENTRIES`, counted by its kind's `Spec.raw_model_size`
    before pydantic builds anything; the kind's `model_size` is checked again on the
    fields (`bounded`). ``None`` lifts the limits."""
    kind = data.get("kind") if isinstance(data, dict) else None
    cls = SPEC_KINDS.get(kind) if isinstance(kind, str) else None
    if max_variables is None or cls is None:
        return
    size = cls.raw_model_size(data)
    if size is not None and (size[0] > max_variables or size[1] > MAX_ENTRIES):
        label = ", ".join(f"{name}={data[name]!r}" for name in cls._label_fields
                          if name in data)  # a label from computed fields is not read yet
        raise SpecError(f"invalid {cls.__name__}: "
                        f"{_too_large(f'{cls.__name__}({label})', *size, max_variables)}")


class Spec(_Validated):
    """Base of every spec: frozen, no unknown fields, pydantic errors become SpecError."""

    # "constants" writes infinite bounds as -Infinity/Infinity, which JSON
    # loading reads back (the default, null, does not round-trip).
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    kind: str
    #: Field names shown in messages such as ``TSP(num_nodes=5)``.
    _label_fields: ClassVar[tuple[str, ...]] = ()
    #: True for problems whose ``to_ilp()`` is totally unimodular with integral
    #: data (flows, assignments, cardinality): the LP relaxation is exact.
    lp_is_integral: ClassVar[bool] = False

    def __eq__(self, other: object) -> bool:
        # The fields only: pydantic compares the whole __dict__ first, where cached
        # properties (to_matrices' sparse matrices) raise on ==.
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(self) is type(other) and all(
            getattr(self, name) == getattr(other, name) for name in type(self).model_fields)

    def __hash__(self) -> int:
        # pydantic hashes a frozen model's fields, and lists (an ILP's bounds, a
        # knapsack's weights) cannot be hashed; equal specs have equal cost shapes
        return hash((type(self), self.cost_shape))

    @model_validator(mode="after")
    def _bounded(self) -> Spec:
        # A base class's after-validator runs before its subclasses' own checks, which
        # may allocate one entry per variable (ILP broadcasts its bounds).
        limit = _size_limit.get()
        if limit is None:
            return self
        try:
            variables, entries = self.model_size()
            label = self.label
        except (ArithmeticError, LookupError, TypeError, ValueError):
            return self  # malformed fields: the kind's own checks name them
        if variables > limit or entries > MAX_ENTRIES:
            raise InputError(_too_large(label, variables, entries, limit))
        return self

    @classmethod
    def raw_model_size(cls, data: dict) -> tuple[int, int] | None:
        """`model_size` counted from the mapping that is read, before pydantic builds
        any field, for a kind whose fields can hold more than their text (a YAML alias
        repeats a whole row in a few bytes); None (the default) when building the fields
        first costs no more than their text. A count may stop once it passes
        `MAX_ENTRIES`; None too for fields it cannot read (the kind's checks name them)."""
        return None

    @property
    def cost_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    @property
    def num_outputs(self) -> int:
        return math.prod(self.cost_shape)

    @property
    def num_vars(self) -> int:
        """Every variable: the outputs, and an ILP's auxiliaries (the width of a known
        cost and of a whole solution); a named problem's solution is its output."""
        return self.num_outputs

    @property
    def has_integers(self) -> bool:
        """Whether some variable is integer (`CanonicalForm.integer`), told without
        building the canonical form: every named problem decides in integers."""
        return True

    @property
    def is_mip(self) -> bool:
        """Whether a solver must branch (`CanonicalForm.is_mip`), told without building the
        canonical form (a ranking's has n**2 variables): integer variables, and an LP
        relaxation that is not known to be integral."""
        return self.has_integers and not self.lp_is_integral

    def largest_output(self, aux: bool = False) -> float:
        """An upper bound on the magnitude of an output (with ``aux``, of any variable) in
        any solution: their bounds in the canonical form, built once per spec (inf where
        one has none, even if rows bound it)."""
        from .canonical import canonical_form

        form = canonical_form(self)
        n = self.num_vars if aux else self.num_outputs
        return float(np.maximum(np.abs(form.lower[:n]), np.abs(form.upper[:n])).max(initial=0.0))

    def affine_hull(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The affine hull of the solutions in closed form, ``(normals (r, N), a solution
        (N,))``, for a problem whose hull is known and costly to compute (`cl.analyze`
        returns it as is), else None."""
        return None

    @property
    def label(self) -> str:
        """A short name for messages, e.g. ``TSP(num_nodes=5)``."""
        args = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._label_fields)
        return f"{type(self).__name__}({args})"

    def to_ilp(self) -> ILP:
        raise NotImplementedError

    def model_size(self) -> tuple[int, int]:
        """``(variables, entries)`` of the largest model a backend compiles from this
        spec (``to_ilp()``): its variables, and its matrix entries (constraint nonzeros
        plus one per row, so that a declared count of nodes or rows is bounded too),
        counted from the fields without building anything, so that a spec that is read
        (`bounded`) is refused before it allocates. A named problem whose ILP has more
        than its outputs says so by overriding this; the default counts one variable
        and one entry per output, plus a row."""
        return self.num_outputs, self.num_outputs + 1

    def nonnegative_costs(self) -> np.ndarray | None:
        """The flat cost entries that must be >= 0 for this problem to be well posed
        (a boolean mask over ``num_outputs``), or None when any sign is fine.

        A layer refuses a user's cost that breaks it (``negative_cost_error``) and
        clips the negatives its own noise or a Blackbox step creates, warning once.
        """
        return None

    def negative_cost_error(self, where: str) -> InputError:
        """The error for a cost that breaks `nonnegative_costs` at ``where``."""
        return InputError(f"{self.label} needs non-negative costs, got a negative one ({where})")

    def cost_floor(self) -> Any:
        """What every solver applies to its minimisation-form costs before any kernel
        sees them, whatever the backend: a callable taking and returning a ``(B, N)``
        numpy array or torch tensor (raising, or setting entries to a floor), or None
        when the costs go to the kernel as they are (the default)."""
        return None

    def to_canonical(self, lazy: bool = True) -> CanonicalForm:
        """The matrix form solvers compile. ``lazy=False`` asks for a form without
        lazily separated constraints, for backends that cannot separate them."""
        form = self.to_ilp().to_canonical()
        return replace(form, lp_is_integral=self.lp_is_integral)


#: Every spec class by its ``kind`` tag: the discriminated union that
#: [`combolayer.load_spec`][combolayer.load_spec] reads is built from it.
SPEC_KINDS: dict[str, type[Spec]] = {}


SpecClass = TypeVar("SpecClass", bound=type)


def register_spec(cls: SpecClass) -> SpecClass:
    """Class decorator: make ``cls`` loadable by its ``kind`` tag (YAML, JSON, dicts).

    ``cls`` needs a tag field ``kind: Literal["name"] = "name"``.
    """
    kind = cls.model_fields["kind"].default if "kind" in cls.model_fields else None
    if not isinstance(kind, str):
        raise InputTypeError(f"{cls.__name__} needs a tag field such as "
                        "kind: Literal['my_problem'] = 'my_problem' to be registered")
    SPEC_KINDS[kind] = cls
    return cls


class Constraint(_Validated):
    """One linear row ``sum_j coefs[j] * x[j]  sense  rhs``.

    Args:
        coefs: the coefficients: a sparse ``{index: value}`` dict or a dense list over
            all variables (outputs first, then auxiliaries).
        sense: ``"<="``, ``"=="`` or ``">="``.
        rhs: the right-hand side, a number below `MAX_COEFFICIENT` in magnitude.
        name: the row's name (shown in errors and written to files), or None.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    coefs: dict[int, float] | list[float]
    sense: RowSense
    rhs: float
    name: str | None = None

    _unique_indices = field_validator("coefs", mode="before")(_unique_index_keys)

    @field_validator("rhs")
    @classmethod
    def _finite_rhs(cls, rhs: float) -> float:
        if not abs(rhs) < MAX_COEFFICIENT:
            raise InputError(f"rhs must be finite and below {MAX_COEFFICIENT:g} in magnitude, "
                             f"got {rhs}")
        return rhs

    def items(self) -> list[tuple[int, float]]:
        if isinstance(self.coefs, dict):
            return list(self.coefs.items())
        return [(j, v) for j, v in enumerate(self.coefs) if v != 0.0]


class Variable(_Validated):
    """Where one named model variable (a cvxpy variable) sits in an ILP's full solution
    ``x = concat(y, aux)``: its ``shape``, and ``index``, the position in ``x`` of each of
    its entries in row-major order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shape: list[int]
    index: list[int]

    @model_validator(mode="after")
    def _check(self) -> Variable:
        if any(isinstance(d, bool) or d < 1 for d in self.shape):
            raise InputError(f"shape must list sizes >= 1 ([] for a scalar), got {self.shape}")
        if len(self.index) != max(math.prod(self.shape), 1):
            raise InputError(f"index has {len(self.index)} entries but shape {self.shape} "
                             f"holds {math.prod(self.shape)}")
        return self


def _broadcast(value: Any, n: int, field: str) -> list:
    if isinstance(value, list):
        if len(value) != n:
            raise InputError(f"{field} has {len(value)} entries but the ILP has {n} variables")
        return value
    return [value] * n


@register_spec
class ILP(Spec):
    """A (mixed-)integer linear program ``min/max <w, y>`` over the first N variables.

    The N = prod(shape) output variables come first, then ``num_aux`` auxiliary
    variables, which are not predicted and come back only on request
    (``solve(costs, return_aux=True)``). Costs and solutions have shape
    ``(*batch, *shape)``. The objective is ``<w, y> + <known_cost, x>`` over all
    variables ``x = concat(y, aux)``.

    Args:
        shape: the cost/solution shape.
        num_aux: auxiliary variables after the outputs.
        known_cost: a cost that is not predicted, one number per variable
            (``num_vars`` long), or a sparse ``{index: value}`` dict as a constraint's
            ``coefs`` (read into the full list, zeros elsewhere), or None (no known cost).
        sense: ``"min"`` (default) or ``"max"``.
        integrality: ``"binary"`` (default), ``"integer"`` or ``"continuous"``,
            or one of those per variable.
        lower: lower bounds, one number or one per variable (default 0).
        upper: upper bounds, one number or one per variable; ``None`` is +inf
            (default 1).
        constraints: the rows, [`Constraint`][combolayer.Constraint] objects.
        variables: named model variables (set by ``from_cvxpy`` and ``from_file``):
            name -> where it sits in the full solution, read back by `split`; or None.
        default_cost: the objective of the MPS/LP file read (set by ``from_file``), one
            number per output: what ``combolayer solve`` solves without costs; or None.
        default_offset: that objective's constant (``from_file``), added to the
            objective ``combolayer solve`` prints.

    Other constructors: `from_matrices`, `from_cvxpy`,
    `from_file` (MPS/LP), and [`combolayer.load_spec`][combolayer.load_spec] (YAML/JSON).

    Raises:
        SpecError: an invalid field: an index out of range, lengths that do not
            match the number of variables, NaN, ``lower > upper``; the message
            names the field.

    Examples:
        >>> import combolayer as cl
        >>> spec = cl.ILP(shape=[3], constraints=[
        ...     cl.Constraint(coefs=[1, 1, 1], sense="==", rhs=1, name="pick one")])
        >>> cl.make_solver(spec).solve([0.3, -0.2, 0.1]).tolist()
        [0.0, 1.0, 0.0]
    """

    kind: Literal["ilp"] = "ilp"
    shape: list[int]
    num_aux: int = 0
    known_cost: list[float] | dict[int, float] | None = None
    sense: Sense = "min"
    integrality: Integrality | list[Integrality] = "binary"
    lower: float | list[float] = 0.0
    upper: float | list[float | None] | None = 1.0
    constraints: list[Constraint] = []
    #: Named model variables (``from_cvxpy``): name -> where it sits in the full solution.
    variables: dict[str, Variable] | None = None
    #: The objective of the MPS/LP file read (``from_file``), one number per output, and
    #: its constant: what ``combolayer solve`` solves when given no costs.
    default_cost: tuple[float, ...] | None = None
    default_offset: float = 0.0

    _label_fields: ClassVar[tuple[str, ...]] = ("shape",)

    @property
    def cost_shape(self) -> tuple[int, ...]:
        return tuple(self.shape)

    @property
    def num_vars(self) -> int:
        return self.num_outputs + self.num_aux

    @property
    def has_integers(self) -> bool:
        kinds = [self.integrality] if isinstance(self.integrality, str) else self.integrality
        return any(kind != "continuous" for kind in kinds)

    def model_size(self) -> tuple[int, int]:
        return self.num_vars, sum(len(row.coefs) + 1 for row in self.constraints)

    @classmethod
    def raw_model_size(cls, data: dict) -> tuple[int, int] | None:
        # YAML aliases repeat a row of constraints without its text: the rows are
        # counted as often as they are referenced, each in O(1) (its len()).
        try:
            shape = _SIZES.validate_python(data.get("shape"))
            num_aux = _INDEX.validate_python(data.get("num_aux", 0))
        except ValidationError:
            return None
        rows = data.get("constraints", [])
        if not isinstance(rows, list):
            return None
        entries = 0
        for row in rows:
            coefs = row.get("coefs") if isinstance(row, dict) else getattr(row, "coefs", None)
            entries += (len(coefs) if isinstance(coefs, list | dict) else 0) + 1
            if entries > MAX_ENTRIES:
                break
        # named variables' index lists, which aliases can repeat as well
        variables = data.get("variables") or {}
        for variable in (variables.values() if isinstance(variables, dict) else ()):
            index = variable.get("index") if isinstance(variable, dict) else None
            entries += len(index) if isinstance(index, list) else 0
            if entries > MAX_ENTRIES:
                break
        return math.prod(shape) + num_aux, entries

    _unique_indices = field_validator("known_cost", mode="before")(_unique_index_keys)

    @model_validator(mode="after")
    def _check(self) -> ILP:
        if not self.shape or any(d < 1 for d in self.shape):
            raise InputError(f"shape must be a non-empty list of positive sizes, got {self.shape}")
        if self.num_aux < 0:
            raise InputError(f"num_aux must be >= 0, got {self.num_aux}")
        try:
            return self._check_variables()
        except MemoryError:
            raise InputError(f"{self.num_vars:,} variables (prod(shape) + num_aux) are too many "
                             "to allocate a bound for each") from None

    def _check_variables(self) -> ILP:
        n = self.num_vars
        if isinstance(self.known_cost, dict):
            bad = [j for j in self.known_cost if not 0 <= j < n]
            if bad:
                raise InputError(f"known_cost index {bad[0]} is out of range: expected "
                                 f"0 <= index < {n} (num_vars = prod(shape) + num_aux)")
            dense = [0.0] * n
            for j, v in self.known_cost.items():
                dense[j] = v
            # one form after validation: every reader of known_cost sees the full list
            object.__setattr__(self, "known_cost", dense)
        if self.known_cost is not None:
            if len(self.known_cost) != n:
                raise InputError(f"known_cost has {len(self.known_cost)} entries but the ILP has "
                                 f"{n} variables (num_vars = prod(shape) + num_aux)")
            bad = [j for j, v in enumerate(self.known_cost) if not abs(v) < MAX_COEFFICIENT]
            if bad:
                raise InputError(f"known_cost[{bad[0]}] must be finite and below "
                                 f"{MAX_COEFFICIENT:g} in magnitude, got {self.known_cost[bad[0]]}")
        _broadcast(self.integrality, n, "integrality")
        lower = np.asarray(_broadcast(self.lower, n, "lower"), dtype=float)
        upper = self._upper_array()
        if np.isnan(lower).any() or np.isposinf(lower).any():
            j = int(np.flatnonzero(np.isnan(lower) | np.isposinf(lower))[0])
            raise InputError(f"lower[{j}] must be a number below +inf, got {lower[j]}")
        if np.isnan(upper).any() or np.isneginf(upper).any():
            j = int(np.flatnonzero(np.isnan(upper) | np.isneginf(upper))[0])
            raise InputError(f"upper[{j}] must be a number above -inf, got {upper[j]}")
        for name, values in (("lower", lower), ("upper", upper)):
            # Solvers read 1e20 as infinite: a large finite bound is refused, not guessed at.
            bad = np.flatnonzero(np.isfinite(values) & ~(np.abs(values) < MAX_COEFFICIENT))
            if bad.size:
                j = int(bad[0])
                raise InputError(f"{name}[{j}] must be infinite or below {MAX_COEFFICIENT:g} in "
                                 f"magnitude, got {values[j]}")
        bad = np.flatnonzero(lower > upper)
        if bad.size:
            j = int(bad[0])
            raise InputError(f"lower[{j}] = {lower[j]} exceeds upper[{j}] = {upper[j]}")
        binary = np.array([k == "binary" for k in _broadcast(self.integrality, n, "integrality")])
        bad = np.flatnonzero(binary & ((lower > 1) | (upper < 0)))
        if bad.size:
            j = int(bad[0])
            raise InputError(
                f"variable {j} is binary but its bounds [{lower[j]:g}, {upper[j]:g}] exclude "
                "both 0 and 1: make it 'integer', or give bounds that meet [0, 1]"
            )
        for i, row in enumerate(self.constraints):
            if isinstance(row.coefs, list) and len(row.coefs) != n:
                raise InputError(
                    f"constraints[{i}].coefs has {len(row.coefs)} entries "
                    f"but the ILP has {n} variables"
                )
            for j, v in row.items():
                if not 0 <= j < n:
                    raise InputError(
                        f"constraints[{i}].coefs index {j} is out of range: "
                        f"expected 0 <= index < {n}"
                    )
                if not abs(v) < MAX_COEFFICIENT:
                    raise InputError(f"constraints[{i}].coefs[{j}] must be finite and below "
                                     f"{MAX_COEFFICIENT:g} in magnitude, got {v}")
        if self.default_cost is not None and len(self.default_cost) != self.num_outputs:
            raise InputError(f"default_cost has {len(self.default_cost)} entries but the ILP "
                             f"has {self.num_outputs} outputs (prod(shape))")
        if not all(abs(v) < MAX_COEFFICIENT for v in (*(self.default_cost or ()),
                                                       self.default_offset)):
            raise InputError(f"default_cost and default_offset must be finite and below "
                             f"{MAX_COEFFICIENT:g} in magnitude")
        for name, variable in (self.variables or {}).items():
            bad = [j for j in variable.index if not 0 <= j < n]
            if bad:
                raise InputError(f"variables[{name!r}].index {bad[0]} is out of range: "
                                 f"expected 0 <= index < {n}")
        return self

    def split(self, x: Any) -> dict[str, Any]:
        """The full solution as a dict: each named variable (`variables`, set by
        ``from_cvxpy``) -> its values, of shape ``(*batch, *variable_shape)``.

        Args:
            x: the full solution ``concat(y, aux)``, ``(*batch, num_vars)``, numpy or
                torch.

        Raises:
            SpecError: the spec has no named variables.
            ValueError: ``x``'s last axis is not ``num_vars`` long.
        """
        if not self.variables:
            raise SpecError(f"{self.label} has no named variables to split into (specs built "
                            "by ILP.from_cvxpy have them); slice x[..., :N] and x[..., N:]")
        if x.shape[-1] != self.num_vars:
            raise InputError(f"x has {x.shape[-1]} entries in its last axis but {self.label} "
                             f"has {self.num_vars} variables: pass concat(y.flatten, aux), the "
                             "full solution")
        batch = tuple(x.shape[:-1])
        return {name: x[..., list(v.index)].reshape((*batch, *v.shape))
                for name, v in self.variables.items()}

    def _upper_array(self) -> np.ndarray:
        upper = np.inf if self.upper is None else self.upper
        if isinstance(upper, list):
            upper = [np.inf if u is None else u for u in upper]
        return np.asarray(_broadcast(upper, self.num_vars, "upper"), dtype=float)

    def to_ilp(self) -> ILP:
        return self

    # -- matrices ----------------------------------------------------------------

    @classmethod
    def from_matrices(
        cls,
        shape: Sequence[int] | int,
        A_ub: Any = None,
        b_ub: Any = None,
        A_eq: Any = None,
        b_eq: Any = None,
        integrality: Integrality | list[Integrality] = "binary",
        lower: float | Sequence[float] = 0.0,
        upper: float | Sequence[float] | None = 1.0,
        sense: Sense = "min",
        num_aux: int = 0,
        known_cost: Any = None,
    ) -> ILP:
        """An ILP from numpy or scipy.sparse matrices: ``A_ub x <= b_ub``, ``A_eq x == b_eq``.

        Args:
            shape: the cost/solution shape (an int for a vector).
            A_ub: the ``(m, num_vars)`` inequality rows, or None.
            b_ub: their ``(m,)`` right-hand sides.
            A_eq: the ``(k, num_vars)`` equality rows, or None.
            b_eq: their ``(k,)`` right-hand sides.
            integrality: ``"binary"`` (default), ``"integer"``, ``"continuous"``, or one
                per variable.
            lower: lower bounds, one number or one per variable.
            upper: upper bounds, one number or one per variable; None is +inf.
            sense: ``"min"`` (default) or ``"max"``.
            num_aux: auxiliary variables after the outputs.
            known_cost: the part of the objective that is not predicted, one number per
                variable, or None.

        Raises:
            SpecError: a matrix whose columns are not the variables, or a right-hand
                side of the wrong length.
        """
        shape = [int(shape)] if np.isscalar(shape) else [int(d) for d in shape]
        n = math.prod(shape) + num_aux
        constraints: list[Constraint] = []
        for name, A, b, row_sense in (("A_ub", A_ub, b_ub, "<="), ("A_eq", A_eq, b_eq, "==")):
            rhs = f"b_{name[2:]}"
            if A is None:
                if b is not None:
                    raise SpecError(f"{rhs} was given without {name}: pass both, or neither")
                continue
            if b is None:
                raise SpecError(f"{name} was given without {rhs}: pass its right-hand sides")
            if np.iscomplexobj(A) or np.iscomplexobj(b):  # a sparse matrix's dtype too
                raise SpecError(f"{name} and {rhs} must be real, got complex values")
            if not sp.issparse(A) and np.ndim(A) != 2:
                raise SpecError(f"{name} must be 2-D (rows, num_vars), got shape "
                                f"{np.shape(A)}")
            A = sp.csr_matrix(A, dtype=float, copy=True)
            A.sum_duplicates()  # scipy's rule: duplicate entries of a row add up
            b = np.atleast_1d(np.asarray(b, dtype=float))
            if A.shape[1] != n:
                raise SpecError(f"{name} has {A.shape[1]} columns, expected {n} (the variables)")
            if b.shape != (A.shape[0],):
                raise SpecError(f"{rhs} has shape {b.shape}, expected ({A.shape[0]},): one "
                                f"right-hand side per row of {name}")
            for i in range(A.shape[0]):
                start, end = A.indptr[i], A.indptr[i + 1]
                coefs = dict(zip(A.indices[start:end].tolist(), A.data[start:end].tolist()))
                constraints.append(Constraint(coefs=coefs, sense=row_sense, rhs=float(b[i])))

        def as_field(v: Any) -> Any:
            if isinstance(v, list | tuple) and any(x is None for x in v):
                return [None if x is None else as_field(x) for x in v]  # None: unbounded
            if np.iscomplexobj(v):
                raise SpecError(f"bounds and known_cost must be real, got {v!r}")
            if v is None or np.isscalar(v):
                return v if v is None else float(v)
            return np.asarray(v, dtype=float).tolist()

        return cls(
            shape=shape,
            num_aux=num_aux,
            sense=sense,
            integrality=integrality if isinstance(integrality, str) else list(integrality),
            lower=as_field(lower),
            upper=as_field(upper),
            constraints=constraints,
            known_cost=None if known_cost is None else as_field(np.ravel(known_cost)),
        )

    @classmethod
    def from_cvxpy(cls, problem: Any, cost: Any = None, *, parameters: Any = None,
                   variables: Any = None) -> ILP:
        """The ILP equivalent to a cvxpy problem with boolean/integer/continuous
        variables and linear constraints whose objective is affine in the variables
        with ``cost`` entering linearly: ``cost @ x``, ``cost @ x[2:]``,
        ``cp.sum(cp.multiply(C, X))``, sums of such terms, plus known linear terms
        and constants (``Minimize(c @ x + f @ z + 3)``). ``cost`` is the
        ``cp.Parameter`` whose shape becomes ``shape``; the variables it multiplies
        are the outputs, in its shape; every other variable is an auxiliary, and the
        known linear terms become ``known_cost``. ``spec.variables`` says where each
        cvxpy variable sits in the full solution, and ``spec.split(x)`` reads them
        back by name. The conversion is
        `combolayer.specs.cvxpy_frontend.ilp_arguments` (cvxpy is imported only then).
        cvxpylayers' spelling works too: ``CvxpyLayer(problem, parameters=[w],
        variables=[x])`` becomes ``ILP.from_cvxpy(problem, parameters=[w], variables=[x])``.

        Args:
            problem: the ``cvxpy.Problem``.
            cost: the ``cp.Parameter`` that multiplies the outputs.
            parameters: cvxpylayers' spelling of ``cost``: a list holding the one cost
                parameter (other parameters keep their current values).
            variables: cvxpylayers' spelling: if given, the variables the objective
                multiplies (the returned solution), checked.

        Raises:
            SpecError: a term not linear in the variables, or in which a parameter
                multiplies another (named); no cost, or both spellings of it.
        """
        if parameters is not None:
            if cost is not None:
                raise SpecError("from_cvxpy takes the cost as cost=w or as parameters=[w], "
                                "not both")
            if len(parameters) != 1:
                raise SpecError(f"from_cvxpy(parameters=...) expects exactly one parameter, the "
                                f"cost multiplying the variables; got {len(parameters)}")
            cost = parameters[0]
        if cost is None:
            raise SpecError("from_cvxpy needs the cost parameter: cost=w or parameters=[w]")
        arguments = cvxpy_frontend.ilp_arguments(problem, cost,
                                                 max_coefficient=MAX_COEFFICIENT)
        named = arguments.pop("variables")
        outputs = arguments.pop("output_variables")
        if variables is not None and {v.id for v in variables} != outputs:
            expected = sorted(v.name() for v in problem.variables() if v.id in outputs)
            got = sorted(v.name() for v in variables)
            raise SpecError(f"variables must be the ones the objective multiplies by the "
                            f"cost: expected {expected}, got {got}")
        spec = cls.from_matrices(**arguments)
        return cls(**{**spec.model_dump(), "variables": named})

    @classmethod
    def from_file(cls, path: Any, outputs: Sequence[str | int] | None = None) -> ILP:
        """The ILP in an MPS or LP file, read by HiGHS: bounds, integrality, the
        objective sense and row names kept; ``shape = [num_vars]``; the file's
        objective is attached as ``spec.default_cost``. See `combolayer.specs.files`.

        Args:
            path: the ``.mps`` or ``.lp`` file.
            outputs: column names or indices, in the prediction's order, to make only
                those columns outputs (``shape = [len(outputs)]``); every other column
                becomes an auxiliary, and the file's objective on the auxiliaries stays
                in the model as their ``known_cost`` (its part on the outputs is
                ``default_cost``). The spec's ``variables`` then name each column (when
                the file names them all, once each). None: every column is an output.

        Raises:
            SpecError: an unknown, repeated or out-of-range column in ``outputs``.
        """
        from .files import read_model

        model = read_model(path)
        if outputs is not None:
            return cls._with_outputs(model, list(outputs))
        return cls(**model.arguments, default_cost=model.cost.tolist(),
                   default_offset=model.offset)

    @classmethod
    def _with_outputs(cls, model: Any, outputs: list[str | int]) -> ILP:
        """`from_file`'s spec with the columns ``outputs`` first, the rest auxiliaries."""
        spec = cls(**model.arguments)
        names = list(model.names)
        n = spec.num_vars
        by_name = {name: j for j, name in enumerate(names) if name}
        chosen = []
        for item in outputs:
            if isinstance(item, bool | np.bool_) or not isinstance(item, str | int | np.integer):
                raise SpecError(f"outputs lists column names or indices, got {item!r} "
                                f"({type(item).__name__}) in {outputs}")
            if isinstance(item, str):
                if item not in by_name:
                    raise SpecError(f"outputs names column {item!r}, which the file does not "
                                    f"have; expected one of {sorted(by_name)[:10]}")
                chosen.append(by_name[item])
            elif not 0 <= int(item) < n:
                raise SpecError(f"outputs index {item} is out of range: expected 0 <= index "
                                f"< {n} (the file's columns)")
            else:
                chosen.append(int(item))
        if not chosen or len(set(chosen)) != len(chosen):
            raise SpecError(f"outputs must name at least one column, each once; got {outputs}")
        order = chosen + [j for j in range(n) if j not in set(chosen)]
        position = np.empty(n, dtype=int)
        position[order] = np.arange(n)
        cost = np.asarray(model.cost, dtype=float)
        known = np.concatenate([np.zeros(len(chosen)), cost[order[len(chosen):]]])
        upper = spec._upper_array()[order]
        data = spec.model_dump()
        data.update(
            shape=[len(chosen)], num_aux=n - len(chosen),
            integrality=[_broadcast(spec.integrality, n, "integrality")[j] for j in order],
            lower=[_broadcast(spec.lower, n, "lower")[j] for j in order],
            upper=upper.tolist(),  # +inf where the file has no bound
            constraints=[{"coefs": {int(position[j]): v for j, v in row.items()},
                          "sense": row.sense, "rhs": row.rhs, "name": row.name}
                         for row in spec.constraints],
            known_cost=known.tolist() if known.any() else None,
            variables=({name: {"shape": [], "index": [int(position[j])]}
                        for j, name in enumerate(names)}
                       if all(names) and len(set(names)) == len(names) else None),
            default_cost=cost[chosen].tolist(), default_offset=model.offset)
        return cls(**data)

    def to_matrices(self) -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix, np.ndarray]:
        """``(A_ub, b_ub, A_eq, b_eq)``; ``>=`` rows are negated into ``A_ub``."""
        return self._matrices

    @cached_property
    def _matrices(self) -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix, np.ndarray]:
        ub: tuple[list, list, list, list] = ([], [], [], [])
        eq: tuple[list, list, list, list] = ([], [], [], [])
        for row in self.constraints:
            rows, cols, vals, rhs = eq if row.sense == "==" else ub
            sign = -1.0 if row.sense == ">=" else 1.0
            i = len(rhs)
            for j, v in row.items():
                rows.append(i)
                cols.append(j)
                vals.append(sign * v)
            rhs.append(sign * row.rhs)
        n = self.num_vars

        def build(part: tuple[list, list, list, list]) -> tuple[sp.csr_matrix, np.ndarray]:
            rows, cols, vals, rhs = part
            A = sp.csr_matrix((vals, (rows, cols)), shape=(len(rhs), n), dtype=float)
            A.sum_duplicates()
            return A, np.asarray(rhs, dtype=float)

        A_ub, b_ub = build(ub)
        A_eq, b_eq = build(eq)
        return A_ub, b_ub, A_eq, b_eq

    def to_canonical(self, lazy: bool = True) -> CanonicalForm:
        # rows of small coefficients brought up to a unit size, as per-call rows are
        A_ub, b_ub, A_eq, b_eq = self.to_matrices()
        A_ub, b_ub = unit_rows(A_ub, b_ub)
        A_eq, b_eq = unit_rows(A_eq, b_eq)
        kinds = _broadcast(self.integrality, self.num_vars, "integrality")
        lower = np.asarray(_broadcast(self.lower, self.num_vars, "lower"), dtype=float)
        upper = self._upper_array()
        binary = np.array([k == "binary" for k in kinds])
        integer = np.array([k != "continuous" for k in kinds])
        lower = np.where(binary, np.maximum(lower, 0.0), lower)
        upper = np.where(binary, np.minimum(upper, 1.0), upper)
        # Integer bounds rounded inward: highspy 1.15.1 returned non-optimal or
        # wrongly infeasible answers on fractional ones (40 of 365 random ILPs).
        lower = np.where(integer, np.ceil(lower - INTEGER_TOL), lower)
        upper = np.where(integer, np.floor(upper + INTEGER_TOL), upper)
        return CanonicalForm(
            cost_shape=self.cost_shape,
            A_ub=A_ub,
            b_ub=b_ub,
            A_eq=A_eq,
            b_eq=b_eq,
            lower=lower,
            upper=upper,
            integer=integer,
        )
