"""The lab: the course and the analysis tools, built on the library core.

The core (``config``, ``trainer``, ``runlog``, ...) never imports from here; only the command
line does (``tba-lab reproduce``, ``tba-lab experiment``, ``tba-lab course``).

* :mod:`~tba_lab.lab.course` -- the exercises of notebooks 01-10 (stubs, references, checker).
* :mod:`~tba_lab.lab.timeline` -- who was busy when, from a run's logs (notebooks 04, 05, 10).
* :mod:`~tba_lab.lab.simulate`, :mod:`~tba_lab.lab.recorded` -- the searcher / trainer
  simulator and its scaling prediction, and the timings recorded on bigger hardware.
* :mod:`~tba_lab.lab.widgets`, :mod:`~tba_lab.lab.runs`, :mod:`~tba_lab.lab.live` -- the
  explorer of notebook 06, its runs on disk, and a run in a background thread with live redraws.
* :mod:`~tba_lab.lab.reproduce`, :mod:`~tba_lab.lab.assignments`, :mod:`~tba_lab.lab.site` --
  every notebook run headless, the course as nbgrader assignments, and as a static website.
* :mod:`~tba_lab.lab.experiments` -- the paper's claims over seeds (``tba-lab experiment``).
"""
