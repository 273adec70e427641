"""Reciprocal rank fusion (retrieval.fusion=rrf, issue 27) on hand-made rankings."""
import numpy as np
import pytest

from hipporag2.retrieve.fusion import reciprocal_rank_fusion, rrf_scores


def test_scores_are_weighted_reciprocal_ranks():
    ppr, dense, bm25 = [2, 0, 1], [0, 2], [3, 0]
    s = rrf_scores([ppr, dense, bm25], [1.0, 2.0, 0.5], k=60, n=5)
    assert s[0] == pytest.approx(1 / 62 + 2 / 61 + 0.5 / 62)
    assert s[2] == pytest.approx(1 / 61 + 2 / 62)
    assert s[1] == pytest.approx(1 / 63)
    assert s[3] == pytest.approx(0.5 / 61)
    assert s[4] == 0.0  # listed by no channel


def test_order_leaves_out_unlisted_items_and_cuts_at_top_k():
    order, scores = reciprocal_rank_fusion([[2, 0, 1], [0, 2], [3, 0]], [1, 1, 1], 60, 5)
    assert order.tolist() == [0, 2, 3, 1]  # 0 is in all three channels
    assert np.all(np.diff(scores) <= 0)
    order, _ = reciprocal_rank_fusion([[2, 0, 1], [0, 2], [3, 0]], [1, 1, 1], 60, 5, top_k=2)
    assert order.tolist() == [0, 2]


def test_an_abstaining_channel_leaves_the_others_to_decide():
    dense, bm25 = [4, 1, 0], [1, 4, 3]
    with_none, _ = reciprocal_rank_fusion([None, dense, bm25], [2, 1, 1], 60, 5)
    without, _ = reciprocal_rank_fusion([dense, bm25], [1, 1], 60, 5)
    assert with_none.tolist() == without.tolist()
    # the (weight 2) graph voting for passage 0 would have lifted it to the top
    voted, _ = reciprocal_rank_fusion([[0], dense, bm25], [2, 1, 1], 60, 5)
    assert voted[0] == 0 and with_none[0] != 0


def test_equal_scores_go_to_the_higher_index_first():
    order, _ = reciprocal_rank_fusion([[1, 3], [3, 1]], [1, 1], 60, 4)
    assert order.tolist() == [3, 1]


def test_a_zero_weight_silences_a_channel_and_repeats_are_rejected():
    order, _ = reciprocal_rank_fusion([[0, 1], [1, 0]], [0.0, 1.0], 60, 2)
    assert order.tolist() == [1, 0]
    with pytest.raises(ValueError):
        rrf_scores([[0, 0]], [1.0], 60, 2)
    with pytest.raises(ValueError):
        rrf_scores([[0]], [1.0, 1.0], 60, 2)
