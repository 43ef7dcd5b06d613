"""A training run in a background thread, redrawn while it runs (notebook 01's live reward curve):
the thread around ``train`` keeps the notebook's main thread free to read its logs
(:func:`tba_lab.runlog.read_run`) and redraw.
"""
from __future__ import annotations

import threading
from pathlib import Path


class BackgroundRun:
    """``train(cfg)`` in a daemon thread; setting ``stop_event`` ends it early, saved.

    ``train`` installs its Ctrl-C handlers only in the main thread, so interrupting the kernel
    stops the redraw loop, not the run. The run's end is an ``Event``, not ``is_alive()``:
    CPython 3.11 marks a thread stopped when a ``join`` on it is interrupted.
    """

    def __init__(self, cfg, stop_event: threading.Event | None = None):
        self.cfg, self.stop_event = cfg, stop_event
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


def watch(run: BackgroundRun, draw, every: float = 5.0) -> None:
    """Show ``draw(run)`` (a Figure) every ``every`` seconds until the run ends, each replacing the
    cell's output; the last one is cleared when the run ends."""
    import matplotlib.pyplot as plt
    from IPython.display import clear_output, display

    while not run.wait(every):
        fig = draw(run)
        clear_output(wait=True)
        display(fig)
        plt.close(fig)
    clear_output(wait=True)
