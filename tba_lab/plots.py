"""Plots of a run directory (matplotlib, Agg backend: works headless and in notebooks)."""
from __future__ import annotations

import json
from pathlib import Path


def read_jsonl_rows(path: Path) -> list[dict]:
    """Rows of a JSONL file, or ``[]`` when it does not exist (a run that stopped early).

    A run still in progress may be writing its last line: an undecodable LAST line is left out.
    An undecodable line anywhere else raises ``json.JSONDecodeError`` (a corrupt file).
    """
    path = Path(path)
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise
    return rows


def moving_average(values, window: int):
    """Trailing moving average: ``out[i] = mean(values[max(0, i - window + 1) : i + 1])``.

    The first ``window - 1`` points average over what exists so far (no padding), so the output
    has the input's length.

    Args:
        values: 1-D sequence of numbers.
        window: number of points averaged, >= 1.

    Returns:
        float64 numpy array of ``len(values)``.

    Raises:
        ValueError: window < 1.
    """
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    if window < 1:
        raise ValueError(f"window={window}: must be >= 1")
    if x.size == 0:
        return x
    c = np.concatenate([[0.0], np.cumsum(x)])
    idx = np.arange(1, x.size + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


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
            smooth = moving_average(ys, w)
            ax2.plot(xs, smooth, label=f"{label} (moving average of {w})")
        ax2.legend(loc="lower right")
    ax2.set(xlabel="training wall-clock (s)", ylabel="mean reward", title="Training reward")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path or run_dir / "curves.png", dpi=110)
    plt.close(fig)
    return fig
