"""Personalized PageRank: the reference solver (`prpack.py`) and the batched one
(`batched.py`, whose `BatchedSolver._solve_block` documents the math), both
`base.PPRSolver`s, registered in `hipporag2.registry.PPR_SOLVERS`."""
from __future__ import annotations

from hipporag2.retrieve.ppr.base import OutputBuffer, PPRSolver

__all__ = ["OutputBuffer", "PPRSolver", "make_solver", "make_index_solver"]


def make_solver(name: str, graph, **settings) -> PPRSolver:
    """The solver registered as `name` over an igraph graph; `settings`: tol, n_threads."""
    from hipporag2.registry import PPR_SOLVERS

    return PPR_SOLVERS.load(name)(graph, **settings)


def make_index_solver(name: str, edges, igraph_graph, cache_dir=None, threads: int | None = None,
                      tol: float | None = None) -> PPRSolver:
    """The solver `name` for an index's graph: from its edge arrays when the solver can
    start from them (`from_edges`: no igraph graph, preparation cached in `cache_dir`),
    else from the igraph graph `igraph_graph()` returns (built only then)."""
    from hipporag2.registry import PPR_SOLVERS

    cls = PPR_SOLVERS.load(name)
    from_edges = getattr(cls, "from_edges", None)
    if from_edges is not None:
        return from_edges(edges, cache_dir, n_threads=threads, tol=tol)
    return cls(igraph_graph())
