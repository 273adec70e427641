"""The compiled loops of the batched solver on graphs of NUMBA_MIN_NNZ entries and more (`batched.py`):
S times a block, a fused Chebyshev step, the passes into and out of the block.

A product gathers one row of the dense block per nonzero, and those gathers set its cost.
S is walked in column panels (`prepare.Panels`) so that the rows one panel gathers stay
cached, and the row `PREFETCH_AHEAD` nonzeros on is prefetched; the row sum is LLVM IR
(results/perf/ppr_step_round4.md). The Chebyshev step does its vector work inside the
last panel, row by row while the row is in cache, which conjugate gradients cannot do
(its step lengths need dot products over the whole block first). The functions release
the GIL: one block per thread; they run in float64, or float32 for `_refine`'s rounds.
"""
from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

PREFETCH_AHEAD = 8  # nonzeros ahead the product prefetches the row it will gather (6-12 measured equal)
# block widths summed in vector registers (`_panel_row_into`), the solver's blocks
# (`prepare.block_size_for`); other widths (a call's last block) loop over the row in memory
REGISTER_WIDTHS = (8, 16, 32)


@intrinsic
def _panel_row_into(typingctx, indptr, indices, data, x, p, i, out, o, load):
    """out[o] = (out[o] if load else 0) + sum over row i of panel p of S of data[jj] x[indices[jj]],
    prefetching the row PREFETCH_AHEAD nonzeros on. x and out: of data's dtype and width.

    numba's `acc[i, k] += v * x[j, k]` loads and stores acc's row per nonzero (it cannot
    prove acc and x apart), so for a width in REGISTER_WIDTHS the sums stay in 256-bit
    registers; other widths or layouts sum in memory, in the same order (the same bits).
    """
    if not all(isinstance(a, types.Array) for a in (indptr, indices, data, x, out)):
        return None
    if not (x.ndim == out.ndim == indptr.ndim == 2 and x.dtype == out.dtype == data.dtype
            and x.dtype in (types.float32, types.float64)):
        return None
    if not (isinstance(indices.dtype, types.Integer) and isinstance(indptr.dtype, types.Integer)):
        return None
    sig = types.void(indptr, indices, data, x, p, i, out, o, load)

    def codegen(context, builder, signature, args):
        t_ptr, t_ind, t_dat, t_x, t_p, t_i, t_out, t_o, t_load = signature.args
        a_ptr, a_ind, a_dat, a_x, a_out = (context.make_array(t)(context, builder, args[k])
                                           for k, t in ((0, t_ptr), (1, t_ind), (2, t_dat), (3, t_x), (6, t_out)))
        i64, i32, i8p = ir.IntType(64), ir.IntType(32), ir.IntType(8).as_pointer()

        def const(v):
            return ir.Constant(i64, v)

        pp, ii, oo = (context.cast(builder, args[k], t, types.intp) for k, t in ((4, t_p), (5, t_i), (7, t_o)))
        load = context.cast(builder, args[8], t_load, types.boolean)
        fty = context.get_value_type(t_x.dtype)
        size = context.get_abi_sizeof(fty)

        def ptr_at(col):
            item = cgutils.get_item_pointer(context, builder, t_ptr, a_ptr, [pp, col])
            return context.cast(builder, builder.load(item), t_ptr.dtype, types.intp)

        start, stop = ptr_at(ii), ptr_at(builder.add(ii, const(1)))
        last = builder.sub(a_ind.nitems, const(1))
        xbase = builder.bitcast(a_x.data, i8p)
        xstride = builder.extract_value(a_x.strides, 0)
        width = builder.extract_value(a_x.shape, 1)
        pf_ty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        prefetch = builder.module.declare_intrinsic("llvm.prefetch", [i8p], pf_ty)

        def offset(at):  # indices[at] as a byte offset of its row in x
            j = context.cast(builder, builder.load(builder.gep(a_ind.data, [at])), t_ind.dtype, types.intp)
            return builder.mul(j, xstride)

        def prefetch_ahead(jj, lines):  # read, keep in all cache levels, data cache
            ahead = builder.add(jj, const(PREFETCH_AHEAD))
            ahead = builder.select(builder.icmp_signed("<", ahead, last), ahead, last)
            row = builder.gep(xbase, [offset(ahead)])
            for line in lines:
                builder.call(prefetch, [builder.gep(row, [line]), ir.Constant(i32, 0), ir.Constant(i32, 3),
                                        ir.Constant(i32, 1)])

        def in_registers(w):
            lanes = 32 // size  # one 256-bit register: 8 float32 or 4 float64
            vec = ir.VectorType(fty, lanes)
            out_v = builder.bitcast(cgutils.get_item_pointer(context, builder, t_out, a_out, [oo, const(0)]),
                                    vec.as_pointer())
            accs = [cgutils.alloca_once(builder, vec) for _ in range(w // lanes)]  # become registers
            with builder.if_else(load) as (then, otherwise):
                with then:
                    for k, acc in enumerate(accs):
                        builder.store(builder.load(builder.gep(out_v, [const(k)]), align=size), acc)
                with otherwise:
                    for acc in accs:
                        builder.store(ir.Constant(vec, None), acc)
            lines = [const(64 * line) for line in range(max(1, w * size // 64))]
            with cgutils.for_range_slice(builder, start, stop, const(1)) as (jj, _):
                prefetch_ahead(jj, lines)
                v = builder.load(builder.gep(a_dat.data, [jj]))
                vv = builder.insert_element(ir.Constant(vec, None), v, ir.Constant(i32, 0))
                vv = builder.shuffle_vector(vv, ir.Constant(vec, None), ir.Constant(ir.VectorType(i32, lanes), None))
                row = builder.bitcast(builder.gep(xbase, [offset(jj)]), vec.as_pointer())
                for k, acc in enumerate(accs):
                    xv = builder.load(builder.gep(row, [const(k)]), align=size)
                    builder.store(builder.fadd(builder.load(acc), builder.fmul(vv, xv)), acc)
            for k, acc in enumerate(accs):
                builder.store(builder.load(acc), builder.gep(out_v, [const(k)]), align=size)

        def in_memory():  # any layout: element addresses from the strides
            def x_at(j, k):
                return cgutils.get_item_pointer(context, builder, t_x, a_x, [j, k])

            def out_at(k):
                return cgutils.get_item_pointer(context, builder, t_out, a_out, [oo, k])

            def row_of(at):
                return context.cast(builder, builder.load(builder.gep(a_ind.data, [at])), t_ind.dtype, types.intp)

            with builder.if_then(builder.not_(load)):
                with cgutils.for_range(builder, width) as loop:
                    builder.store(ir.Constant(fty, 0.0), out_at(loop.index))
            row_bytes = builder.mul(width, const(size)) if t_x.layout == "C" else const(1)
            with cgutils.for_range_slice(builder, start, stop, const(1)) as (jj, _):
                ahead = builder.add(jj, const(PREFETCH_AHEAD))
                ahead = builder.select(builder.icmp_signed("<", ahead, last), ahead, last)
                row_ahead = builder.bitcast(x_at(row_of(ahead), const(0)), i8p)
                with cgutils.for_range_slice(builder, const(0), row_bytes, const(64)) as (line, _):
                    builder.call(prefetch, [builder.gep(row_ahead, [line]), ir.Constant(i32, 0),
                                            ir.Constant(i32, 3), ir.Constant(i32, 1)])
                v = builder.load(builder.gep(a_dat.data, [jj]))
                j = row_of(jj)
                with cgutils.for_range(builder, width) as loop:
                    at = out_at(loop.index)
                    term = builder.fmul(v, builder.load(x_at(j, loop.index)))
                    builder.store(builder.fadd(builder.load(at), term), at)

        def chain(widths):
            if not widths:
                in_memory()
                return
            with builder.if_else(builder.icmp_signed("==", width, const(widths[0]))) as (then, otherwise):
                with then:
                    in_registers(widths[0])
                with otherwise:
                    chain(widths[1:])

        # registers for C-contiguous blocks only (their rows are runs of memory)
        chain(sorted(REGISTER_WIDTHS, reverse=True) if t_x.layout == t_out.layout == "C" else [])
        return context.get_dummy_value()

    return sig, codegen


@njit(nogil=True, cache=True, boundscheck=False)
def shifted_product(indptr, indices, data, d, x, out):
    """out = x - d S x for a (n, m) block x; out must not be x."""
    n, m = x.shape
    n_panels = indptr.shape[0]
    for p in range(n_panels):
        for i in range(n):
            _panel_row_into(indptr, indices, data, x, p, i, out, i, p > 0)
            if p == n_panels - 1:
                for k in range(m):
                    out[i, k] = x[i, k] - d * out[i, k]


@njit(nogil=True, cache=True, boundscheck=False)
def chebyshev_step(indptr, indices, data, d, x, x_prev, b, weight, gamma, omega, r, l1):
    """One Chebyshev step for (I - d S) x = b, fused with its product: r = b - (x - d S x),
    l1[k] = sum_i weight_i |r_ik|, and x_prev becomes the next iterate omega (x + gamma r - x_prev) + x_prev."""
    n, m = x.shape
    n_panels = indptr.shape[0]
    for k in range(m):
        l1[k] = 0.0
    for p in range(n_panels):
        for i in range(n):
            _panel_row_into(indptr, indices, data, x, p, i, r, i, p > 0)
            if p == n_panels - 1:
                w = weight[i]
                for k in range(m):
                    res = b[i, k] - x[i, k] + d * r[i, k]
                    r[i, k] = res
                    l1[k] += w * abs(res)
                    xp = x_prev[i, k]
                    x_prev[i, k] = omega * (x[i, k] + gamma * res - xp) + xp


@njit(nogil=True, cache=True, boundscheck=False)
def gather_resets(indptr, indices, data, pos, scale, sqrt_deg, b):
    """b[pos[j], k] = clean(R[k, j]) / scale[k] / sqrt_deg[pos[j]] for the CSR rows R
    (canonical) and every node j with edges (pos[j] < len(b)); b is zeroed first.
    clean() is the reference's: NaN and negative entries become 0. Resets go in query-
    major and in the graph's order; the block is node-major in the solver's order."""
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
def scatter_answers(z, indptr, indices, data, pos, scale, sqrt_deg, divisor, factor, out, j0):
    """out[k, j] = y of node j0 + j for query k / divisor[k] * factor[k], back in query-major
    graph order: D^1/2 z at nodes with edges (round-off below 0 -> 0), then the cleaned
    reset's own entries at nodes without edges (y = u there; 0 where the reset has none)."""
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
