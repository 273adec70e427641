"""The two compiled loops behind `BatchedSolver`: S times a block, and a Chebyshev step.

Both walk S stored in column panels (`Panels`). A product gathers one row of the
dense block per nonzero; with ~2.7M nonzeros and a 100k-row block those gathers miss
the cache and set the cost. Splitting S by column ranges keeps the rows gathered by
one pass over a panel within a few MB, so they stay cached, while the output rows
are visited once per panel in order. Even cached, each gather waits on memory, and the
processor only looks a few nonzeros ahead on its own (each one is ~30 instructions
of row arithmetic), so the loop prefetches the row it will gather `PREFETCH_AHEAD`
nonzeros later: measured on the MuSiQue-sized graph, a step costs 0.7-0.9 instead of
1.1-1.3 ms per column. They are numba functions that release the GIL, so
`BatchedSolver` runs one block per thread.

The Chebyshev step does its vector work inside the product's last panel, row by row,
while the row is in cache: the residual, its weighted L1 norm and the next iterate
cost no extra pass over the block. That is what conjugate gradients cannot do (its
step lengths need dot products over the whole block first), and on a machine where
the block does not fit in cache the extra passes cost about as much as the product.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from hipporag2.retrieve.ppr_panels import Panels  # noqa: F401  (re-exported: the kernels walk it)

# how many nonzeros ahead the product prefetches the row it will gather; 6-12 were
# equally good on the MuSiQue-sized graph, 2 and 24 worse
PREFETCH_AHEAD = 8


@intrinsic
def _prefetch(typingctx, array, row, col):
    """A read hint for array[row, col]'s cache line (LLVM's prefetch: no fault, no result)."""
    if not (isinstance(array, types.Array) and array.ndim == 2):
        return None

    def codegen(context, builder, signature, args):
        aryty, rowty, colty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        inds = [context.cast(builder, v, t, types.intp) for v, t in zip(args[1:], (rowty, colty))]
        ptr = builder.bitcast(cgutils.get_item_pointer(context, builder, aryty, ary, inds), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
        fn = builder.module.declare_intrinsic("llvm.prefetch", [ptr.type], fnty)
        # read, keep in all cache levels, data cache
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(array, row, col), codegen


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _add_panel_row(indptr, indices, data, p, i, x, acc):
    """acc[i] += (row i of panel p of S) x: the gather both passes are made of."""
    m = x.shape[1]
    if p == 0:
        for k in range(m):
            acc[i, k] = 0.0
    last = indices.shape[0] - 1
    line = 64 // x.itemsize  # entries per 64-byte cache line: 8 float64, 16 float32
    for jj in range(indptr[p, i], indptr[p, i + 1]):
        ahead = indices[min(jj + PREFETCH_AHEAD, last)]
        for k in range(0, m, line):  # one hint per line of the row
            _prefetch(x, ahead, k)
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
def residual_in_place(indptr, indices, data, d, x, weight, r, l1):
    """r = b - (x - d S x), where r holds b on entry, and l1[k] = sum_i weight_i |r_ik|:
    the mixed-precision solve's float64 acceptance check (float64 x, r and data), with
    no array of its own for b. d S x is added panel by panel as the product finds it."""
    n, m = x.shape
    n_panels = indptr.shape[0]
    last = indices.shape[0] - 1
    line = 64 // x.itemsize
    acc = np.empty(m, dtype=r.dtype)
    for k in range(m):
        l1[k] = 0.0
    for p in range(n_panels):
        for i in range(n):
            for k in range(m):
                acc[k] = 0.0
            for jj in range(indptr[p, i], indptr[p, i + 1]):
                ahead = indices[min(jj + PREFETCH_AHEAD, last)]
                for k in range(0, m, line):
                    _prefetch(x, ahead, k)
                j = indices[jj]
                v = data[jj]
                for k in range(m):
                    acc[k] += v * x[j, k]
            for k in range(m):
                r[i, k] += d * acc[k]
            if p == n_panels - 1:
                w = weight[i]
                for k in range(m):
                    res = r[i, k] - x[i, k]
                    r[i, k] = res
                    l1[k] += w * abs(res)


@njit(nogil=True, cache=True, boundscheck=False)
def scale_columns(src, factor, dst):
    """dst[i, k] = src[i, k] * factor[k], cast to dst's dtype (float64 <-> float32)."""
    n, m = src.shape
    for i in range(n):
        for k in range(m):
            dst[i, k] = src[i, k] * factor[k]


@njit(nogil=True, cache=True, boundscheck=False)
def add_scaled_columns(z, c, factor):
    """z[i, k] += c[i, k] * factor[k] in z's dtype (a float32 correction into the float64 answer)."""
    n, m = z.shape
    for i in range(n):
        for k in range(m):
            z[i, k] += c[i, k] * factor[k]


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


