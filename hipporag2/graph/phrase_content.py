"""Index content from phrase mentions alone (openie=spacy, issue 27): no triples, no facts.

A classical extractor gives, for each sentence of a passage, the phrases it names.
They become phrase nodes normalised exactly like OpenIE phrases (`text.normalise_phrase`),
so node specificity and synonym edges work as for an LLM index; the passage links to
each of its phrases by a context edge (`IndexContent.mentions`), and two phrases named
in one sentence make a co-occurrence pair (`IndexContent.pairs`), which `build_edges`
turns into an edge weighted like a relation edge (one per sentence naming both) when
`graph.cooccurrence_edges` is on.
"""
from __future__ import annotations

from itertools import combinations
from typing import List, Sequence

import numpy as np

from hipporag2.graph.build import IndexContent
from hipporag2.text import normalise_phrase

SentencePhrases = Sequence[Sequence[str]]  # one passage: the raw phrases of each sentence


def normalised_sentences(sentences: SentencePhrases) -> List[List[str]]:
    """Each sentence's phrases normalised, empty ones dropped, repeats kept once."""
    out = []
    for sent in sentences:
        out.append(list(dict.fromkeys(p for p in (normalise_phrase(x) for x in sent) if p)))
    return out


def phrase_content(passages: Sequence[str], by_passage: Sequence[SentencePhrases]) -> IndexContent:
    """`by_passage[i]`: passage i's raw phrases by sentence. Phrases are sorted by text
    (the vertex order of an OpenIE index); mentions and pairs in passage, then
    first-seen order."""
    if len(by_passage) != len(passages):
        raise ValueError(f"{len(by_passage)} phrase lists for {len(passages)} passages")
    norm = [normalised_sentences(s) for s in by_passage]
    per_passage = [list(dict.fromkeys(p for sent in sents for p in sent)) for sents in norm]
    phrases = sorted({p for ps in per_passage for p in ps})
    index = {p: i for i, p in enumerate(phrases)}
    spec: List[List[int]] = [[] for _ in phrases]
    m_phrase, m_passage = [], []
    subj, obj, owner, lengths = [], [], [], []
    for j, (ps, sents) in enumerate(zip(per_passage, norm)):
        for p in ps:
            spec[index[p]].append(j)
            m_phrase.append(index[p])
            m_passage.append(j)
        n_pairs = 0
        for sent in sents:
            for a, b in combinations(sent, 2):
                subj.append(index[a])
                obj.append(index[b])
                n_pairs += 1
        owner.extend([j] * n_pairs)
        lengths.append(n_pairs)
    content = IndexContent(
        passages=list(passages),
        chunk_triples=[[] for _ in passages],
        phrases=phrases,
        facts=[],
        phrase_passages=spec,
        passage_facts=[[] for _ in passages],
    )
    content._phrase_index = index
    i64 = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
    content.pairs = (i64(subj), i64(obj), i64(owner), i64(lengths))
    content.mentions = (i64(m_phrase), i64(m_passage))
    return content
