"""Asynchronous actors: searchers that generate and score rollouts, and how they are launched.

* :mod:`tba_lab.actors.weights` -- :class:`SharedWeights`, the weight channel from trainer to
  searchers (one flat shared-memory tensor plus a version counter; no pickling of the model).
* :mod:`tba_lab.actors.searcher` -- the searcher loop (:func:`searcher_main`).
* :mod:`tba_lab.actors.local` -- :class:`LocalLauncher`, searchers as ``torch.multiprocessing``
  processes on one machine (the seam where a Ray launcher plugs in).
"""
