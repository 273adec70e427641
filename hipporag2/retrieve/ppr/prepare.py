"""What the batched solver derives from a graph once (`PreparedGraph`); saved with an
index (`store.py`) so that reopening it costs a load of these arrays."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from hipporag2.retrieve.csr import Csr

# rows of one column panel of S: its gathered rows of a block fill about this many bytes (part of
# a saved preparation's key); with nodes in RCM order fewer, larger panels cost less (results/perf, round 7)
PANEL_BYTES = 8 << 20
# the block arrays of all threads together stay within this (`block_size_for`)
WORKSPACE_BYTES = 256 << 20


def default_threads() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return max(1, os.cpu_count() or 1)


def block_size_for(n_active: int, n_threads: int, budget: int = WORKSPACE_BYTES) -> int:
    """Queries per block: 32 (where a product costs least per column on the MuSiQue-sized
    graph, results/perf), unless the four block arrays per thread (4 x 8 bytes x nodes x
    block) would pass `budget`; then 16, then 8."""
    for block in (32, 16):
        if 32 * n_active * block * max(1, n_threads) <= budget:
            return block
    return 8


def default_block_size(edges, n_threads: int) -> int:
    """`block_size_for` an index's nodes with edges: what a saved preparation is keyed by."""
    pos_w = edges.weight > 0
    n = edges.n_vertices
    ends = np.bincount(edges.source[pos_w], minlength=n) + np.bincount(edges.target[pos_w], minlength=n)
    return block_size_for(int(np.count_nonzero(ends)), n_threads)


