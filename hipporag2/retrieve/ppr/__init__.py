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
    """The solver `name` for an index's graph (`PPRSolver.for_index`): `edges` its edge
    arrays, `igraph_graph()` builds its igraph graph (only for a solver that needs one),
    `cache_dir` where a solver may keep its preparation."""
    from hipporag2.registry import PPR_SOLVERS

    return PPR_SOLVERS.load(name).for_index(edges, igraph_graph, cache_dir, n_threads=threads, tol=tol)
