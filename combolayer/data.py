"""Synthetic data with PyEPO's formulas (Tang & Khalil, "PyEPO", 2022).

Each generator returns a `Data` of tensors ready for a DataLoader,
``(features, costs, solutions, spec)``, with the true optimal solutions
computed through [`combolayer.make_solver`][combolayer.make_solver] in one batched call.
Random draws follow PyEPO's order, so the same seed gives PyEPO's numbers.

Shapes: ``features`` ``(num_data, num_features)``; ``costs`` and
``solutions`` ``(num_data, *spec.cost_shape)``; all float32 tensors.

Examples:
    >>> import combolayer as cl
    >>> data = cl.data.shortest_path(100, num_features=5, grid=(5, 5), deg=4, noise_width=0.5)
    >>> train, test = data.split(80)
    >>> tuple(train.features.shape), tuple(train.costs.shape), data.spec.label
    ((80, 5), (80, 40), 'ShortestPath(num_nodes=25, source=0, target=24)')
"""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import numpy as np
import torch
from scipy.spatial.distance import pdist

from .backends.registry import make_solver
from .errors import InputError
from .problems import TSP, Knapsack, ShortestPath, TSPEdges
from .specs.base import boolean_in, is_boolean, is_real


class Data(NamedTuple):
    features: torch.Tensor
    costs: torch.Tensor
    solutions: torch.Tensor
    spec: Any

    def split(self, num_train: int) -> tuple[Data, Data]:
        """The first ``num_train`` instances and the rest. One draw shares PyEPO's
        hidden cost map ``B``; two draws with different seeds would not."""
        _check_split(num_train, len(self.features))
        head = Data(*(t[:num_train] for t in self[:3]), self.spec)
        tail = Data(*(t[num_train:] for t in self[:3]), self.spec)
        return head, tail


def _whole(value: Any) -> bool:
    """Whether ``value`` is a whole number (any integer type, a 0-d integer tensor), and
    no boolean."""
    if is_boolean(value):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _check_split(num_train: int, size: int) -> None:
    if not _whole(num_train) or not 0 <= num_train <= size:
        # a larger one was cut to the data's size, leaving an empty rest unannounced
        raise InputError(f"num_train must be an integer between 0 and the {size} instances, got "
                         f"{num_train!r}")


def grid_edges(rows: int, cols: int) -> list[tuple[int, int]]:
    """PyEPO's right/down grid arcs, in PyEPO's order (node ``v = i * cols + j``).

    Args:
        rows: the grid's rows of nodes.
        cols: the grid's columns of nodes.
    """
    edges = []
    for i in range(rows):
        edges += [(i * cols + j, i * cols + j + 1) for j in range(cols - 1)]
        if i < rows - 1:
            edges += [(i * cols + j, (i + 1) * cols + j) for j in range(cols)]
    return edges


def shortest_path_spec(grid: tuple[int, int] = (5, 5)):
    """PyEPO's grid shortest path: edge costs, from the top-left to the bottom-right node.

    Args:
        grid: ``(rows, cols)`` of nodes, joined by right/down edges (`grid_edges`).
    """
    rows, cols = grid
    return ShortestPath(
        num_nodes=rows * cols, edges=grid_edges(rows, cols), source=0, target=rows * cols - 1
    )


def _polynomial_costs(
    rnd: np.random.RandomState, B: np.ndarray, x: np.ndarray, deg: int, noise_width: float
) -> np.ndarray:
    """``c = [((B x) / sqrt(p) + 3)^deg + 1] / 3.5^deg * eps``, eps ~ U[1 - w, 1 + w]."""
    p = x.shape[1]
    c = ((x @ B.T) / np.sqrt(p) + 3.0) ** deg + 1.0
    c /= 3.5**deg
    return c * rnd.uniform(1 - noise_width, 1 + noise_width, c.shape)


