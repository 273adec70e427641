"""Personalized PageRank solvers.

`PrpackSolver` is the reference: one igraph prpack call per reset vector, exactly as
the HippoRAG 2 reference implementation makes it. Other solvers must reproduce its
scores (see tests/test_ppr.py).
"""
from __future__ import annotations

from typing import Protocol

import igraph as ig
import numpy as np


def clean_reset(reset: np.ndarray) -> np.ndarray:
    """NaN or negative reset entries become 0, as the reference does before PPR."""
    reset = np.asarray(reset, dtype=np.float64)
    return np.where(np.isnan(reset) | (reset < 0), 0.0, reset)


class PPRSolver(Protocol):
    def solve(self, resets: np.ndarray, damping: float) -> np.ndarray:
        """resets: (q, n) reset vectors (not necessarily normalised); returns (q, n)."""


class PrpackSolver:
    """igraph prpack, one call per query: the reference implementation's solver."""

    def __init__(self, graph: ig.Graph):
        self.graph = graph
        self._weights = "weight" if "weight" in graph.es.attributes() else None

    def solve(self, resets: np.ndarray, damping: float) -> np.ndarray:
        resets = np.atleast_2d(resets)
        out = np.empty(resets.shape, dtype=np.float64)
        n = self.graph.vcount()
        for i, reset in enumerate(resets):
            out[i] = self.graph.personalized_pagerank(
                vertices=range(n),
                damping=damping,
                directed=False,
                weights=self._weights,
                reset=clean_reset(reset).tolist(),
                implementation="prpack",
            )
        return out


SOLVERS = {"prpack": PrpackSolver}


def make_solver(name: str, graph: ig.Graph) -> PPRSolver:
    try:
        return SOLVERS[name](graph)
    except KeyError:
        raise ValueError(
            f"retrieval.ppr_solver={name!r} is not a known PPR solver; choose one of {sorted(SOLVERS)}"
        ) from None
