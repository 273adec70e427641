"""retrieval=none: the reader without passages (the paper's "None" row of Tables 2 and 8)."""
import pytest

from hipporag2.cli import compose
from hipporag2.config import ConfigError
from hipporag2.data.loaders import Query
from hipporag2.retrieve.factory import RetrieverParts, build_retriever


def test_no_retrieval_gives_every_question_an_empty_ranking():
    cfg = compose(["retrieval=none", "qa=reader", "llm=smollm2_cpu"])
    assert (cfg.retrieval.method, cfg.qa.enabled) == ("none", True)
    r = build_retriever(RetrieverParts(cfg=cfg, passages=["a\nb", "c\nd"]))
    qs = [Query(id="q1", question="Who?", gold_passages=["a\nb"], gold_answers=["x"]),
          Query(id="q2", question="Where?", gold_passages=[], gold_answers=["y"])]
    out = r.retrieve(qs)
    assert [(x.query_id, x.ranked, x.scores) for x in out] == [("q1", [], []), ("q2", [], [])]


def test_no_retrieval_without_the_reader_is_refused():
    with pytest.raises(ConfigError, match="retrieval.method=none .* needs qa=reader"):
        compose(["retrieval=none"])