def _solved(spec, features: np.ndarray, costs: np.ndarray, backend: Any) -> Data:
    solutions = make_solver(spec, backend).solve(costs)
    as_tensor = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    return Data(as_tensor(features), as_tensor(costs), as_tensor(solutions), spec)


def _check_generator(num_data: int, num_features: int, deg: int, noise_width: float,
                     seed: Any, **sizes: int | tuple[int, ...]) -> None:
    """``ValueError`` for arguments PyEPO's generators refuse (``validate_degree``,
    ``validate_nonnegative``): ``deg`` 0 makes every cost one constant, unrelated to the
    features, and a negative noise width is no width. No number may be a boolean
    (Python takes ``True`` as 1): neither ``seed`` (else what numpy's ``RandomState``
    takes: None, an integer, a sequence), ``noise_width``, nor a problem size
    (``sizes``: a grid's sides, items, nodes)."""
    for name, value, least in (("num_data", num_data, 0), ("num_features", num_features, 1),
                               ("deg", deg, 1)):
        if not is_real(value, integer=True) or value < least:
            raise InputError(f"{name} must be an integer >= {least}, got {value!r}")
    width = np.asarray(noise_width) if not is_boolean(noise_width) else None
    if (width is None or width.ndim or width.dtype.kind not in "iuf"  # real numbers only
            or not 0 <= float(width) < math.inf):
        raise InputError(f"noise_width must be a finite number >= 0, got {noise_width!r}")
    for name, value in (("seed", seed), *sizes.items()):
        found = boolean_in(value)
        if found is not None:
            raise InputError(f"{name} must hold integers, got the boolean {found!r}"
                             + ("" if found is value else f" in {value!r}"))
    if is_real(seed) and not is_real(seed, integer=True):  # numpy's own words otherwise
        raise InputError(f"seed must be None, an integer, a sequence of integers or a numpy "
                         f"bit generator, got {seed!r}")
    for name, value in sizes.items():
        if name == "grid":
            pair = isinstance(value, list | tuple | np.ndarray) and np.shape(value) == (2,)
            if not (pair and all(is_real(side, integer=True) and side >= 1 for side in value)):
                raise InputError(f"grid must be a pair (rows, cols) of integers >= 1, got "
                                 f"{value!r}")
        elif not (is_real(value, integer=True) and value >= 1):
            raise InputError(f"{name} must be an integer >= 1, got {value!r}")


def shortest_path(
    num_data: int,
    num_features: int,
    grid: tuple[int, int] = (5, 5),
    deg: int = 1,
    noise_width: float = 0.0,
    seed: int = 135,
    backend: Any = "auto",
) -> Data:
    """PyEPO's shortest-path data on a ``grid`` of right/down edges.

    Args:
        num_data: instances to draw.
        num_features: ``p``, the feature dimension.
        grid: ``(rows, cols)`` of nodes; ``d`` right/down edges (40 for 5x5).
        deg: the polynomial degree (model misspecification; 1 is linear).
        noise_width: the multiplicative noise half-width.
        seed: the ``RandomState`` seed (PyEPO's default 135).
        backend: solves the true optima.

    Returns:
        ``Data(features (num_data, p), costs (num_data, d), solutions, spec)``
        with ``spec`` a [`ShortestPath`][combolayer.problems.ShortestPath] from the top-left
        to the bottom-right node.

    With ``d`` edges and ``p = num_features``: ``B ~ Bernoulli(0.5)^{d x p}``,
    ``x_i ~ N(0, I_p)``, and edge costs
    ``c_ij = [((B x_i)_j / sqrt(p) + 3)^deg + 1] / 3.5^deg * eps_ij`` with
    ``eps_ij ~ U[1 - noise_width, 1 + noise_width]``.
    """
    _check_generator(num_data, num_features, deg, noise_width, seed, grid=grid)
    rnd = np.random.RandomState(seed)
    spec = shortest_path_spec(grid)
    B = rnd.binomial(1, 0.5, (len(spec.edges), num_features))
    x = rnd.normal(0, 1, (num_data, num_features))
    c = _polynomial_costs(rnd, B, x, deg, noise_width)
    return _solved(spec, x, c, backend)


