"""Asynchronous actors: searchers that generate and score rollouts, and how they are launched.

* :mod:`tba_lab.actors.launcher` -- the :class:`Launcher` protocol the trainer talks to
  (``start`` / ``publish`` / ``poll`` / ``restart`` / ``retire`` / ``stop``), the messages
  searchers send (:class:`~tba_lab.rollout.RolloutBatch`, :class:`SearcherFailed`) and
  :func:`make_launcher`.
* :mod:`tba_lab.actors.weights` -- the weight channel from trainer to searchers:
  :class:`SharedWeights` (one flat CPU shared-memory tensor, a name manifest and a version
  counter) and :class:`FlatWeights` (one flat buffer exported once, through CUDA IPC when the
  trainer and the searchers are on GPUs), chosen by :func:`make_weight_channel`.
* :mod:`tba_lab.actors.locks` -- the channel's lock (:class:`FileLock`, ``flock``) and the stop
  flag (:class:`StopFlag`): nothing a killed process can leave held.
* :mod:`tba_lab.actors.searcher` -- the searcher loop (:func:`searcher_main`).
* :mod:`tba_lab.actors.local` -- :class:`LocalLauncher` (``async.launcher: local``), searchers
  as ``torch.multiprocessing`` processes on one machine.
* :mod:`tba_lab.actors.ray_launcher` -- :class:`RayLauncher` (``async.launcher: ray``), searchers
  as Ray actors, on one machine or several.
"""
