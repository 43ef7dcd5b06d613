"""Run ``tba_lab.trainer.train`` in a background thread and redraw a figure while it runs.

Used by notebook 01 (a live reward curve). The trainer itself spawns its searcher processes
(``tba_lab.actors``); this module only adds a thread around ``train`` so the notebook's main
thread is free to read ``metrics.jsonl`` and redraw. In a headless run (papermill, CI) the
redraws simply replace each other in the cell output; the caller saves the final figure.
"""
from __future__ import annotations

import threading
from pathlib import Path

from tba_lab.runlog import moving_average, read_jsonl_rows  # noqa: F401  (moving_average: notebook 01)


class BackgroundRun:
    """``train(cfg)`` in a daemon thread.

    ``train`` installs its Ctrl-C handlers only in the main thread, so interrupting the kernel
    while a background run is going stops the redraw loop, not the run; ``join`` waits for it.
    (The explorer, :mod:`tba_lab.lab.widgets`, sets the stop event on an interrupt.)

    Whether the run has ended is an ``Event`` set when ``train`` returns, not
    ``Thread.is_alive()``: a ``Thread.join`` interrupted by ``KeyboardInterrupt`` (Ctrl-C in a
    cell that waits on the run) leaves CPython 3.11's thread marked as stopped while it runs.

    Args:
        cfg: a :class:`~tba_lab.config.RunConfig`.
        stop_event: optional ``threading.Event``; setting it ends the run early (``train``'s
            ``stop_event``), with everything saved.
    """

    def __init__(self, cfg, stop_event: threading.Event | None = None):
        self.cfg = cfg
        self.stop_event = stop_event
        self.run_dir = Path(cfg.output_dir)
        self.summary: dict | None = None
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._target, name="tba-train", daemon=True)

    def _target(self) -> None:
        from tba_lab.trainer import train

        try:
            self.summary = train(self.cfg, progress=False, stop_event=self.stop_event)
        except BaseException as e:  # handed to the notebook by join()
            self.error = e
        finally:
            self._done.set()

    def start(self) -> "BackgroundRun":
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """Started and not ended yet."""
        return self._thread.ident is not None and not self._done.is_set()

    def wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: until the end); True when the run has ended."""
        return self._done.wait(timeout)

    def join(self) -> dict:
        """Wait for the run; return its summary, or re-raise the error it stopped with."""
        self._done.wait()
        if self.error is not None:
            raise self.error
        return self.summary

    def metrics(self) -> list[dict]:
        """The ``metrics.jsonl`` rows written so far (one per trainer update)."""
        return read_jsonl_rows(self.run_dir / "metrics.jsonl")

    def evals(self) -> list[dict]:
        """The ``eval.jsonl`` rows written so far (held-out greedy accuracy)."""
        return read_jsonl_rows(self.run_dir / "eval.jsonl")


def watch(run: BackgroundRun, draw, every: float = 5.0) -> None:
    """Redraw ``draw(run)`` (returns a matplotlib Figure) every ``every`` seconds until the run
    ends, replacing the cell's previous output; the figure is closed after each display. When
    the run ends the last redraw is cleared as soon as the caller shows its final figure."""
    import matplotlib.pyplot as plt
    from IPython.display import clear_output, display

    while not run.wait(every):
        fig = draw(run)
        clear_output(wait=True)
        display(fig)
        plt.close(fig)
    clear_output(wait=True)


__all__ = ["BackgroundRun", "moving_average", "watch"]
