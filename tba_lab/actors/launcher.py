"""The launcher protocol: how the trainer starts searchers, sends weights and receives rollouts.

A launcher is registered in :data:`tba_lab.registry.LAUNCHERS` under the ``async.launcher``
value that selects it, and built with ``cls(cfg, model, use_reference)``. The trainer uses
six methods and nothing else, so a launcher for Ray actors or other machines plugs in beside
:class:`~tba_lab.actors.local.LocalLauncher` without touching the trainer.

Messages (docs/design.md sec. 3), typed, never plain dicts:

* :class:`~tba_lab.rollout.RolloutBatch`: one generation batch of B*K prompt-major rollouts,
  with the searcher id, the policy version that generated it and its timings;
* :class:`SearcherFailed`: a searcher raised (with its traceback) or its process ended
  without being asked to (with the exit code or signal). A launcher reports both kinds through
  ``poll``; the trainer's failure policy (:class:`tba_lab.trainer.Feed`) decides whether to
  ``restart`` or ``retire`` the searcher, and reports a searcher that stops sending messages
  (``async.searcher_timeout``) the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tba_lab.registry import LAUNCHERS


@dataclass
class SearcherFailed:
    """A searcher failed.

    Attributes:
        searcher_id: which searcher.
        traceback: its traceback (``reason == "raised"``) or a one-line account of how it ended
            or stalled.
        reason: ``"raised"`` (an exception in the searcher), ``"exited"`` (the process ended:
            killed, out of memory, crashed), ``"hung"`` (no message for
            ``async.searcher_timeout`` seconds) or ``"stale"`` (its weights stopped advancing:
            ``async.stale_batches`` batches in a row generated with an old version after a
            newer one was published; reported by the trainer's ``Feed``).
    """
    searcher_id: int
    traceback: str
    reason: str = "raised"


class SearcherError(RuntimeError):
    """The run stopped because no searcher is left: each failed more than ``async.max_restarts``
    times. The message holds the last failure's traceback."""


class Launcher(Protocol):
    """What the trainer needs from the searchers, wherever they run.

    Built as ``cls(cfg, model, use_reference)``: the run's config, the trainer's policy (it
    defines the weights to publish) and whether searchers compute reference log-probs.
    Searchers are numbered ``0 .. async.num_searchers - 1``.
    """
    name: str

    def start(self) -> None:
        """Start ``cfg.async_.num_searchers`` searchers (they load their models meanwhile)."""
        ...

    def publish(self, model, version: int) -> None:
        """Make ``model``'s weights, after ``version`` trainer updates, visible to searchers."""
        ...

    def poll(self, timeout: float = 0.0) -> list:
        """Every message waiting now (:class:`~tba_lab.rollout.RolloutBatch` or
        :class:`SearcherFailed`), waiting up to ``timeout`` seconds for the first one. A
        searcher whose process ended without being asked to is reported once, as
        ``SearcherFailed(reason="exited")``."""
        ...

    def restart(self, searcher_id: int) -> None:
        """End searcher ``searcher_id`` (killing it if it hangs) and start a fresh one in its
        place, with a new seed; it pulls the newest published weights."""
        ...

    def retire(self, searcher_id: int) -> None:
        """End searcher ``searcher_id`` for good (the run goes on with the others)."""
        ...

    def stop(self) -> None:
        """Stop every searcher within seconds; idempotent; no process is left behind."""
        ...


def make_launcher(cfg, model, use_reference: bool) -> Launcher:
    """The launcher ``cfg.async_.launcher`` names, built for this run. Raises KeyError for an
    unknown name."""
    return LAUNCHERS.get(cfg.async_.launcher)(cfg, model, use_reference)
