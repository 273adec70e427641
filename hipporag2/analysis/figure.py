"""The picture of one explanation (matplotlib, no display needed).

Top: the graph around the question, laid out left to right by distance from the seed
phrases: seeds (orange, shade = reset weight) in the first column, then the nodes of
a shortest path to each gold passage (green boxes), edges drawn by type. Bottom:
the facts before and after the filter with the seeds, the top passages by PPR mass,
and the gold passages with their ranks.
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict, List, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from hipporag2.analysis.explain import Explanation  # noqa: E402

EDGE_STYLE = {
    "relation": dict(color="#1f77b4", linestyle="-", linewidth=2.0),
    "synonym": dict(color="#9467bd", linestyle="--", linewidth=2.0),
    "context": dict(color="#7f7f7f", linestyle=":", linewidth=2.0),
}


def _wrap(text: str, width: int = 24, lines: int = 3) -> str:
    parts = textwrap.wrap(text, width) or [""]
    if len(parts) > lines:
        parts = parts[:lines]
        parts[-1] = parts[-1][: width - 1] + "…"
    return "\n".join(parts)


def _layout(e: Explanation) -> Tuple[Dict[int, Tuple[float, float]], Dict[int, str]]:
    """vertex -> (column, row) and vertex -> label for seeds, path nodes and gold passages."""
    depth: Dict[int, int] = {}
    label: Dict[int, str] = {}
    for phrase, _, v in e.seeds:
        depth[v] = 0
        label[v] = phrase
    for g in e.gold:
        for i, s in enumerate(g.path):
            for v, text, d in ((s.source_vertex, s.source, i), (s.target_vertex, s.target, i + 1)):
                depth[v] = min(depth.get(v, d), d)
                label.setdefault(v, text)
    last = max(depth.values(), default=0)
    for g in e.gold:
        if g.vertex not in depth:  # unreachable gold passage: a column of its own on the right
            depth[g.vertex] = last + 1
            label[g.vertex] = f"[{g.title}]"
    columns: Dict[int, List[int]] = {}
    for v, d in depth.items():  # insertion order: seeds by weight, then path order
        columns.setdefault(d, []).append(v)
    preds: Dict[int, List[int]] = {}
    for g in e.gold:
        for s in g.path:
            preds.setdefault(s.target_vertex, []).append(s.source_vertex)
    pos: Dict[int, Tuple[float, float]] = {}
    for d in sorted(columns):
        verts = columns[d]
        if d > 0:  # order by the mean height of the predecessors: fewer crossing edges
            def key(v, verts=verts):
                ys = [pos[u][1] for u in preds.get(v, []) if u in pos]
                return -(sum(ys) / len(ys)) if ys else float("inf")
            verts = sorted(verts, key=key)
        for i, v in enumerate(verts):
            pos[v] = (float(d), (len(verts) - 1) / 2.0 - i)  # each column centred
    return pos, label


def draw_explanation(e: Explanation, path: Path | str, dpi: int = 110) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pos, label = _layout(e)
    n_cols = int(max((x for x, _ in pos.values()), default=0)) + 1
    n_rows = max((sum(1 for p in pos.values() if p[0] == c) for c in range(n_cols)), default=1)
    width = max(14.0, 3.3 * n_cols + 2)
    graph_h = max(3.2, 1.05 * n_rows + 1.2)
    fig = plt.figure(figsize=(width, graph_h + 5.6))
    gs = fig.add_gridspec(2, 3, height_ratios=[graph_h, 5.6], hspace=0.2, wspace=0.05)
    ax = fig.add_subplot(gs[0, :])
    title = f"{e.query_id}: {e.question}"
    ax.set_title(_wrap(title, 140, 2), fontsize=13, fontweight="bold")
    gold_vertices = {g.vertex: g for g in e.gold}
    seed_w = {v: w for _, w, v in e.seeds}
    wmax = max(seed_w.values(), default=1.0) or 1.0

    # edges first, under the nodes
    drawn = set()
    for g in e.gold:
        for s in g.path:
            key = frozenset((s.source_vertex, s.target_vertex))
            if key in drawn:
                continue
            drawn.add(key)
            (x1, y1), (x2, y2) = pos[s.source_vertex], pos[s.target_vertex]
            kind = s.kinds[0] if s.kinds else "context"
            ax.plot([x1, x2], [y1, y2], zorder=1, **EDGE_STYLE[kind])
            text = "+".join(s.kinds) if len(s.kinds) > 1 else ""
            if s.label:
                text = (text + " " if text else "") + _wrap(s.label, 22, 2)
            if text:
                ax.text((x1 + x2) / 2, (y1 + y2) / 2 + 0.12, text, fontsize=8.5, ha="center", va="bottom",
                        color=EDGE_STYLE[kind]["color"], zorder=3,
                        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))
    for v, (x, y) in pos.items():
        if v in gold_vertices:
            g = gold_vertices[v]
            rank = f"rank {g.rank}" if g.rank is not None else "not ranked"
            text = f"GOLD {_wrap(g.title, 24, 2)}\n{rank} · PPR {g.mass:.3f}"
            style = dict(boxstyle="square,pad=0.4", fc="#c7e9c0", ec="#238b45", lw=2)
        elif v >= e.n_phrases:
            text = _wrap(label[v], 24, 2)
            style = dict(boxstyle="square,pad=0.4", fc="#f0f0f0", ec="#636363", lw=1.2)
        elif v in seed_w:
            shade = 0.35 + 0.65 * seed_w[v] / wmax
            text = f"{_wrap(label[v])}\nseed {seed_w[v]:.3g}"
            style = dict(boxstyle="round,pad=0.35", fc=(1.0, 0.85 - 0.35 * shade, 0.55 - 0.45 * shade), ec="#d94801", lw=1.5)
        else:
            text = _wrap(label[v])
            style = dict(boxstyle="round,pad=0.35", fc="#deebf7", ec="#3182bd", lw=1.0)
        ax.text(x, y, text, ha="center", va="center", fontsize=9.5, zorder=4, bbox=style)
    xs = [p[0] for p in pos.values()] or [0.0]
    ys = [p[1] for p in pos.values()] or [0.0]
    ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.axis("off")
    handles = [Line2D([0], [0], **EDGE_STYLE[k], label=f"{k} edge") for k in ("relation", "synonym", "context")]
    handles += [
        Line2D([0], [0], marker="s", linestyle="", markerfacecolor="#fdae6b", markeredgecolor="#d94801", markersize=11, label="seed phrase"),
        Line2D([0], [0], marker="s", linestyle="", markerfacecolor="#deebf7", markeredgecolor="#3182bd", markersize=11, label="phrase on a path"),
        Line2D([0], [0], marker="s", linestyle="", markerfacecolor="#c7e9c0", markeredgecolor="#238b45", markersize=11, label="gold passage"),
        Line2D([0], [0], marker="s", linestyle="", markerfacecolor="#f0f0f0", markeredgecolor="#636363", markersize=11, label="other passage"),
    ]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=9, ncol=7, frameon=False)
    if not pos:
        ax.text(0.5, 0.5, "no seed phrase: the run fell back to the dense ranking", ha="center", va="center",
                transform=ax.transAxes, fontsize=12)
    elif e.seeds and not any(g.path for g in e.gold):
        ax.text(0.5, 0.02, "no gold passage is reachable from the seed phrases", ha="center", transform=ax.transAxes, fontsize=10)

    _text_panel(fig.add_subplot(gs[1, 0]), "Facts (before filter → kept) and seeds", _facts_lines(e))
    _text_panel(fig.add_subplot(gs[1, 1]), "Top passages by PPR mass" + (" (dense fallback)" if e.fallback else ""), _top_lines(e))
    _text_panel(fig.add_subplot(gs[1, 2]), "Gold passages", _gold_lines(e))
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path


def _text_panel(ax, title: str, lines: List[Tuple[str, str]]) -> None:
    ax.axis("off")
    ax.set_title(title, fontsize=11, loc="left", fontweight="bold")
    y = 0.97
    for text, color in lines:
        n = text.count("\n") + 1
        ax.text(0.01, y, text, fontsize=9, va="top", ha="left", color=color, family="DejaVu Sans", transform=ax.transAxes)
        y -= 0.058 * n + 0.012
        if y < 0.02:
            ax.text(0.01, 0.01, "…", fontsize=9, transform=ax.transAxes)
            break


def _facts_lines(e: Explanation) -> List[Tuple[str, str]]:
    kept = {f for f, _ in e.kept_facts}
    out = []
    for f, s in e.candidate_facts:
        mark, color = ("✓", "black") if f in kept else ("✗", "#969696")
        out.append((_wrap(f"{mark} {s:.2f} ({f[0]}, {f[1]}, {f[2]})", 58, 2), color))
    out.append((f"seeds (reset weight, sum {sum(w for _, w, _ in e.seeds):.3f}):", "#d94801"))
    for p, w, _ in e.seeds:
        out.append((_wrap(f"  {w:.4f}  {p}", 58, 1), "#d94801"))
    out.append((f"passage seeds: {e.passage_node_weight:g} × dense score, sum {e.passage_seed_mass:.3f}", "#636363"))
    return out


def _top_lines(e: Explanation) -> List[Tuple[str, str]]:
    out = []
    for p in e.top_passages:
        out.append((_wrap(f"{p.rank}. {p.mass:.4f}  {p.title}{'  (gold)' if p.gold else ''}", 52, 1),
                    "#238b45" if p.gold else "black"))
    recalls = ", ".join(f"recall@{k} {100 * v:.0f}" for k, v in e.recall_at.items())
    out.append((recalls, "black"))
    out.append((f"damping {e.damping:g}, passage_node_weight {e.passage_node_weight:g}", "#636363"))
    if e.top_phrases:
        out.append(("phrases with most PPR mass:", "#3182bd"))
        out += [(_wrap(f"  {m:.4f}  {p}", 52, 1), "#3182bd") for p, m in e.top_phrases[:5]]
    return out


def _gold_lines(e: Explanation) -> List[Tuple[str, str]]:
    out = [(_wrap("answer: " + (" | ".join(e.answers) or "?"), 52, 2), "black")]
    for g in e.gold:
        rank = f"rank {g.rank}" if g.rank is not None else "not ranked"
        hops = f"{len(g.path)} edges from '{g.path_from}'" if g.path else "no path from a seed"
        out.append((_wrap(f"{g.title}: {rank}, PPR {g.mass:.4f}; {hops}", 52, 2), "#238b45"))
    for w in e.warnings:
        out.append((_wrap("warning: " + w, 52, 3), "#cb181d"))
    return out
