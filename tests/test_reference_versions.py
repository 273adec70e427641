"""Which reference version our seeding and delete follow (docs/reference_check.md,
"Reference versions"): the wheel 2.0.0a4 and the reference's main branch at c617143
differ only where a kept fact names a phrase that is not a node, and in `delete`.

The wheel's own `graph_search_with_fact_entities` (bare object, heavy imports replaced
by stand-ins) gives our seeds exactly where every phrase is a node (the paper path: a
freshly built index); with a phrase that is not a node it stops on its own assertion,
where c617143 (and we) leave that phrase out.
"""
import numpy as np
import pytest

from hipporag2.retrieve.seeds import phrase_weights_from_facts

PHRASES = ["velmora", "port ellery", "river tessaly", "brackmoor"]
PASSAGES_PER_PHRASE = [2, 3, 1, 2]
FACTS = [("velmora", "capital", "port ellery"), ("port ellery", "lies on", "river tessaly"),
         ("brackmoor", "located in", "velmora")]
SCORES = np.asarray([0.9, 0.7, 0.4], dtype=np.float32)


def _wheel_seeds(facts, scores, link_top_k):
    """The phrase part of the wheel's reset vector for these facts (its PPR not run)."""
    from tests import reference_oracle

    m = reference_oracle.load("HippoRAG", "utils.misc_utils", real=("torch",))  # as tests/test_shared_musique.py
    ref, misc = m["HippoRAG"], m["utils.misc_utils"]
    keys = [misc.compute_mdhash_id(p, prefix="entity-") for p in PHRASES] + ["chunk-a"]
    rag = object.__new__(ref.HippoRAG)
    rag.graph = type("G", (), {"vs": {"name": keys}})()
    rag.node_name_to_vertex_idx = {k: i for i, k in enumerate(keys)}
    rag.ent_node_to_chunk_ids = {k: {f"c{j}" for j in range(n)} for k, n in zip(keys, PASSAGES_PER_PHRASE)}
    rag.passage_node_keys = ["chunk-a"]
    rag.passage_node_idxs = [len(keys) - 1]
    rag.chunk_embedding_store = type("S", (), {"get_row": lambda self, k: {"content": "a"}})()
    rag.dense_passage_retrieval = lambda q: (np.asarray([0]), np.asarray([1.0]))
    rag.global_config = type("C", (), {"damping": 0.5})()
    rag.ppr_time = 0.0
    seen = {}

    def run_ppr(weights, damping):
        seen["w"] = weights.copy()
        return np.asarray([0]), np.asarray([1.0])

    rag.run_ppr = run_ppr
    with reference_oracle.quiet():
        rag.graph_search_with_fact_entities("q", link_top_k, scores, list(facts), list(range(len(facts))),
                                            passage_node_weight=0.0)
    w = seen["w"][: len(PHRASES)]
    return sorted(((i, float(v)) for i, v in enumerate(w) if v != 0), key=lambda t: -t[1])


@pytest.mark.parametrize("top_k", [2, 5])
def test_seeds_equal_the_wheels_where_every_phrase_is_a_node(top_k):
    want = _wheel_seeds(FACTS, SCORES, top_k)
    ours = phrase_weights_from_facts(FACTS, SCORES, {p: i for i, p in enumerate(PHRASES)}, PASSAGES_PER_PHRASE)[:top_k]
    assert [i for i, _ in ours] == [i for i, _ in want]
    np.testing.assert_allclose([w for _, w in ours], [w for _, w in want], rtol=1e-12)


def test_a_phrase_that_is_not_a_node_is_left_out_as_c617143_does():
    facts = FACTS + [("brackmoor", "twinned with", "saltbridge")]  # saltbridge: no node
    scores = np.append(SCORES, np.float32(0.8))
    # The wheel: the absent phrase gets a NaN score (its 0/0 weights), enters the top-k
    # cut and its own check (one weight per kept phrase) fails.
    with pytest.raises(AssertionError):
        _wheel_seeds(facts, scores, 5)
    # c617143 and ours: it is skipped; its fact still seeds its subject.
    ours = dict(phrase_weights_from_facts(facts, scores, {p: i for i, p in enumerate(PHRASES)}, PASSAGES_PER_PHRASE)[:5])
    assert set(ours) == {0, 1, 2, 3} and all(np.isfinite(list(ours.values())))
    brackmoor = (float(np.float32(0.4) / 2) + float(np.float32(0.8) / 2)) / 2
    assert ours[3] == pytest.approx(brackmoor, rel=1e-12)


def test_delete_keeps_what_a_remaining_passage_holds_and_drops_it_with_the_last(tmp_path):
    """`delete` as c617143: a fact or phrase stays while any remaining passage holds it,
    also over successive deletes (the wheel keeps the deleted passages among a fact's
    sources, so a fact shared with an earlier-deleted passage outlived its last one)."""
    from hipporag2 import HippoRAG
    from hipporag2.openie.interchange import Extraction, write_openie

    shared = ["port ellery", "lies on", "river tessaly"]
    docs = ["Port Ellery\nPort Ellery lies on the River Tessaly.", "Tessaly\nThe River Tessaly passes Port Ellery.",
            "Velmora\nVelmora's capital is Port Ellery.", "Brackmoor\nBrackmoor is in Velmora."]
    triples = [[shared], [shared, ["river tessaly", "passes", "port ellery"]], [["velmora", "capital", "port ellery"]],
               [["brackmoor", "located in", "velmora"]]]
    write_openie(tmp_path / "openie.json", [Extraction(p, [], t) for p, t in zip(docs, triples)])
    overrides = ["embedding=minilm", "retrieval.filter=none", f"openie.import_path={tmp_path / 'openie.json'}",
                 f"cache_dir={tmp_path / 'cache'}", "progress=false"]
    rag = HippoRAG(tmp_path / "rag", overrides)
    rag.index(docs)
    assert rag.graph_stats["facts"] == 4 and rag.graph_stats["phrase_nodes"] == 4
    rag.delete(docs[:1])  # the shared fact is still held by docs[1]
    assert rag.graph_stats["facts"] == 4 and "river tessaly" in rag._index.phrases
    rag.delete(docs[1:2])  # its last holder: the fact and its only phrase go
    assert rag.graph_stats["facts"] == 2 and "river tessaly" not in rag._index.phrases
    assert rag.graph_stats["phrase_nodes"] == 3
    rag.close()
