"""Named combinatorial problems: each a spec with an exact ILP and a fast solver.

| spec | cost / solution |
|---|---|
| ``ShortestPath.grid(rows, cols, ...)`` | vertex costs ``(rows, cols)``, y = vertices on the path |
| ``ShortestPath(num_nodes, edges, source, target)`` | edge costs, y = edges on the path |
| ``TSP(num_nodes)`` | ``(n, n)``, y = symmetric adjacency of a tour |
| ``Matching(rows, cols)`` | ``(rows, cols)``, y = assignment |
| ``Knapsack(weights, capacities)`` | item values ``(n,)``, y = chosen items |
| ``TopK(n, k)`` | ``(n,)``, y = k-hot |
| ``Ranking(n)`` | ``(n,)``, y = ranks 1..n, rank 1 to the largest score |

Each module defines its spec with ``@register_spec`` (:mod:`combolayer.specs`),
which makes its kind loadable; the imports below only make the classes
reachable as ``cl.problems.Name``.
"""

from .knapsack import Knapsack
from .matching import Matching
from .selection import Ranking, TopK
from .shortest_path import GridShortestPath, ShortestPath
from .tsp import TSP

__all__ = [
    "TSP",
    "GridShortestPath",
    "Knapsack",
    "Matching",
    "Ranking",
    "ShortestPath",
    "TopK",
]