def knapsack(
    num_data: int,
    num_features: int,
    num_items: int,
    dim: int = 1,
    deg: int = 1,
    noise_width: float = 0.0,
    seed: int = 135,
    capacities: list[float] | None = None,
    backend: Any = "auto",
) -> Data:
    """PyEPO's multi-dimensional 0/1 knapsack data: item values from features.

    With ``m = num_items``, ``p = num_features`` and PyEPO's draw order:
    weights ``W = choice({300, ..., 799})^{dim x m} / 100`` (fixed across
    instances, so in [3, 8) at a precision of 0.01, PyEPO's values),
    ``B ~ Bernoulli(0.5)^{m x p}``, ``x_i ~ N(0, I_p)``, and item values
    ``c_ij = ceil(5 [((B x_i)_j / sqrt(p) + 3)^deg + 1] / 3.5^deg * eps_ij)``
    with ``eps_ij ~ U[1 - noise_width, 1 + noise_width]``. PyEPO leaves the
    capacities to the user. The spec is ``Knapsack(W, capacities)`` (maximise the value).

    Args:
        num_data: instances to draw.
        num_features: ``p``, the feature dimension.
        num_items: ``m``, the number of items.
        dim: the number of weight dimensions (capacities).
        deg: the polynomial degree (model misspecification; 1 is linear).
        noise_width: the multiplicative noise half-width.
        seed: the ``RandomState`` seed (PyEPO's default 135).
        capacities: one per dimension; None: half of each dimension's total weight.
        backend: solves the true optima.

    Returns:
        ``Data(features (num_data, p), costs (num_data, m), solutions, spec)``.
    """
    _check_generator(num_data, num_features, deg, noise_width, seed, num_items=num_items,
                     dim=dim)
    rnd = np.random.RandomState(seed)
    weights = rnd.choice(range(300, 800), size=(dim, num_items)) / 100
    B = rnd.binomial(1, 0.5, (num_items, num_features))
    x = rnd.normal(0, 1, (num_data, num_features))
    values = ((x @ B.T) / np.sqrt(num_features) + 3.0) ** deg + 1.0
    values *= 5.0 / 3.5**deg
    values = np.ceil(values * rnd.uniform(1 - noise_width, 1 + noise_width, values.shape))
    if capacities is None:
        capacities = (0.5 * weights.sum(axis=1)).tolist()
    elif np.ndim(capacities) != 1:
        raise InputError(f"capacities must be a list with one number per weight dimension "
                         f"(dim={dim}), got {capacities!r}")
    spec = Knapsack(weights=weights.tolist(), capacities=list(capacities))
    return _solved(spec, x, values, backend)


