#!/usr/bin/env python3
"""Compare our per-query rankings (a run's `retrieval.jsonl`) with a reference dump.

Usage:
    python scripts/compare_rankings.py OURS_retrieval.jsonl REFERENCE.jsonl \
        [--corpus CORPUS.json] [--k 1,2,5,10,200] [--ref-field ranked_passages] \
        [--tie-tol 1e-6] [--show 5] [--json summary.json]

Our file: one JSON object per line with `id` and `ranked` = [{corpus_idx, title, score}]
best first; optionally `kept_facts` / `candidate_facts` ([[s, p, o], score] pairs or bare
[s, p, o] triples) and `seed_phrases` ([[phrase, weight], ...], after the top-k cut).

Reference dump (format defined here; docs/reference_check.md): one JSON object per line
  - `id` (required) — matched to our `id`;
  - `ranked_passages` (required, or the field named by --ref-field): best first, either
    corpus indices (int) or passage strings (`title + "\\n" + text`);
  - optional `scores` (same length), `kept_facts` ([s, p, o] lists), `seed_phrases`
    ([[phrase, weight], ...] after the cut) and `linking_score_map_before_cut`
    ({phrase: weight} over every phrase of the kept facts, before the top-k cut).

With --corpus (a JSON list of {title, text}) both sides are compared as passage strings;
without it both sides must use corpus indices.

Seed-phrase tie at the cut: with a full pre-cut weight map (`linking_score_map_before_cut`
or `phrase_weights` in either file) a query is "tied" when the weights just inside and
just outside the cut (positions linking_top_k and linking_top_k + 1, sorted descending)
differ by at most --tie-tol (relative). The reference breaks such ties in hash-seed
order, so their top-k may legitimately differ there. Without such a map the tie cannot
be decided; queries whose seed sets differ are listed instead.

Exit status: 0 whenever the inputs parse (disagreements are reported, not failures);
2 for malformed or unreadable inputs.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np


class InputError(Exception):
    pass


def _read_jsonl(path: str, what: str) -> List[dict]:
    try:
        fh = open(path, encoding="utf-8")
    except OSError as e:
        raise InputError(f"{what}: cannot open {path}: {e}")
    rows = []
    with fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{what}: {path} line {n} is not JSON: {e}")
            if not isinstance(obj, dict) or "id" not in obj:
                raise InputError(f"{what}: {path} line {n} has no `id`")
            rows.append(obj)
    if not rows:
        raise InputError(f"{what}: {path} holds no records")
    ids = [str(r["id"]) for r in rows]
    if len(set(ids)) != len(ids):
        raise InputError(f"{what}: {path} repeats query ids")
    return rows


def _read_corpus(path: str) -> List[str]:
    try:
        data = json.load(open(path, encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"corpus: cannot read {path}: {e}")
    if not isinstance(data, list) or not all(isinstance(d, dict) and "title" in d and "text" in d for d in data):
        raise InputError(f"corpus: {path} is not a JSON list of {{title, text}}")
    return [d["title"] + "\n" + d["text"] for d in data]


def _key(item, corpus: Optional[List[str]], what: str, qid: str):
    """One ranked entry -> comparison key (passage string with a corpus, else corpus index)."""
    if isinstance(item, bool):
        raise InputError(f"{what} {qid}: ranked entry {item!r} is neither an index nor a passage string")
    if isinstance(item, int):
        if corpus is None:
            return item
        if not 0 <= item < len(corpus):
            raise InputError(f"{what} {qid}: corpus index {item} out of range (corpus has {len(corpus)})")
        return corpus[item]
    if isinstance(item, str):
        if corpus is None:
            raise InputError(f"{what} {qid}: passage strings need --corpus")
        return item
    raise InputError(f"{what} {qid}: ranked entry {item!r} is neither an index nor a passage string")


def our_ranking(rec: dict, corpus) -> List:
    ranked = rec.get("ranked")
    if not isinstance(ranked, list):
        raise InputError(f"ours {rec['id']}: no `ranked` list")
    out = []
    for r in ranked:
        if not isinstance(r, dict) or "corpus_idx" not in r:
            raise InputError(f"ours {rec['id']}: ranked entry without corpus_idx")
        out.append(_key(r["corpus_idx"], corpus, "ours", rec["id"]))
    return out


def ref_ranking(rec: dict, corpus, field: str) -> List:
    ranked = rec.get(field)
    if not isinstance(ranked, list):
        raise InputError(f"reference {rec['id']}: no `{field}` list")
    return [_key(x, corpus, "reference", rec["id"]) for x in ranked]


def _fact_list(facts) -> Optional[List[tuple]]:
    """kept_facts as a list of (s, p, o): accepts [[s,p,o], score] pairs or bare triples."""
    if facts is None:
        return None
    out = []
    for f in facts:
        if isinstance(f, (list, tuple)) and len(f) == 2 and isinstance(f[0], (list, tuple)):
            f = f[0]
        out.append(tuple(str(x) for x in f))
    return out


def _seed_map(seeds) -> Optional[Dict[str, float]]:
    if seeds is None:
        return None
    if isinstance(seeds, dict):
        return {str(k): float(v) for k, v in seeds.items()}
    return {str(p): float(w) for p, w in seeds}


def _precut_map(rec: dict) -> Optional[Dict[str, float]]:
    for field in ("linking_score_map_before_cut", "phrase_weights"):
        m = rec.get(field)
        if isinstance(m, dict) and m:
            return {str(k): float(v) for k, v in m.items()}
    return None


def seed_tie_at_cut(weights: Dict[str, float], top_k: int, tol: float) -> bool:
    """True when the top_k-th and (top_k+1)-th largest weights are equal within tol."""
    w = sorted((v for v in weights.values() if v == v), reverse=True)  # NaN dropped
    if len(w) <= top_k:
        return False
    a, b = w[top_k - 1], w[top_k]
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-300)


def score_tie_at_cut(scores: Optional[Sequence[float]], k: int, tol: float) -> bool:
    if not scores or len(scores) <= k:
        return False
    a, b = float(scores[k - 1]), float(scores[k])
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-300)


def compare(ours: List[dict], ref: List[dict], corpus: Optional[List[str]], ks: List[int],
            ref_field: str = "ranked_passages", tie_tol: float = 1e-6, linking_top_k: int = 5) -> dict:
    ours_by_id = {str(r["id"]): r for r in ours}
    ref_by_id = {str(r["id"]): r for r in ref}
    common = [i for i in ours_by_id if i in ref_by_id]
    summary = {
        "n_ours": len(ours_by_id), "n_reference": len(ref_by_id), "n_common": len(common),
        "only_ours": sorted(set(ours_by_id) - set(ref_by_id)),
        "only_reference": sorted(set(ref_by_id) - set(ours_by_id)),
        "k": {}, "seed_tied": [], "passage_score_tied": {}, "seed_sets_differ": [],
        "kept_facts_differ": [], "seed_weight_max_abs_diff": None, "rank_correlation": None,
        "per_query": {},
    }
    ranks = {}
    for qid in common:
        a = our_ranking(ours_by_id[qid], corpus)
        b = ref_ranking(ref_by_id[qid], corpus, ref_field)
        ranks[qid] = (a, b)

    # seeds, facts and ties
    max_seed_diff = 0.0
    have_seed_cmp = False
    for qid in common:
        o, r = ours_by_id[qid], ref_by_id[qid]
        pre = _precut_map(o) or _precut_map(r)
        if pre is not None and seed_tie_at_cut(pre, linking_top_k, tie_tol):
            summary["seed_tied"].append(qid)
        so, sr = _seed_map(o.get("seed_phrases")), _seed_map(r.get("seed_phrases"))
        if so is not None and sr is not None:
            have_seed_cmp = True
            if set(so) != set(sr):
                summary["seed_sets_differ"].append(qid)
            for p in set(so) & set(sr):
                max_seed_diff = max(max_seed_diff, abs(so[p] - sr[p]))
        fo = _fact_list(o.get("kept_facts"))
        fr = _fact_list(r.get("kept_facts"))
        if fo is not None and fr is not None and fo != fr:
            summary["kept_facts_differ"].append(qid)
    if have_seed_cmp:
        summary["seed_weight_max_abs_diff"] = max_seed_diff

    for k in ks:
        same_set, same_order, differ, tied_ours, tied_ref = 0, 0, [], [], []
        for qid in common:
            a, b = ranks[qid]
            sa, sb = a[:k], b[:k]
            if len(sa) < k or len(sb) < k:
                if len(sa) != len(sb):
                    raise InputError(f"query {qid}: ours has {len(a)} ranked, reference {len(b)}: cannot compare top-{k}")
            if set(sa) == set(sb):
                same_set += 1
            else:
                differ.append(qid)
            if sa == sb:
                same_order += 1
            if score_tie_at_cut([x.get("score") for x in ours_by_id[qid]["ranked"]], k, tie_tol):
                tied_ours.append(qid)
            if score_tie_at_cut(ref_by_id[qid].get("scores"), k, tie_tol):
                tied_ref.append(qid)
        untied_differ = [q for q in differ if q not in summary["seed_tied"]]
        summary["k"][str(k)] = {
            "identical_set": same_set, "identical_order": same_order, "n": len(common),
            "set_differs": differ, "set_differs_not_seed_tied": untied_differ,
        }
        summary["passage_score_tied"][str(k)] = {"ours": tied_ours, "reference": tied_ref}

    # mean Spearman-like agreement over the shared items of the full lists (diagnostic)
    rhos = []
    for qid in common:
        a, b = ranks[qid]
        pos_b = {x: i for i, x in enumerate(b)}
        shared = [x for x in a if x in pos_b]
        if len(shared) > 2:
            ra = np.arange(len(shared), dtype=float)
            rb = np.array([pos_b[x] for x in shared], dtype=float)
            rb = np.argsort(np.argsort(rb)).astype(float)
            rhos.append(float(np.corrcoef(ra, rb)[0, 1]))
    if rhos:
        summary["rank_correlation"] = float(np.mean(rhos))

    for qid in common:
        a, b = ranks[qid]
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        summary["per_query"][qid] = {"first_rank_difference": first}
    return summary


def _label(x, corpus):
    if isinstance(x, str):
        return x.split("\n", 1)[0]
    return str(x)


def print_report(summary: dict, ours, ref, corpus, ks, ref_field, show: int, out=None):
    out = out or sys.stdout
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"queries: ours {summary['n_ours']}, reference {summary['n_reference']}, compared {summary['n_common']}")
    if summary["only_ours"]:
        p(f"  only in ours ({len(summary['only_ours'])}): {' '.join(summary['only_ours'][:20])}")
    if summary["only_reference"]:
        p(f"  only in reference ({len(summary['only_reference'])}): {' '.join(summary['only_reference'][:20])}")
    p("")
    p(f"{'k':>5}  {'same set':>9}  {'same order':>10}")
    for k in ks:
        r = summary["k"][str(k)]
        p(f"{k:>5}  {r['identical_set']:>4}/{r['n']:<4}  {r['identical_order']:>5}/{r['n']:<4}")
    p("")
    for k in ks:
        r = summary["k"][str(k)]
        if r["set_differs"]:
            p(f"top-{k} sets differ ({len(r['set_differs'])}): {' '.join(r['set_differs'])}")
    tied = summary["seed_tied"]
    p(f"seed phrases tied at the cut: {len(tied)}" + (f": {' '.join(tied)}" if tied else ""))
    if "5" in summary["k"]:
        u = summary["k"]["5"]["set_differs_not_seed_tied"]
        p(f"top-5 sets differ on queries NOT seed-tied: {len(u)}" + (f": {' '.join(u)}" if u else ""))
    for k in ks:
        t = summary["passage_score_tied"][str(k)]
        if t["ours"] or t["reference"]:
            p(f"passage scores tied at the top-{k} cut: ours {len(t['ours'])} {' '.join(t['ours'][:10])}; "
              f"reference {len(t['reference'])} {' '.join(t['reference'][:10])}")
    if summary["seed_weight_max_abs_diff"] is not None:
        p(f"seed sets differ: {len(summary['seed_sets_differ'])}"
          + (f": {' '.join(summary['seed_sets_differ'])}" if summary["seed_sets_differ"] else "")
          + f"; max |seed weight difference| on shared seeds: {summary['seed_weight_max_abs_diff']:.3g}")
    if summary["kept_facts_differ"]:
        p(f"kept facts differ ({len(summary['kept_facts_differ'])}): {' '.join(summary['kept_facts_differ'])}")
    if summary["rank_correlation"] is not None:
        p(f"mean rank correlation over shared passages of the full lists: {summary['rank_correlation']:.6f}")

    if show and ks:
        ours_by_id = {str(r["id"]): r for r in ours}
        ref_by_id = {str(r["id"]): r for r in ref}
        kk = 5 if 5 in ks else ks[0]
        shown = summary["k"][str(kk)]["set_differs"][:show]
        for qid in shown:
            a = our_ranking(ours_by_id[qid], corpus)
            b = ref_ranking(ref_by_id[qid], corpus, ref_field)
            p("")
            p(f"--- {qid}: top-{kk}")
            p("  ours:      " + " | ".join(_label(x, corpus) for x in a[:kk]))
            p("  reference: " + " | ".join(_label(x, corpus) for x in b[:kk]))
            so = ours_by_id[qid].get("seed_phrases")
            sr = ref_by_id[qid].get("seed_phrases")
            if so is not None:
                p("  our seeds: " + "; ".join(f"{s} {float(w):.6g}" for s, w in so))
            if sr is not None:
                p("  ref seeds: " + "; ".join(f"{s} {float(w):.6g}" for s, w in (sr.items() if isinstance(sr, dict) else sr)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ours", help="our run's retrieval.jsonl")
    ap.add_argument("reference", help="reference dump JSONL (id, ranked_passages, ...)")
    ap.add_argument("--corpus", help="corpus JSON ({title, text} list) mapping corpus_idx to passage strings")
    ap.add_argument("--k", default="1,2,5,10,200", help="comma-separated cut-offs (default 1,2,5,10,200)")
    ap.add_argument("--ref-field", default="ranked_passages", help="reference field holding the ranking")
    ap.add_argument("--linking-top-k", type=int, default=5, help="seed phrases kept by the cut (default 5)")
    ap.add_argument("--tie-tol", type=float, default=1e-6, help="relative tolerance for a tie (default 1e-6)")
    ap.add_argument("--show", type=int, default=5, help="print details for this many top-5 disagreements")
    ap.add_argument("--json", help="also write the summary as JSON here")
    args = ap.parse_args(argv)
    try:
        ks = [int(x) for x in args.k.split(",") if x.strip()]
        if not ks or any(k < 1 for k in ks):
            raise ValueError
    except ValueError:
        print(f"error: --k must be positive integers separated by commas, got {args.k!r}", file=sys.stderr)
        return 2
    try:
        corpus = _read_corpus(args.corpus) if args.corpus else None
        ours = _read_jsonl(args.ours, "ours")
        ref = _read_jsonl(args.reference, "reference")
        summary = compare(ours, ref, corpus, ks, args.ref_field, args.tie_tol, args.linking_top_k)
        print_report(summary, ours, ref, corpus, ks, args.ref_field, args.show)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
