"""The reference solver: one igraph prpack call per reset, as HippoRAG 2's code makes it."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from hipporag2.retrieve.ppr.base import as_csr, check_damping, clean_row_sums, column_range, output_array

if TYPE_CHECKING:
    import igraph as ig


class PrpackSolver:
    """igraph prpack, one call per query: the reference implementation's solver."""

    batch_size = 32

    def __init__(self, graph: ig.Graph, **_settings):
        # threads and tolerance are the batched solver's settings: prpack has its own (1e-10, one thread)
        self.graph = graph
        self._weights = "weight" if "weight" in graph.es.attributes() else None

    @classmethod
    def for_index(cls, edges, igraph_graph, cache_dir=None, n_threads=None, tol=None) -> "PrpackSolver":
        return cls(igraph_graph())

    def _one(self, reset: np.ndarray, damping: float) -> np.ndarray:
        return np.asarray(self.graph.personalized_pagerank(
            vertices=range(self.graph.vcount()), damping=damping, directed=False, weights=self._weights,
            # the reference hands igraph the cleaned numpy array itself (not a list)
            reset=np.fmax(reset, 0.0), implementation="prpack",
        ))

    def solve(self, resets, damping: float, out: np.ndarray | None = None,
              columns: slice | None = None) -> np.ndarray:
        R = as_csr(resets)
        j0, j1 = column_range(columns, self.graph.vcount())
        out = output_array(out, (R.shape[0], j1 - j0), R)
        for i in range(R.shape[0]):
            out[i] = self._one(R.toarray(slice(i, i + 1))[0], damping)[j0:j1]
        return out

    def solve_many(self, resets, dampings: Sequence[float], out: np.ndarray | None = None) -> np.ndarray:
        """PPR scaled back to y (`PPRSolver.solve_many`) by its closed-form mass (`batched.ppr_mass`);
        a reset that sums to 0 gives y = 0."""
        from hipporag2.retrieve.ppr.batched import ppr_mass

        R = as_csr(resets)
        ds = [check_damping(d) for d in np.atleast_1d(dampings)]
        out = output_array(out, (len(ds), *R.shape), R)
        sums = clean_row_sums(R)
        w = np.fmax(np.asarray(self.graph.es["weight"], dtype=np.float64), 0.0) if self._weights else None
        degree = np.asarray(self.graph.strength(weights=w, loops=True))  # prpack drops weights <= 0
        dangling = clean_row_sums(R, degree <= 0)
        for i in range(R.shape[0]):
            u = R.toarray(slice(i, i + 1))[0]
            for k, d in enumerate(ds):  # a zero reset gives y = 0
                out[k, i] = self._one(u, d) * ppr_mass(d, dangling[i] / sums[i]) * sums[i] if sums[i] > 0 else 0.0
        return out

    def release(self) -> None:
        pass
