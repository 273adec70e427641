"""S in column panels, the layout the compiled PPR kernels walk (`ppr_kernels`).

Apart from the kernels so that a solver loaded from disk (`ppr_store`) or one that
runs on numpy alone does not import numba. Building panels slices S with scipy, which
is imported there only: a solver loaded from disk never imports scipy (`csr`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse as sp

    from hipporag2.retrieve.csr import CsrMatrix


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
    def build(cls, S: "sp.csr_matrix | CsrMatrix", panel_rows: int) -> "Panels":
        """S (scipy's CSR or `csr.CsrMatrix`; imports scipy) in panels of `panel_rows` columns."""
        to_scipy = getattr(S, "to_scipy", None)
        if to_scipy is not None:
            S = to_scipy()
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


def widened(panels: Panels, factor: int) -> Panels:
    """The same S in panels of `factor` adjacent panels each: within a group a row's
    entries are its panels' entries one after the other (still sorted by column).

    Panels are sized by the bytes of block rows one pass over a panel gathers; a
    float32 block's rows are half as wide, so its panels can hold twice the rows
    (measured on the MuSiQue-sized graph: 0.9 vs 1.2 ms per column and step).
    """
    n_p, n1 = panels.indptr.shape
    n = n1 - 1
    if factor <= 1 or n_p <= 1:
        return panels
    ptr = panels.indptr
    lengths = np.diff(ptr, axis=1)  # (panels, n): entries of row i in panel p
    groups = [list(range(g, min(g + factor, n_p))) for g in range(0, n_p, factor)]
    new_ptr = np.empty((len(groups), n1), dtype=np.int64)
    indices = np.empty_like(panels.indices)
    data = np.empty_like(panels.data)
    offset = 0
    for g, members in enumerate(groups):
        row_len = lengths[members].sum(axis=0)
        new_ptr[g, 0] = offset
        np.cumsum(row_len, out=new_ptr[g, 1:])
        new_ptr[g, 1:] += offset
        before = np.zeros(n, dtype=np.int64)  # entries of earlier panels of the group in row i
        for p in members:
            a, b = ptr[p, 0], ptr[p, n]
            # entry t of row i moves from ptr[p, i] + t to new_ptr[g, i] + before[i] + t
            shift = np.repeat(new_ptr[g, :n] + before - ptr[p, :n], lengths[p])
            dst = np.arange(a, b, dtype=np.int64) + shift
            indices[dst] = panels.indices[a:b]
            data[dst] = panels.data[a:b]
            before += lengths[p]
        offset = int(new_ptr[g, n])
    return Panels(new_ptr, indices, data)
