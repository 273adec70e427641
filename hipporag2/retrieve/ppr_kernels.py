"""The two compiled loops behind `BatchedSolver`: S times a block, and a Chebyshev step.

Both walk S stored in column panels (`Panels`). A product gathers one row of the
dense block per nonzero; with ~2.7M nonzeros and a 100k-row block those gathers miss
the cache and set the cost. Splitting S by column ranges keeps the rows gathered by
one pass over a panel within a few MB, so they stay cached, while the output rows
are visited once per panel in order. They are numba functions that release the GIL,
so `BatchedSolver` runs one block per thread.

The Chebyshev step does its vector work inside the product's last panel, row by row,
while the row is in cache: the residual, its weighted L1 norm and the next iterate
cost no extra pass over the block. That is what conjugate gradients cannot do (its
step lengths need dot products over the whole block first), and on a machine where
the block does not fit in cache the extra passes cost about as much as the product.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit


@dataclass(frozen=True)
class Panels:
    """S split by column ranges; panel p's rows start at ``indptr[p, i]``.

    ``indptr`` holds offsets into the shared ``indices``/``data`` arrays, and
    ``indices`` are global column numbers.
    """

    indptr: np.ndarray  # (panels, n + 1) int64
    indices: np.ndarray  # (nnz,) int32
    data: np.ndarray  # (nnz,) float64

    @classmethod
    def build(cls, S: sp.csr_matrix, panel_rows: int) -> "Panels":
        n = S.shape[0]
        cuts = list(range(0, n, max(1, panel_rows))) + [n]
        ptrs, inds, vals, offset = [], [], [], 0
        for a, c in zip(cuts[:-1], cuts[1:]):
            P = S[:, a:c].tocsr()
            P.sort_indices()
            ptrs.append(P.indptr.astype(np.int64) + offset)
            inds.append(P.indices.astype(np.int32) + np.int32(a))
            vals.append(P.data.astype(np.float64))
            offset += P.nnz
        if n == 0:
            ptrs.append(np.zeros(1, dtype=np.int64))
        return cls(np.stack(ptrs), np.concatenate(inds or [np.zeros(0, np.int32)]),
                   np.concatenate(vals or [np.zeros(0)]))


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _add_panel_row(indptr, indices, data, p, i, x, acc):
    """acc[i] += (row i of panel p of S) x: the gather both passes are made of."""
    m = x.shape[1]
    if p == 0:
        for k in range(m):
            acc[i, k] = 0.0
    for jj in range(indptr[p, i], indptr[p, i + 1]):
        j = indices[jj]
        v = data[jj]
        for k in range(m):
            acc[i, k] += v * x[j, k]


@njit(nogil=True, cache=True, boundscheck=False)
def shifted_product(indptr, indices, data, d, x, out):
    """out = x - d S x for a (n, m) block x; out must not be x."""
    n, m = x.shape
    n_panels = indptr.shape[0]
    for p in range(n_panels):
        for i in range(n):
            _add_panel_row(indptr, indices, data, p, i, x, out)
            if p == n_panels - 1:
                for k in range(m):
                    out[i, k] = x[i, k] - d * out[i, k]


@njit(nogil=True, cache=True, boundscheck=False)
def chebyshev_step(indptr, indices, data, d, x, x_prev, b, weight, gamma, omega, r, l1):
    """One Chebyshev step for (I - d S) x = b, fused with its product.

    Reads x (the current iterate) and x_prev; leaves in r the residual
    b - (x - d S x) of x, in l1[k] the weighted L1 norm sum_i weight_i |r_ik| of each
    column, and in x_prev the next iterate omega (x + gamma r - x_prev) + x_prev.
    """
    n, m = x.shape
    n_panels = indptr.shape[0]
    for k in range(m):
        l1[k] = 0.0
    for p in range(n_panels):
        for i in range(n):
            _add_panel_row(indptr, indices, data, p, i, x, r)
            if p == n_panels - 1:
                w = weight[i]
                for k in range(m):
                    res = b[i, k] - x[i, k] + d * r[i, k]
                    r[i, k] = res
                    l1[k] += w * abs(res)
                    xp = x_prev[i, k]
                    x_prev[i, k] = omega * (x[i, k] + gamma * res - xp) + xp


@njit(nogil=True, cache=True, boundscheck=False)
def add_components(z, component, value, coef):
    """z += V coef in place, where V has the single nonzero value[i] in row i, column component[i]."""
    n, m = z.shape
    for i in range(n):
        c = component[i]
        v = value[i]
        for k in range(m):
            z[i, k] += v * coef[c, k]


@njit(nogil=True, cache=True, boundscheck=False)
def weighted_l1(x, weight, out):
    """out[k] = sum_i weight_i |x_ik|, without a temporary the size of x."""
    n, m = x.shape
    for k in range(m):
        out[k] = 0.0
    for i in range(n):
        w = weight[i]
        for k in range(m):
            out[k] += w * abs(x[i, k])
