"""One question's retrieval, laid open (in the spirit of the paper's Figure 5).

The run's retrieval.jsonl holds the kept facts and the seed phrases with their reset
weights; the rest (passage seeds, the PPR distribution over every node) is
recomputed here from the run's index and config with the run's own functions: the
dense scores of the question (its embedding is in the cache), the reset vector, one
PPR solve. The recomputed ranking is compared with the run's; any difference is
reported in the explanation, never hidden.

Paths: for each gold passage, a shortest path (fewest edges) from the seed phrases
to it, each edge typed relation / synonym / context (a pair joined by more than one
type of edge shows all of them), relation edges labelled with a predicate of a fact
joining the pair.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from hipporag2.graph.build import EDGE_TYPES


@dataclass
class Step:
    source: str  # node label (phrase text, or passage title)
    target: str
    kinds: List[str]  # relation / synonym / context
    label: str = ""  # a predicate for relation edges, the cosine for synonym edges
    source_vertex: int = -1
    target_vertex: int = -1


@dataclass
class GoldPassage:
    title: str
    vertex: int
    rank: Optional[int]  # 1-based, over all passages (the run keeps retrieval_top_k of them)
    mass: float
    seed_weight: float
    path: List[Step] = field(default_factory=list)
    path_from: Optional[str] = None  # the seed phrase the path starts at


@dataclass
class RankedPassage:
    rank: int
    title: str
    vertex: int
    mass: float
    seed_weight: float
    gold: bool


@dataclass
class Explanation:
    query_id: str
    question: str
    answers: List[str]
    method: str
    damping: float
    passage_node_weight: float
    recall_at: Dict[int, float]
    candidate_facts: List[Tuple[Tuple[str, str, str], float]]
    kept_facts: List[Tuple[Tuple[str, str, str], float]]
    seeds: List[Tuple[str, float, int]]  # phrase, reset weight, vertex
    passage_seed_mass: float  # sum of passage reset weights
    passage_seeds_top: List[Tuple[str, float]]
    top_passages: List[RankedPassage]
    gold: List[GoldPassage]
    top_phrases: List[Tuple[str, float]]  # phrase nodes with the most PPR mass
    fallback: bool
    n_phrases: int
    warnings: List[str] = field(default_factory=list)


def edge_kinds_between(edges, a: int, b: int) -> List[int]:
    """Types of the edges joining vertices a and b (either direction), sorted."""
    src, dst, kind = np.asarray(edges.source), np.asarray(edges.target), np.asarray(edges.kind)
    m = ((src == a) & (dst == b)) | ((src == b) & (dst == a))
    return sorted(set(int(k) for k in kind[m]))


def edge_weight_between(edges, a: int, b: int, kind: int) -> Optional[float]:
    src, dst = np.asarray(edges.source), np.asarray(edges.target)
    m = (((src == a) & (dst == b)) | ((src == b) & (dst == a))) & (np.asarray(edges.kind) == kind)
    return float(np.asarray(edges.weight)[m].max()) if m.any() else None


def shortest_seed_paths(graph, seeds: Sequence[Tuple[int, float]], targets: Sequence[int]) -> Dict[int, Tuple[Optional[int], List[int]]]:
    """target vertex -> (seed vertex, vertex path) of a fewest-edges path from any seed;
    (None, []) when no seed reaches it. Ties between seeds go to the larger weight."""
    out: Dict[int, Tuple[Optional[int], List[int]]] = {t: (None, []) for t in targets}
    if not seeds or not targets:
        return out
    order = sorted(seeds, key=lambda s: -s[1])  # stable: equal weights keep seed order
    verts = [v for v, _ in order]
    dist = np.asarray(graph.distances(source=verts, target=list(targets)), dtype=float)  # hop counts
    for j, t in enumerate(targets):
        col = dist[:, j]
        if not np.isfinite(col).any():
            continue
        i = int(np.argmin(col))  # first minimum = heaviest seed at that distance
        path = graph.get_shortest_paths(verts[i], to=t, output="vpath")[0]
        out[t] = (verts[i], list(path))
    return out


def path_steps(path: Sequence[int], index, predicates: Dict[frozenset, str]) -> List[Step]:
    steps = []
    for a, b in zip(path[:-1], path[1:]):
        kinds = edge_kinds_between(index.edges, a, b)
        names = [EDGE_TYPES[k] for k in kinds]
        label = ""
        if "relation" in names:
            label = predicates.get(frozenset((vertex_text(index, a), vertex_text(index, b))), "")
        elif "synonym" in names:
            w = edge_weight_between(index.edges, a, b, EDGE_TYPES.index("synonym"))
            label = f"sim {w:.2f}" if w is not None else ""
        steps.append(Step(vertex_label(index, a), vertex_label(index, b), names, label, a, b))
    return steps


def vertex_text(index, v: int) -> str:
    return index.phrases[v] if v < index.n_phrases else index.passages[v - index.n_phrases]


def vertex_label(index, v: int) -> str:
    """Phrase text, or the title of a passage in brackets."""
    return index.phrases[v] if v < index.n_phrases else f"[{index.titles[v - index.n_phrases]}]"


def fact_predicates(facts) -> Dict[frozenset, str]:
    out: Dict[frozenset, str] = {}
    for s, p, o in facts:
        out.setdefault(frozenset((s, o)), p)
    return out


def explain_question(view, query_id: str, top_n: int = 5, ks: Sequence[int] = (2, 5)) -> Explanation:
    """Recompute one question's retrieval from the run's index and config."""
    from hipporag2.analysis.run_view import RunUnavailable
    from hipporag2.embed.store import open_store
    from hipporag2.evaluate.metrics import recall_at_k
    from hipporag2.retrieve.graph_retriever import dense_scores
    from hipporag2.retrieve.ppr import make_solver
    from hipporag2.retrieve.scoring import rank_desc
    from hipporag2.retrieve.seeds import passage_seed_vector, reset_rows, seeds_anything

    cfg = view.cfg.retrieval
    if cfg.method != "hipporag2" or not cfg.passage_nodes:
        raise RunUnavailable(f"{view.path}: explain draws HippoRAG 2 runs with passage nodes (this run: {cfg.name})")
    row = view.row(query_id)
    index = view.index()
    n_ph = index.n_phrases
    store = open_store(view.cfg.cache_dir, view.cfg.embedding)
    dense = dense_scores(store, index.passage_emb, [row.question], progress=False)[0]
    pseeds = passage_seed_vector(dense, cfg.passage_node_weight, cfg.passage_seed_top_k)
    run_seeds = row.seed_phrases or []
    seeds = [(index.phrase_index[p], w) for p, w in run_seeds if p in index.phrase_index]
    warnings: List[str] = []
    if len(seeds) != len(run_seeds):
        warnings.append(f"{len(run_seeds) - len(seeds)} seed phrase(s) of the run are not nodes of the index")
    if row.fallback or not seeds or not seeds_anything(seeds, pseeds):
        ppr = None
        scores = dense
    else:
        reset = reset_rows([seeds], [pseeds], n_ph, n_ph + index.n_passages)
        solver = make_solver(cfg.ppr_solver, index.graph(), n_threads=cfg.ppr_threads, tol=cfg.ppr_tol)
        ppr = solver.solve(reset, cfg.damping)[0]
        scores = ppr[n_ph:]
    order = rank_desc(scores, cfg.retrieval_top_k)
    recorded = row.passage_ids[: 2 * top_n]
    mine = [index.corpus_idx[i] for i in order[: len(recorded)]]
    if mine != recorded:
        first = next(i for i, (a, b) in enumerate(zip(mine, recorded)) if a != b)
        warnings.append(f"recomputed ranking differs from the run's at rank {first + 1} "
                        f"(run: {view.titles.get(recorded[first])!r}, here: {view.titles.get(mine[first])!r}); "
                        "the picture shows the recomputed one")
    gold_strings = view.gold.get(query_id, [])
    pos_of = {s: i for i, s in enumerate(index.passages)}
    gold_pos = [pos_of[s] for s in gold_strings if s in pos_of]
    gold_set = set(gold_pos)
    ranked_strings = [index.passages[i] for i in order]
    rank_of = {int(p): r + 1 for r, p in enumerate(rank_desc(scores))}  # full ranking, beyond retrieval_top_k too
    top = [RankedPassage(r + 1, index.titles[p], n_ph + int(p), float(scores[p]), float(pseeds[p]), int(p) in gold_set)
           for r, p in enumerate(order[:top_n])]
    predicates = fact_predicates(index.facts)
    paths = shortest_seed_paths(index.graph(), seeds, [n_ph + p for p in gold_pos]) if seeds else {}
    gold = []
    for p in gold_pos:
        seed_v, vpath = paths.get(n_ph + p, (None, []))
        gold.append(GoldPassage(
            title=index.titles[p], vertex=n_ph + p, rank=rank_of.get(p), mass=float(scores[p]),
            seed_weight=float(pseeds[p]),
            path=path_steps(vpath, index, predicates) if vpath else [],
            path_from=index.phrases[seed_v] if seed_v is not None else None,
        ))
    if len(gold_pos) != len(gold_strings):
        warnings.append(f"{len(gold_strings) - len(gold_pos)} gold passage(s) are not in the corpus")
    top_phr = []
    if ppr is not None:
        pm = ppr[:n_ph]
        top_phr = [(index.phrases[i], float(pm[i])) for i in rank_desc(pm, top_n + 3)]
    ps_order = rank_desc(pseeds, 3)
    return Explanation(
        query_id=query_id, question=row.question, answers=view.answers.get(query_id, []), method=cfg.name,
        damping=cfg.damping, passage_node_weight=cfg.passage_node_weight,
        recall_at={k: recall_at_k(gold_strings, ranked_strings, k) for k in ks},
        candidate_facts=row.candidate_facts or [], kept_facts=row.kept_facts or [],
        seeds=[(index.phrases[v], w, v) for v, w in seeds],
        passage_seed_mass=float(pseeds.sum()),
        passage_seeds_top=[(index.titles[i], float(pseeds[i])) for i in ps_order],
        top_passages=top, gold=gold, top_phrases=top_phr, fallback=ppr is None, n_phrases=n_ph,
        warnings=warnings,
    )


def _fact(f) -> str:
    return f"({f[0]}, {f[1]}, {f[2]})"


def explanation_text(e: Explanation) -> str:
    """The plain-text version of the picture."""
    lines = [
        f"question {e.query_id}: {e.question}",
        f"gold answer: {' | '.join(e.answers) or '?'}",
        f"method {e.method}, damping {e.damping:g}, passage_node_weight {e.passage_node_weight:g}; "
        + ", ".join(f"recall@{k} {100 * v:.0f}" for k, v in e.recall_at.items())
        + ("; DENSE FALLBACK (no seed phrase: ranked by dense scores)" if e.fallback else ""),
        "",
        "candidate facts (query-to-triple, before the filter), score:",
    ]
    kept = {f for f, _ in e.kept_facts}
    for f, s in e.candidate_facts:
        lines.append(f"  {'KEPT ' if f in kept else 'drop '} {s:.3f}  {_fact(f)}")
    lines += ["", f"seed phrases (reset weight = mean fact score / passages mentioning the phrase; "
              f"sum {sum(w for _, w, _ in e.seeds):.3f}):"]
    lines += [f"  {w:.4f}  {p}" for p, w, _ in e.seeds] or ["  (none)"]
    lines += ["", f"passage seeds: every passage, weight {e.passage_node_weight:g} x min-max dense score "
              f"(sum {e.passage_seed_mass:.3f}); largest:"]
    lines += [f"  {w:.4f}  {t}" for t, w in e.passage_seeds_top]
    lines += ["", f"top passages by PPR mass{' (dense score: fallback)' if e.fallback else ''}:"]
    for p in e.top_passages:
        lines.append(f"  {p.rank:>3}. {p.mass:.4f}  {'GOLD ' if p.gold else '     '}{p.title}  (passage seed {p.seed_weight:.4f})")
    if e.top_phrases:
        lines += ["", "phrase nodes with the most PPR mass:"]
        lines += [f"  {m:.4f}  {p}" for p, m in e.top_phrases]
    lines += ["", "gold passages, rank, mass, and a shortest path from the seed phrases:"]
    for g in e.gold:
        rank = f"rank {g.rank}" if g.rank is not None else "not ranked"
        lines.append(f"  [{g.title}]  {rank}, mass {g.mass:.4f}")
        if not g.path:
            lines.append("      no path from any seed phrase" if not e.fallback else "      (no seeds)")
        for s in g.path:
            kinds = "+".join(s.kinds)
            label = f" '{s.label}'" if s.label else ""
            lines.append(f"      {s.source}  --{kinds}{label}-->  {s.target}")
    if e.warnings:
        lines += [""] + [f"warning: {w}" for w in e.warnings]
    return "\n".join(lines) + "\n"
