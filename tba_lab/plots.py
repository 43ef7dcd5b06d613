"""Plots of a run directory (matplotlib, Agg backend: works headless and in notebooks)."""
from __future__ import annotations

import json
from pathlib import Path


def read_jsonl_rows(path: Path) -> list[dict]:
    """Rows of a JSONL file, or ``[]`` when it does not exist (a run that stopped early)."""
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
        full = max(e["n"] for e in evals)  # before/after use the full set, interim a subset
        interim = [e for e in evals if e["n"] != full]
        if interim:
            ax1.plot([e["wall_seconds"] for e in interim], [100 * e["accuracy"] for e in interim],
                     "o-", color="C1", label="interim subset")
        ends = [e for e in evals if e["n"] == full]
        ax1.plot([e["wall_seconds"] for e in ends], [100 * e["accuracy"] for e in ends],
                 "s", color="C0", label=f"{full} problems")
        ax1.legend(loc="lower right")
    ax1.set(xlabel="training wall-clock (s)", ylabel="held-out greedy accuracy (%)",
            title="Held-out accuracy")
    if metrics:
        x = [m["wall_seconds"] for m in metrics]
        w = max(1, len(x) // 30)  # moving average over ~1/30 of the run
        for key, label in (("reward_mean", "trainer batch"), ("searcher_reward_mean", "newest rollouts")):
            y = [m.get(key) for m in metrics]
            pts = [(a, b) for a, b in zip(x, y) if b is not None]
            if not pts:
                continue
            xs, ys = zip(*pts)
            smooth = [sum(ys[max(0, i - w + 1):i + 1]) / len(ys[max(0, i - w + 1):i + 1])
                      for i in range(len(ys))]
            ax2.plot(xs, smooth, label=f"{label} (moving average of {w})")
        ax2.legend(loc="lower right")
    ax2.set(xlabel="training wall-clock (s)", ylabel="mean reward", title="Training reward")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path or run_dir / "curves.png", dpi=110)
    plt.close(fig)
    return fig
