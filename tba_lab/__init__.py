"""tba-lab: asynchronous off-policy RL post-training of language models with trajectory balance.

A teaching kit and compact library after Bartoldson et al., "Trajectory Balance with Asynchrony"
(TBA, arXiv 2503.18929). Start with ``tba-lab train`` (docs/usage.md) or the notebooks.
"""
__version__ = "0.1.0"