@dataclass(frozen=True)
class Panels:
    """S split by column ranges: panel p's rows start at ``indptr[p, i]`` (offsets into the
    shared ``indices``/``data``; ``indices`` are global column numbers). A product walks
    one panel at a time, so the block rows it gathers stay within a few MB of cache
    (`kernels.py`)."""

    indptr: np.ndarray  # (panels, n + 1) int64
    indices: np.ndarray  # (nnz,) int32
    data: np.ndarray  # (nnz,) float64

    @classmethod
    def build(cls, S: Csr, panel_rows: int) -> "Panels":
        n, step = S.shape[0], max(1, panel_rows)
        panel = S.indices[: S.nnz].astype(np.int64) // step
        order = np.argsort(panel, kind="stable")  # panel by panel; within one, S's (canonical) order
        at = panel * (n + 1) + np.repeat(np.arange(n), np.diff(S.indptr)) + 1  # [p, i + 1]: row i's entries in panel p
        ptr = np.cumsum(np.bincount(at, minlength=max(1, -(-n // step)) * (n + 1)))
        return cls(ptr.reshape(-1, n + 1), S.indices[order].astype(np.int32), S.data[order].astype(np.float64))


@dataclass
class PreparedGraph:
    """S = D^-1/2 W D^-1/2 over the nodes with edges, in the solver's node order
    (`node_order`) and in column panels, each component's top eigenvector, and (once
    found) the interval holding the rest of S's spectrum."""

    n: int
    block_size: int
    pos: np.ndarray  # (n,) node -> its row in the block; nodes without edges last
    n_active: int
    sqrt_deg: np.ndarray  # (n_active,)
    S: Csr  # (n_active, n_active)
    panels: Panels
    comp_of: np.ndarray  # (n_active,) component of each row
    comp_val: np.ndarray  # (n_active,) that component's unit eigenvector there
    n_comp: int
    interval: tuple[float, float] | None = None

    @property
    def active(self) -> np.ndarray:
        """The nodes with edges, in the block's order."""
        order = np.empty(self.n, dtype=np.int64)
        order[self.pos] = np.arange(self.n)
        return order[: self.n_active]

    def components(self) -> Csr:
        """One unit column per connected component (see `component_vectors`)."""
        return Csr(np.arange(self.n_active + 1, dtype=self.comp_of.dtype), self.comp_of, self.comp_val,
                   (self.n_active, self.n_comp))


def node_order(W, deg: np.ndarray) -> np.ndarray:
    """The block's rows: the nodes with edges in reverse Cuthill-McKee order (neighbours
    within a narrow band of rows, so a panel's gathers touch fewer cache lines), then
    the nodes without (the block leaves them out). Gain in results/perf/ppr_step_round4.md."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    active = np.flatnonzero(deg > 0)
    sub = W if len(active) == W.shape[0] else W[active][:, active]
    band = reverse_cuthill_mckee(sub, symmetric_mode=True) if len(active) else np.zeros(0, dtype=np.int64)
    return np.concatenate([active[band], np.flatnonzero(deg <= 0)]).astype(np.int64)


def edge_arrays(graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source, target, weight) of an igraph graph; weight 1 where it has none."""
    m = graph.ecount()
    edges = np.array(graph.get_edgelist(), dtype=np.int64).reshape(m, 2)
    w = np.array(graph.es["weight"], dtype=np.float64) if "weight" in graph.es.attributes() else np.ones(m)
    return edges[:, 0], edges[:, 1], w


def prepare_graph(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, block_size: int = 32,
                  with_interval: bool = False) -> PreparedGraph:
    """The solver's view of an undirected weighted multigraph given as edge arrays: the
    edges prpack keeps, S, its panels, the components; `with_interval` also the
    spectral interval (otherwise found on first need)."""
    import scipy.sparse as sp

    w = np.asarray(weight, dtype=np.float64)
    if np.isnan(w).any():  # prpack would return all-NaN scores; nothing to reproduce there
        raise ValueError("edge weights contain NaN; personalized PageRank is undefined")
    keep = w > 0  # prpack drops edges of weight <= 0 in undirected graphs
    src, dst, w = np.asarray(src)[keep], np.asarray(dst)[keep], w[keep]
    W = sp.coo_matrix(
        (np.concatenate([w, w]), (np.concatenate([src, dst]), np.concatenate([dst, src]))), shape=(n, n)
    ).tocsr()  # sums parallel edges; a self-loop lands twice on the diagonal, as in prpack
    deg = np.asarray(W.sum(axis=1)).ravel()
    order = node_order(W, deg)
    n_active = int(np.count_nonzero(deg > 0))
    active = order[:n_active]
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    sqrt_deg = np.sqrt(deg[active])
    inv = sp.diags(1.0 / sqrt_deg)
    S = sp.csr_matrix(inv @ W[active][:, active] @ inv)
    S.sum_duplicates()
    S.sort_indices()
    S = Csr.of(S)
    block = max(1, int(block_size))
    panels = Panels.build(S, max(1024, PANEL_BYTES // (8 * block)))
    V = component_vectors(S, sqrt_deg)
    prep = PreparedGraph(n, block, pos, n_active, sqrt_deg, S, panels, V.indices.astype(np.int64), V.data, V.shape[1])
    if with_interval and n_active:
        prep.interval = spectral_interval(S, V)
    return prep


def component_vectors(S: Csr, sqrt_deg: np.ndarray) -> Csr:
    """One unit column per connected component: sqrt(deg) there, 0 elsewhere; each an
    eigenvector of S for the eigenvalue 1, solved in closed form by the solver."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    n = S.shape[0]
    n_comp, label = connected_components(S.to_scipy(), directed=False)
    V = sp.csr_matrix((sqrt_deg, (np.arange(n), label)), shape=(n, n_comp))
    norms = np.sqrt(np.bincount(label, weights=sqrt_deg**2, minlength=n_comp))
    return Csr.of(V @ sp.diags(1.0 / norms) if n_comp else V)


def spectral_interval(S: Csr, V: Csr, margin: float = 1e-3) -> tuple[float, float]:
    """[lo, hi] holding every eigenvalue of S on the complement of V's columns: Lanczos (ARPACK)
    finds the extremes from inside, so they are widened by `margin`; [-1, 1] if it does not
    converge. A too narrow interval only slows the solver, whose stopping rule checks true residuals."""
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

    n, S, V = S.shape[0], S.to_scipy(), V.to_scipy()
    if n - V.shape[1] <= 0:
        return 0.0, 0.0

    def apply(x):  # P S P x, P = I - V V^T
        x = np.asarray(x, dtype=np.float64).reshape(n, -1)
        x = x - V @ (V.T @ x)
        y = S @ x
        return y - V @ (V.T @ y)

    A = LinearOperator((n, n), matvec=apply, matmat=apply, dtype=np.float64)
    if n <= 512:
        w = np.linalg.eigvalsh(A @ np.eye(n))
        lo, hi = float(w[0]), float(w[-1])
    else:
        v0 = A @ np.random.default_rng(0).standard_normal(n)
        k = min(6, n - 2)
        try:
            hi = float(eigsh(A, k=k, which="LA", tol=1e-8, v0=v0, return_eigenvectors=False).max())
            lo = float(eigsh(A, k=k, which="SA", tol=1e-8, v0=v0, return_eigenvectors=False).min())
        except ArpackNoConvergence:
            return -1.0, 1.0
    return max(-1.0, lo - margin), min(1.0, hi + margin)