def tsp(
    num_data: int,
    num_features: int,
    num_nodes: int,
    deg: int = 1,
    noise_width: float = 0.0,
    seed: int = 135,
    backend: Any = "auto",
    edges: bool = False,
) -> Data:
    """PyEPO's symmetric TSP data: Euclidean distances plus a feature-driven part.

    With ``n = num_nodes``, ``E = n (n - 1) / 2`` node pairs ``i < j`` in
    row-major order and PyEPO's draw order: coordinates, ``n // 2`` of them
    ``U(-2, 2)^2`` and the rest ``N(0, I_2)``; ``B = Bernoulli(0.5)^{E x p} *
    U(-2, 2)^{E x p}`` (elementwise); ``x_i ~ N(0, I_p)``; and edge costs
    ``c_ie = round(d_e + ((B x_i)_e / sqrt(p) + 3)^deg / 3^(deg - 1) * eps_ie, 4)``
    with ``d_e`` the Euclidean distance and ``eps_ie ~ U[1 - noise_width, 1 + noise_width]``.

    Args:
        num_data: instances to draw.
        num_features: ``p``, the feature dimension.
        num_nodes: ``n``, the number of cities.
        deg: the polynomial degree (model misspecification; 1 is linear).
        noise_width: the multiplicative noise half-width.
        seed: the ``RandomState`` seed (PyEPO's default 135).
        backend: solves the true optima.
        edges: False (default): the costs come back as symmetric ``(n, n)`` matrices
            (zero diagonal), the cost shape of ``TSP(n)``, whose solutions are
            symmetric adjacency matrices, so ``<c, y>`` is twice the tour length.
            True: as PyEPO's ``E`` edge costs, the cost shape of ``TSPEdges(n)``,
            whose solutions are 0/1 edge vectors, so ``<c, y>`` is the tour length.
    """
    _check_generator(num_data, num_features, deg, noise_width, seed, num_nodes=num_nodes)
    rnd = np.random.RandomState(seed)
    half = num_nodes // 2
    coords = np.concatenate(
        (rnd.uniform(-2, 2, (half, 2)), rnd.normal(0, 1, (num_nodes - half, 2)))
    )
    distance = pdist(coords, "euclidean")
    num_edges = len(distance)
    B = rnd.binomial(1, 0.5, (num_edges, num_features)) * rnd.uniform(
        -2, 2, (num_edges, num_features)
    )
    x = rnd.normal(0, 1, (num_data, num_features))
    feature_cost = ((x @ B.T) / np.sqrt(num_features) + 3.0) ** deg / 3.0 ** (deg - 1)
    noise = rnd.uniform(1 - noise_width, 1 + noise_width, (num_data, num_edges))
    edge_costs = np.around(distance + feature_cost * noise, decimals=4)
    if edges:  # pdist's order is PyEPO's, itertools.combinations(range(n), 2)
        return _solved(TSPEdges(num_nodes=num_nodes), x, edge_costs, backend)
    rows, cols = np.triu_indices(num_nodes, k=1)  # row-major i < j, pdist's order
    costs = np.zeros((num_data, num_nodes, num_nodes))
    costs[:, rows, cols] = edge_costs
    costs[:, cols, rows] = edge_costs
    return _solved(TSP(num_nodes=num_nodes), x, costs, backend)


def from_pyepo(dataset: Any, spec: Any = None) -> Data:
    """A PyEPO ``optDataset`` as a [`Data`][combolayer.data.Data]: its ``feats``, ``costs``
    and ``sols`` (float32 tensors, PyEPO's true solutions kept, not re-solved) and a spec.
    A ``pyepo.dsl`` model's ``sols`` are whole solutions in the model's variable order:
    the costs' variables are taken from them in the cost's order, the spec's outputs.

    Args:
        dataset: the PyEPO ``optDataset``.
        spec: the problem; None reads it from the dataset's model
            ([`spec`][combolayer.backends.PyEPOBackend.spec], Gurobi models only).
            Pass one for other models, or to train on a named problem such as
            [`shortest_path_spec`][combolayer.data.shortest_path_spec].

    Raises:
        SpecError: the model cannot be read and no spec is given.
        ValueError: the spec's size differs from the dataset's costs, or its solutions
            hold fewer values than the costs.
    """
    from .interop.pyepo import dataset_solutions
    from .interop.pyepo import from_pyepo as wrap

    if spec is None:
        spec = wrap(dataset.model).spec
    as_tensor = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float32)  # noqa: E731
    costs = as_tensor(dataset.costs)
    n = int(np.prod(spec.cost_shape))
    if costs.ndim != 2 or costs.shape[1] != n:
        raise InputError(f"dataset costs have shape {tuple(costs.shape)} but {spec.label} "
                         f"expects (num_data, {n})")
    shape = (len(costs), *spec.cost_shape)
    # a DSL model's sols are whole solutions in its own order: the outputs are picked out
    return Data(as_tensor(dataset.feats), costs.reshape(shape),
                as_tensor(dataset_solutions(dataset, n)).reshape(shape), spec)
