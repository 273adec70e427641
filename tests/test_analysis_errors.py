"""Appendix E categories (hipporag2.analysis.errors) on hand-made small graphs.

The world: four passages with hand-written triples, no embeddings needed (synonym
edges off, so every edge is known). Gold passages of the question: P0 and P1.

    P0 "Alice":   (alice, born in, paris)
    P1 "Paris":   (paris, capital of, france)
    P2 "Bob":     (bob, lives in, berlin)
    P3 "Germany": (berlin, capital of, germany), (germany, borders, france)

Gold phrases = {alice, paris, france}. Phrase neighbours: bob-berlin,
berlin-germany, germany-france, alice-paris, paris-france.
"""
import numpy as np
import pytest

from hipporag2.analysis import errors as E
from hipporag2.config import GraphConfig
from hipporag2.graph.build import build_edges, clean_passage, content_of
from hipporag2.graph.store import Index

P = ["Alice\nAlice was born in Paris.", "Paris\nParis is the capital of France.", "Bob\nBob lives in Berlin.",
     "Germany\nBerlin is the capital of Germany, which borders France."]
T = [[["Alice", "born in", "Paris"]], [["Paris", "capital of", "France"]], [["Bob", "lives in", "Berlin"]],
     [["Berlin", "capital of", "Germany"], ["Germany", "borders", "France"]]]
GOLD = P[:2]
ALICE = ("alice", "born in", "paris")
PARIS = ("paris", "capital of", "france")
BOB = ("bob", "lives in", "berlin")
BERLIN = ("berlin", "capital of", "germany")
GERMANY = ("germany", "borders", "france")


@pytest.fixture(scope="module")
def clf():
    cfg = GraphConfig(synonym_edges=False)
    content = content_of(P, [clean_passage(t, cfg) for t in T])
    edges, stats = build_edges(content, None, cfg)
    z = np.zeros((0, 4), np.float32)
    index = Index(P, [p.split("\n")[0] for p in P], list(range(4)), content.phrases, content.facts,
                  content.phrase_passages, edges, stats.as_dict(), z, z, z)
    return E.Classifier.of_index(index)


def classify(clf, candidate, kept, seeds, filter_applied=True):
    ev = clf.evidence(candidate, kept, seeds, GOLD, filter_applied)
    flags = E.flags_of(ev)
    return E.primary(flags), flags, ev


def test_gold_phrases_and_one_hop(clf):
    names = lambda s: {clf.phrases[i] for i in s}  # noqa: E731
    assert names(clf.gold_phrases(GOLD)) == {"alice", "paris", "france"}
    assert names(clf.reach([clf.phrase_index["bob"]])) == {"bob", "berlin"}
    assert names(clf.reach([clf.phrase_index["germany"]])) == {"germany", "berlin", "france"}


def test_no_match_before_filter(clf):
    cat, flags, _ = classify(clf, [BOB, BERLIN], [BOB], ["bob", "berlin"])
    assert cat == E.NO_MATCH_BEFORE and flags[E.NO_MATCH_BEFORE]


def test_no_fact_left(clf):
    cat, flags, _ = classify(clf, [ALICE, BOB], [], [])
    assert cat == E.NO_FACT_LEFT
    assert flags[E.NO_SEEDS] and not flags[E.NO_MATCH_AFTER]  # nothing kept is not "kept but wrong"


def test_no_match_after_filter(clf):
    cat, flags, _ = classify(clf, [ALICE, BOB], [BOB], ["bob", "berlin"])
    assert cat == E.NO_MATCH_AFTER
    assert not flags[E.NO_MATCH_BEFORE] and flags[E.LOWER_RATIO]  # 2/4 before, 0/2 after: both hold


def test_lower_ratio_after_filter(clf):
    # before: alice, paris, france, bob, berlin (3 of 5 gold); after: alice, paris, bob, berlin (2/4)
    cat, flags, ev = classify(clf, [ALICE, PARIS, BOB], [ALICE, BOB], ["alice", "paris", "bob", "berlin"])
    assert cat == E.LOWER_RATIO
    assert E.gold_share(ev.candidate, ev.gold) == pytest.approx(3 / 5)
    assert E.gold_share(ev.kept, ev.gold) == pytest.approx(2 / 4)


def test_no_gold_within_one_hop(clf):
    # linking found gold phrases, but the seed (bob) reaches only berlin
    cat, flags, _ = classify(clf, [PARIS, BOB], None, ["bob"], filter_applied=False)
    assert cat == E.NO_ONE_HOP
    assert flags[E.NO_FACT_LEFT] is None and flags[E.NO_MATCH_AFTER] is None and flags[E.LOWER_RATIO] is None


def test_minority_of_seeds_in_gold_but_gold_one_hop_away(clf):
    cat, flags, _ = classify(clf, [PARIS, GERMANY], None, ["germany"], filter_applied=False)
    assert cat == E.MINORITY and not flags[E.NO_ONE_HOP] and not flags[E.GRAPH_SEARCH]


def test_graph_search_failed(clf):
    cat, flags, _ = classify(clf, [ALICE, BOB], None, ["alice", "paris", "bob"], filter_applied=False)
    assert cat == E.GRAPH_SEARCH  # 2 of 3 seeds gold
    cat, _, _ = classify(clf, [ALICE, BOB], None, ["alice", "bob"], filter_applied=False)
    assert cat == E.GRAPH_SEARCH  # exactly half counts


def test_no_seed_phrases_without_filter(clf):
    cat, _, _ = classify(clf, [ALICE], None, [], filter_applied=False)
    assert cat == E.NO_SEEDS


def test_seed_phrase_not_a_node_is_ignored(clf):
    cat, _, ev = classify(clf, [ALICE], None, ["alice", "nobody"], filter_applied=False)
    assert ev.seeds == frozenset({clf.phrase_index["alice"]}) and cat == E.GRAPH_SEARCH


def _case(cat, flags):
    return E.ErrorCase("q", "?", 0.5, cat, flags, None, None, None)


def test_table_counts_sum_and_not_applicable_filter_rows():
    flags = {k: False for k in E.CATEGORY_ORDER}
    cases = [_case(E.GRAPH_SEARCH, {**flags, E.GRAPH_SEARCH: True})] * 3 + [_case(E.NO_ONE_HOP, {**flags, E.NO_ONE_HOP: True})]
    t = E.error_table(cases, n_questions=10, k=5, filter_applied=False, n_samples=2000)
    rows = {r.name: r for r in t.rows}
    assert sum(r.primary_count for r in t.rows) == t.n_failing == 4
    assert rows[E.GRAPH_SEARCH].primary_share == pytest.approx(75.0)
    lo, hi = rows[E.GRAPH_SEARCH].primary_ci
    assert lo <= 75.0 <= hi and 0.0 <= lo and hi <= 100.0 and hi - lo > 10  # n = 4 is uncertain
    for name in E.FILTER_FLAGS:
        assert rows[name].flag_count is None and rows[name].flag_share is None
    assert rows[E.GRAPH_SEARCH].paper_share == 50.0


def test_bootstrap_interval_degenerate_and_wide():
    assert E.bootstrap_interval([1, 1, 1], 500) == (100.0, 100.0)
    lo, hi = E.bootstrap_interval([0, 1] * 50, 4000)
    assert 38 < lo < 50 < hi < 62
