"""S in column panels, the layout the compiled PPR kernels walk (`ppr_kernels`).

Apart from the kernels so that a solver loaded from disk (`ppr_store`) or one that
runs on numpy alone does not import numba.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


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
