"""`hipporag2.retrieve.csr`: CSR matrices whose products are scipy's own compiled loops,
loaded without importing scipy. The products must equal scipy's `@` bit for bit (the
retrieval results depend on it), whichever way the loops were loaded."""
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import _sparsetools

from hipporag2.retrieve import csr
from hipporag2.retrieve.csr import CsrMatrix


def random_csr(m, n, density, seed, index_dtype, value_dtype=np.float64, empty_rows=3):
    A = sp.random(m, n, density=density, random_state=seed, format="csr", dtype=np.float64)
    keep = np.ones(m)
    keep[np.linspace(m // 4, m - 1, empty_rows).astype(int)] = 0  # rows without entries: their indptr repeats
    A = sp.csr_matrix(sp.diags(keep) @ A, dtype=value_dtype)
    A.eliminate_zeros()
    A.sort_indices()
    A.indptr = A.indptr.astype(index_dtype)
    A.indices = A.indices.astype(index_dtype)
    assert A.indices.dtype == index_dtype and np.diff(A.indptr).min() == 0
    return A


def ours(A) -> CsrMatrix:
    return CsrMatrix(A.indptr, A.indices, A.data, A.shape)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("value_dtype", [np.float64, np.float32])
def test_products_equal_scipys_bitwise(index_dtype, value_dtype):
    rng = np.random.default_rng(1)
    A = random_csr(60, 45, 0.15, 7, index_dtype, value_dtype)
    C = ours(A)
    assert C.nnz == A.nnz and C.shape == A.shape
    for x in (rng.random(45), rng.random((45, 1)), rng.random((45, 16)), np.asfortranarray(rng.random((45, 5))),
              rng.random((45, 8)).astype(np.float32)):
        got, want = C @ x, A @ x
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    for y in (rng.random(60), rng.random((60, 7))):
        got, want = C.T @ y, A.T @ y
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    # y += A x in place, as the numpy operator adds its products
    x = rng.random((45, 16)).astype(value_dtype)
    y0 = rng.random((60, 16)).astype(value_dtype)
    y = y0.copy()
    C.matvecs_into(x, y)
    want = y0.copy()
    _sparsetools.csr_matvecs(60, 45, 16, A.indptr, A.indices, A.data, x.ravel(), want.ravel())
    np.testing.assert_array_equal(y, want)
    np.testing.assert_allclose(y, y0 + A @ x, rtol=1e-5)
    with pytest.raises(ValueError, match="dimension mismatch"):
        C @ rng.random(44)


def test_an_empty_matrix_and_an_all_empty_block():
    C = ours(sp.csr_matrix((4, 3)))
    np.testing.assert_array_equal(C @ np.ones((3, 2)), np.zeros((4, 2)))
    np.testing.assert_array_equal(C.T @ np.ones(4), np.zeros(3))
    assert C.has_canonical_format and C.toarray().shape == (4, 3)


def test_from_coo_is_scipys_canonical_csr():
    rng = np.random.default_rng(3)
    rows, cols = rng.integers(0, 30, 400), rng.integers(0, 20, 400)  # many duplicates
    vals = np.ones(400)
    want = sp.csr_matrix((vals, (rows, cols)), shape=(33, 20))  # rows 30-32 empty
    got = CsrMatrix.from_coo(rows, cols, vals, (33, 20))
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        assert getattr(got, name).dtype == getattr(want, name).dtype
    assert got.has_canonical_format
    x = rng.random(20)
    np.testing.assert_array_equal(got @ x, want @ x)
    empty = CsrMatrix.from_coo([], [], np.ones(0), (3, 4))
    assert empty.nnz == 0 and empty.indptr.tolist() == [0, 0, 0, 0]


def test_canonical_sorts_and_adds_duplicates_only_when_needed():
    A = random_csr(25, 30, 0.3, 2, np.int32)
    C = ours(A)
    assert C.has_canonical_format and C.canonical() is C  # no copy when nothing is to do
    # rows reversed in place and one duplicate: no longer canonical
    indices, data = A.indices.copy(), A.data.copy()
    for i in range(25):
        a, b = A.indptr[i], A.indptr[i + 1]
        indices[a:b], data[a:b] = indices[a:b][::-1], data[a:b][::-1]
    assert A.indptr[3] - A.indptr[2] >= 2
    indices[A.indptr[2] + 1] = indices[A.indptr[2]]  # row 2 now names one column twice
    messy = CsrMatrix(A.indptr, indices, data, A.shape)
    assert not messy.has_canonical_format
    fixed = messy.canonical()
    want = sp.csr_matrix((data, indices, A.indptr), shape=A.shape)
    want.sum_duplicates()
    assert fixed.has_canonical_format
    np.testing.assert_array_equal(fixed.indptr, want.indptr)
    np.testing.assert_array_equal(fixed.indices, want.indices)
    np.testing.assert_allclose(fixed.data, want.data, rtol=1e-15)
    np.testing.assert_array_equal(messy.toarray(), want.toarray())  # duplicates add up when densified
    # a row whose first column is below the previous row's last is still canonical
    assert CsrMatrix(np.array([0, 2, 3]), np.array([3, 5, 0]), np.ones(3), (2, 6)).has_canonical_format
    assert not CsrMatrix(np.array([0, 2, 3]), np.array([5, 3, 0]), np.ones(3), (2, 6)).has_canonical_format
    # rows that start past 0 in the arrays (a slice of a bigger matrix's indptr)
    tail = CsrMatrix(np.array([2, 3, 5]), np.array([9, 9, 1, 2, 4]), np.ones(5), (2, 6))
    assert tail.has_canonical_format
    np.testing.assert_array_equal(tail.toarray(), [[0, 1, 0, 0, 0, 0], [0, 0, 1, 0, 1, 0]])


def test_rows_dense_are_scipys_rows():
    A = random_csr(40, 50, 0.2, 5, np.int32)
    C = ours(A)
    dense = A.toarray()
    np.testing.assert_array_equal(C.toarray(), dense)
    np.testing.assert_array_equal(C.rows_dense(slice(5, 17)), dense[5:17])
    np.testing.assert_array_equal(C.rows_dense(slice(5, 17), slice(10, 31)), dense[5:17, 10:31])
    assert C.rows_dense(slice(7, 7)).shape == (0, 50)


def test_as_csr_reads_scipy_matrices_of_any_format():
    A = random_csr(20, 30, 0.2, 6, np.int32)
    coo = A.tocoo()
    dup = sp.coo_matrix((np.r_[coo.data, 1.0], (np.r_[coo.row, 0], np.r_[coo.col, 0])), shape=A.shape)
    for x in (A, A.tocsc(), dup):
        got = csr.as_csr(x)
        assert isinstance(got, CsrMatrix) and got.has_canonical_format and got.dtype == np.float64
        np.testing.assert_array_equal(got.toarray(), x.toarray())
    assert csr.is_sparse(A) and csr.is_sparse(ours(A)) and not csr.is_sparse(A.toarray())
    with pytest.raises(TypeError):
        csr.as_csr(A.toarray())


def test_the_fallback_import_gives_the_same_products(monkeypatch):
    """Without scipy's extension file where we look (a scipy laid out otherwise), the
    loops come from `import scipy.sparse`; with a file that does not load, too."""
    A = random_csr(30, 30, 0.2, 8, np.int32)
    x = np.random.default_rng(0).random((30, 4))
    private = csr.sparsetools()
    assert private is not _sparsetools and private.__name__ == csr._PRIVATE_NAME
    want = ours(A) @ x
    try:
        monkeypatch.setattr(csr, "_extension_file", lambda: None)
        csr.sparsetools.cache_clear()
        assert csr.sparsetools() is _sparsetools
        np.testing.assert_array_equal(ours(A) @ x, want)
        np.testing.assert_array_equal(want, A @ x)
        monkeypatch.setattr(csr, "_extension_file", lambda: csr.Path(__file__))  # not an extension
        csr.sparsetools.cache_clear()
        assert csr.sparsetools() is _sparsetools
    finally:
        monkeypatch.undo()
        csr.sparsetools.cache_clear()
    assert csr.sparsetools().__name__ == csr._PRIVATE_NAME


def test_loading_the_loops_imports_no_scipy_and_scipy_still_imports_after():
    code = """
import sys
import numpy as np
from hipporag2.retrieve import csr
tools = csr.sparsetools()
A = csr.CsrMatrix.from_coo([0, 1, 1, 2], [1, 0, 2, 2], np.arange(1.0, 5.0), (3, 3))
x = np.arange(6.0).reshape(3, 2)
got = A @ x
assert not [k for k in sys.modules if k == "scipy" or k.startswith("scipy.")], "scipy imported"
assert csr._PRIVATE_NAME not in sys.modules and tools.__name__ == csr._PRIVATE_NAME
assert not csr.is_sparse(x)
import scipy.sparse as sp
S = sp.csr_matrix((A.data, A.indices, A.indptr), shape=A.shape)
assert csr.is_sparse(S) and np.array_equal(S @ x, got) and np.array_equal(got, A.toarray() @ x)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