# ---- in and out of the solver's node-major, degree-ordered block ---------------------
# The block a solve works on is node-major (one row per node, in the degree order of
# S) and holds only nodes with edges, while resets and answers are query-major in the
# graph's order. `gather_resets` and `scatter_answers` each do that transpose-and-
# renumber together with all the element-wise work on their side in one pass, and
# `clean_sums` reads the resets' sums in place; numpy needed ~10 passes over q x n
# arrays and block-sized temporaries for the same (about a tenth of a solve's time).


@njit(nogil=True, cache=True, boundscheck=False)
def clean_sums(R, sums):
    """sums[k] = sum_j clean(R[k, j]), read-only (no cleaned copy), in tiles of 1024 for accuracy."""
    m, n = R.shape
    for k in range(m):
        total = 0.0
        for j0 in range(0, n, 1024):
            tile = 0.0
            for j in range(j0, min(j0 + 1024, n)):
                v = R[k, j]
                if v > 0.0:
                    tile += v
            total += tile
        sums[k] = total


@njit(nogil=True, cache=True, boundscheck=False)
def gather_resets(R, pos, scale, sqrt_deg, b):
    """b[pos[j], k] = clean(R[k, j]) / scale[k] / sqrt_deg[pos[j]] for every node j with edges.

    R is (m, n) query-major in graph order; pos[j] is node j's row in b, and nodes
    with pos[j] >= len(b) (no edges) are skipped. clean() is the reference's: NaN
    and negative entries become 0.
    """
    m, n = R.shape
    n_active = b.shape[0]
    # in tiles of nodes: R is read row by row within a tile (a query's reset is contiguous)
    # rather than with a stride of a whole reset per entry (~3x faster at 32 x 97k)
    for j0 in range(0, n, 512):
        j1 = min(j0 + 512, n)
        for k in range(m):
            sk = scale[k]
            for j in range(j0, j1):
                p = pos[j]
                if p >= n_active:
                    continue
                v = R[k, j]
                if not v > 0.0:  # also NaN
                    v = 0.0
                b[p, k] = v / sk / sqrt_deg[p]


@njit(nogil=True, cache=True, boundscheck=False)
def _answer(z, R, pos, scale, sqrt_deg, j, k):
    """y of node j for query k: D^1/2 z where j has edges (round-off below 0 -> 0), the reset where not."""
    p = pos[j]
    if p < z.shape[0]:
        y = z[p, k] * sqrt_deg[p]
        return y if y > 0.0 else 0.0
    v = R[k, j]
    return (v if v > 0.0 else 0.0) / scale[k]


@njit(nogil=True, cache=True, boundscheck=False)
def scatter_answers(z, R, pos, scale, sqrt_deg, divisor, factor, out, j0):
    """out[k, j] = `_answer`(j0 + j, k) / divisor[k] * factor[k]: back to query-major graph
    order, for the nodes j0 .. j0 + out.shape[1] (all of them, or e.g. only the passages)."""
    m = R.shape[0]
    for j in range(out.shape[1]):
        for k in range(m):
            out[k, j] = _answer(z, R, pos, scale, sqrt_deg, j0 + j, k) / divisor[k] * factor[k]


# ---- the same for resets given as CSR rows (`scipy.sparse.csr_matrix`) -----------------
# A query's reset has a few phrase seeds and one weight per passage: ~12k of ~97k nodes
# at MuSiQue scale. Given as CSR, a piece of 64 resets is ~9 MB instead of a dense 50 MB
# array that must also be zeroed and read whole.


@njit(nogil=True, cache=True, boundscheck=False)
def gather_resets_csr(indptr, indices, data, pos, scale, sqrt_deg, b):
    """`gather_resets` for CSR rows (canonical: sorted, no duplicates); b is zeroed first."""
    n_active, m = b.shape
    for i in range(n_active):
        for k in range(m):
            b[i, k] = 0.0
    for k in range(m):
        sk = scale[k]
        for jj in range(indptr[k], indptr[k + 1]):
            p = pos[indices[jj]]
            if p >= n_active:
                continue
            v = data[jj]
            if not v > 0.0:  # also NaN
                v = 0.0
            b[p, k] = v / sk / sqrt_deg[p]


@njit(nogil=True, cache=True, boundscheck=False)
def scatter_answers_csr(z, indptr, indices, data, pos, scale, sqrt_deg, divisor, factor, out, j0):
    """`scatter_answers` for CSR resets: nodes with edges from z, then the reset's own
    entries at nodes without edges (where y = u; 0 where the reset has no entry)."""
    m = out.shape[0]
    w = out.shape[1]
    n_active = z.shape[0]
    for j in range(w):
        p = pos[j0 + j]
        for k in range(m):
            y = 0.0
            if p < n_active:
                y = z[p, k] * sqrt_deg[p]
                if not y > 0.0:
                    y = 0.0
            out[k, j] = y / divisor[k] * factor[k]
    for k in range(m):
        for jj in range(indptr[k], indptr[k + 1]):
            j = indices[jj]
            if j < j0 or j >= j0 + w or pos[j] < n_active:
                continue
            v = data[jj]
            if not v > 0.0:
                v = 0.0
            out[k, j - j0] = v / scale[k] / divisor[k] * factor[k]
