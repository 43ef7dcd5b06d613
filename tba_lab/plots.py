"""Plots of a run directory (matplotlib, Agg backend: works headless and in notebooks)."""
from __future__ import annotations

import json
from pathlib import Path


def read_jsonl_rows(path: Path) -> list[dict]:
    path = Path(path)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def plot_curves(run_dir: str | Path, path: str | Path | None = None):
    """Draw ``curves.png``: held-out greedy accuracy and mean batch reward against wall-clock
    seconds of training, from ``eval.jsonl`` and ``metrics.jsonl`` in ``run_dir``.

    Returns:
        the matplotlib Figure (also saved to ``path``, default ``run_dir/curves.png``).
    """
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    evals = read_jsonl_rows(run_dir / "eval.jsonl")
    metrics = read_jsonl_rows(run_dir / "metrics.jsonl")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    if evals:
        ax1.plot([e["wall_seconds"] for e in evals], [100 * e["accuracy"] for e in evals], "o-")
    ax1.set(xlabel="training wall-clock (s)", ylabel="held-out greedy accuracy (%)",
            title="Held-out accuracy")
    if metrics:
        x = [m["wall_seconds"] for m in metrics]
        y = [m["reward_mean"] for m in metrics]
        w = max(1, len(y) // 30)  # moving average over ~1/30 of the run
        smooth = [sum(y[max(0, i - w + 1):i + 1]) / len(y[max(0, i - w + 1):i + 1]) for i in range(len(y))]
        ax2.plot(x, y, alpha=0.25, label="per batch")
        ax2.plot(x, smooth, label=f"moving average ({w})")
        ax2.legend(loc="lower right")
    ax2.set(xlabel="training wall-clock (s)", ylabel="mean reward", title="Training reward")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path or run_dir / "curves.png", dpi=110)
    plt.close(fig)
    return fig
