"""PNG figures of the report (matplotlib, no display needed)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def heatmap(matrix: Sequence[Sequence[Optional[float]]], dampings: Sequence[float], weights: Sequence[float],
            path: Path | str, title: str = "recall@5") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    m = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float)
    fig, ax = plt.subplots(figsize=(1.3 * len(weights) + 2.2, 0.8 * len(dampings) + 1.6))
    im = ax.imshow(m, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(weights)), [f"{w:g}" for w in weights])
    ax.set_yticks(range(len(dampings)), [f"{d:g}" for d in dampings])
    ax.set_xlabel("passage_node_weight")
    ax.set_ylabel("damping")
    ax.set_title(title)
    finite = m[np.isfinite(m)]
    mid = (finite.max() + finite.min()) / 2 if finite.size else 0
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            if np.isfinite(m[i, j]):
                ax.text(j, i, f"{m[i, j]:.1f}", ha="center", va="center", color="black" if m[i, j] > mid else "white", fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def continual_plot(curves: Dict[str, Dict[str, List[Optional[float]]]], ks: Sequence[int], path: Path | str,
                   metric: str = "recall@5") -> Path:
    """One panel per run series: the score of all evaluated questions and of each
    segment's questions, against the number of segments indexed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = max(len(curves), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False, sharey=True)
    for ax, (series, lines) in zip(axes[0], sorted(curves.items())):
        for name, values in lines.items():
            xs = [k for k, v in zip(ks, values) if v is not None]
            ys = [v for v in values if v is not None]
            if not xs:
                continue
            style = dict(linewidth=2.5, color="black") if name == "all" else dict(linewidth=1.2, marker="o", markersize=3)
            ax.plot(xs, ys, label=name, **style)
        ax.set_title(series, fontsize=9)
        ax.set_xlabel("segments indexed")
        ax.set_xticks(list(ks))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(metric)
    axes[0][-1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
