"""BM25 baseline with the `bm25s` package, as the paper uses."""
from __future__ import annotations

from typing import List, Sequence

import numpy as np

from hipporag2.config import RetrievalConfig
from hipporag2.data.loaders import Query
from hipporag2.results import QueryResult
from hipporag2.retrieve.scoring import rank_desc


class BM25Retriever:
    def __init__(self, passages: Sequence[str], cfg: RetrievalConfig):
        import bm25s
        import Stemmer

        self.cfg = cfg
        self.stemmer = Stemmer.Stemmer("english")
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenize(list(passages), stopwords="en", stemmer=self.stemmer, show_progress=False), show_progress=False)
        self.n = len(passages)

    def retrieve(self, queries: Sequence[Query]) -> List[QueryResult]:
        import bm25s

        out = []
        for q in queries:
            tokens = bm25s.tokenize([q.question], stopwords="en", stemmer=self.stemmer, show_progress=False)
            vocab = tokens.vocab
            inv = {i: w for w, i in vocab.items()}
            words = [inv[i] for i in tokens.ids[0]]
            scores = np.asarray(self.model.get_scores(words), dtype=np.float64) if words else np.zeros(self.n)
            order = rank_desc(scores, self.cfg.retrieval_top_k)
            out.append(QueryResult(q.id, order.tolist(), [float(scores[i]) for i in order]))
        return out
