"""Loading a saved index: every checksum is checked before anything is returned, and a
file that fails its checksum is what gets reported (graph/store.py hashes in a second
thread while index.json is parsed)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hipporag2.graph.build import GraphEdges
from hipporag2.graph.store import Index, IndexCorrupt, load_index, save_index


def _tiny_index() -> Index:
    rng = np.random.default_rng(0)
    emb = lambda n: rng.standard_normal((n, 4)).astype(np.float32)  # noqa: E731
    edges = GraphEdges(5, np.array([0, 1, 2]), np.array([1, 3, 4]), np.array([1.0, 1.0, 0.9]),
                       np.array([0, 1, 1], dtype=np.int8))
    return Index(passages=["p one", "p two"], titles=["a", "b"], corpus_idx=[0, 1], phrases=["x", "y", "z"],
                 facts=[("x", "r", "y")], phrase_passages=[[0], [0, 1], [1]], edges=edges, stats={"facts": 1},
                 passage_emb=emb(2), phrase_emb=emb(3), fact_emb=emb(1), passage_facts=[[0], []])


def test_load_round_trip_and_checksum_failures_reported_first(tmp_path):
    path = tmp_path / "index"
    save_index(_tiny_index(), path)
    got = load_index(path)
    assert got.phrases == ["x", "y", "z"] and got.facts == [("x", "r", "y")]
    np.testing.assert_array_equal(got.edges.target, [1, 3, 4])
    # a damaged embedding file: the parse succeeds, the checksum does not
    emb = path / "phrase_emb.npy"
    good = emb.read_bytes()
    emb.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(IndexCorrupt, match="phrase_emb.npy: sha256"):
        load_index(path)
    assert load_index(path, verify=False).phrase_emb.shape == (3, 4)  # unchecked reads still work
    emb.write_bytes(good)
    # a truncated index.json fails to parse AND fails its size check: the size check is reported
    meta = path / "index.json"
    text = meta.read_bytes()
    meta.write_bytes(text[: len(text) // 2])
    with pytest.raises(IndexCorrupt, match=r"index\.json: \d+ bytes, the manifest says"):
        load_index(path)
    with pytest.raises(IndexCorrupt, match="cannot be loaded"):
        load_index(path, verify=False)
    meta.write_bytes(text)
    assert load_index(path).passages == ["p one", "p two"]


def test_deferred_matrix_is_checked_on_first_read(tmp_path):
    """`defer=("phrase",)` (a run that links to facts): the load does not hash the phrase
    embeddings, but their first read does, and a changed file is never returned; the
    other files are still checked before the load returns."""
    path = tmp_path / "index"
    save_index(_tiny_index(), path)
    emb = path / "phrase_emb.npy"
    good = emb.read_bytes()
    emb.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # a changed value, same size and header
    got = load_index(path, defer=("phrase",))  # not read yet: the load itself passes
    assert got.phrases == ["x", "y", "z"] and got.fact_emb.shape == (1, 4)
    for _ in range(2):  # every read fails, not only the first
        with pytest.raises(IndexCorrupt, match="phrase_emb.npy: sha256"):
            got.phrase_emb
    emb.write_bytes(good)
    ok = load_index(path, defer=("phrase",))
    np.testing.assert_array_equal(ok.phrase_emb, _tiny_index().phrase_emb)  # checked, then read
    ok.phrase_emb = np.zeros((3, 4), np.float32)  # a matrix set in memory needs no check
    assert not ok.phrase_emb.any()
    # what is not deferred is checked at load, as before
    fact = path / "fact_emb.npy"
    good = fact.read_bytes()
    fact.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(IndexCorrupt, match="fact_emb.npy: sha256"):
        load_index(path, defer=("phrase",))
    with pytest.raises(ValueError, match="defer names embedding matrices"):
        load_index(path, defer=("edges",))


def test_runs_defer_only_the_matrices_their_linking_does_not_read():
    from hipporag2.config import Config
    from hipporag2.retrieve.factory import unread_embeddings

    cfg = Config()
    assert unread_embeddings(cfg) == ("phrase",)  # HippoRAG 2: queries to facts
    for linking in ("query_to_node", "ner_to_node"):
        cfg.retrieval.linking = linking
        assert unread_embeddings(cfg) == ("fact",)


def test_index_json_parsed_as_the_json_module_parses_it():
    """index.json goes through orjson where it gives json's values; what it refuses
    (NaN, 1e400, lone surrogate escapes), reads otherwise (an int beyond 64 bits: a
    float) or does not know (other keys) goes through json, or fails as json fails."""
    from hipporag2.graph.store import _parse_index_json

    def doc(**change):
        d = {"passages": ['Ünïcødé "q" \\ \n\t', "emoji \U0001F600", ""], "titles": ["t", "", "x"],
             "corpus_idx": [0, 2**62, -5], "phrases": ["a", "c"], "facts": [["a", "b", "c"]],
             "phrase_passages": [[], [1, 2]], "passage_facts": [[0], [], []], "n_vertices": 5}
        d.update(change)
        return json.dumps(d, ensure_ascii=False)

    texts = [doc(), doc(passage_facts=None), doc(corpus_idx=[1, 123456789012345678901234567890]),
             doc(phrase_passages=[[2**64 + 1]]), doc(n_vertices=2**65), doc(extra=[1.5]), doc(corpus_idx=[1.0]),
             '{"a": NaN}', '["\\ud800"]', '{"a": 1, "a": 2}', '[1.5, 1e400]', '[1, 2]', doc().replace("5}", "NaN}")]
    for text in texts:
        got = _parse_index_json(text.encode("utf-8", "surrogatepass"))
        want = json.loads(text)
        assert repr(got) == repr(want)
    for bad in (b'{"a": ', b"\xff\xfe{", b""):
        with pytest.raises(ValueError):
            _parse_index_json(bad)
