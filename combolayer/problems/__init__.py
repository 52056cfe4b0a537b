"""Named combinatorial problems: each a spec with an exact ILP and a fast solver.

| spec | cost / solution |
|---|---|
| ``ShortestPath.grid(rows, cols, ...)`` | vertex costs ``(rows, cols)``, y = vertices on the path |
| ``ShortestPath(num_nodes, edges, source, target)`` | edge costs, y = edges on the path |
| ``TSP(num_nodes)`` | ``(n, n)``, y = symmetric adjacency of a tour |
| ``TSPEdges(num_nodes)`` | ``(n (n - 1) / 2,)`` edges in PyEPO's order, y = the tour's edges |
| ``Matching(rows, cols)`` | ``(rows, cols)``, y = assignment |
| ``Knapsack(weights, capacities)`` | item values ``(n,)``, y = chosen items |
| ``TopK(n, k)`` | ``(n,)``, y = k-hot |
| ``Ranking(n)`` | ``(n,)``, y = ranks 1..n, rank 1 to the largest score |

Each module defines its spec with ``@register_spec`` (`combolayer.specs.base`),
which makes its kind loadable, and lists it in ``__all__``. Importing this
package imports every module in it (`combolayer.discovery`) and exports
their ``__all__``, so a new problem is one new file here; the imports below
name the built-in ones for readers and editors.
"""

from ..discovery import export_all, import_submodules
from .knapsack import Knapsack as Knapsack
from .matching import Matching as Matching
from .selection import Ranking as Ranking
from .selection import TopK as TopK
from .shortest_path import GridShortestPath as GridShortestPath
from .shortest_path import ShortestPath as ShortestPath
from .tsp import TSP as TSP
from .tsp_edges import TSPEdges as TSPEdges

__all__ = export_all(globals(), import_submodules(__name__, __path__))
