"""The race's bookkeeping (bench/race.py): time to target, accuracy at a checkpoint, ratios.

The legs themselves are measured by running the script, not in tests (timing is not a test)."""
import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("race", Path(__file__).parents[1] / "bench" / "race.py")
race = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(race)

EVALS = [{"wall_seconds": 0.0, "step": 0, "accuracy": 0.35},
         {"wall_seconds": 61.2, "step": 100, "accuracy": 0.39},
         {"wall_seconds": 122.0, "step": 200, "accuracy": 0.41},
         {"wall_seconds": 180.5, "step": 300, "accuracy": 0.40}]


def test_time_to_target_and_accuracy_at():
    assert race.time_to_target(EVALS, 0.40) == 122.0
    assert race.time_to_target(EVALS, 0.35) == 0.0
    assert race.time_to_target(EVALS, 0.5) is None
    assert race.accuracy_at(EVALS, 60) == 0.39  # the 61.2-s evaluation belongs to the 60-s tick
    assert race.accuracy_at(EVALS, 120) == 0.41
    assert race.accuracy_at(EVALS[1:], 30) is None


def test_table_and_ratios():
    row = lambda updates, samples: {"updates": updates, "samples_generated": samples,
                                    "wall_seconds": 180.0, "accuracy_before": 0.35,
                                    "accuracy_after": 0.40, "evals": EVALS,
                                    "staleness_mean": 0.0, "staleness_max": 0}
    results = {"a": row(300, 38400), "b": row(240, 30720), "c": row(360, 46080), "e": row(150, 19200)}
    text = race.ratios(results)
    assert "(c)/(b) async TBA / sync TB: updates/min 1.50x" in text
    assert "(c)/(a) async TBA / sync GRPO: updates/min 1.20x" in text
    assert "(a)/(e) sync GRPO / TRL GRPOTrainer: updates/min 2.00x" in text
    table = race.table(results, minutes=3, eval_every=60, target=0.40)
    assert "| (a) sync GRPO | 100.0 | 12800 | 0.0/0 | 35.0% | 39.0% | 41.0% | 40.0% | 122 s |" in table
