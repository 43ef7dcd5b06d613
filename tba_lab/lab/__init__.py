"""The lab: the course and the analysis tools, built on the library core.

The core (``config``, ``registry``, ``paths``, ``losses``, ``algorithms``, ``buffer``,
``rollout``, ``actors``, ``tasks``, ``trainer``, ``runlog``, ``eval``, ``models``) never imports
from here; only the command line does (``tba-lab reproduce``, ``tba-lab experiment``).

* :mod:`tba_lab.lab.course` -- the exercises of notebooks 01-10 (stubs, references, the
  checker; the worked solutions are in the notebooks) and the exact-pi* toy of notebook 02.
* :mod:`tba_lab.lab.timeline` -- who was busy when, from a run's logs (notebook 04).
* :mod:`tba_lab.lab.simulate` -- an event simulator of the searcher / trainer timeline
  (notebook 05).
* :mod:`tba_lab.lab.predict` -- the simulator calibrated on one machine's 1-searcher runs,
  checked on its runs with more searchers, predicting the automatic placement there
  (``bench/predict_scaling.py``).
* :mod:`tba_lab.lab.recorded` -- timings recorded on bigger hardware (one H200, 16 cores).
* :mod:`tba_lab.lab.widgets` -- the ipywidgets explorer (notebook 06).
* :mod:`tba_lab.lab.runs` -- the explorer's runs on disk: table, comparison, YAML export.
* :mod:`tba_lab.lab.live` -- a training run in a background thread with live redraws.
* :mod:`tba_lab.lab.reproduce` -- every notebook run headless with papermill (``tba-lab reproduce``).
* :mod:`tba_lab.lab.assignments` -- the course as nbgrader assignments: the students' copies
  and the grading of their submissions (``tba-lab course release``, ``tba-lab course grade``).
* :mod:`tba_lab.lab.site` -- the course as a static website (``make site``).
* :mod:`tba_lab.lab.experiments` -- the paper's claims over seeds, with reports
  (``tba-lab experiment NAME``; notebook 07 reads their recorded results).
"""
