"""The placement rule (tba_lab.actors.placement): thread counts from the machine's cores, where
the reference pass runs, and the trainer's reference work per update not growing with the
number of searchers (issue: more searchers, more speed)."""
import json

import pytest

from tba_lab.actors import placement
from tba_lab.config import ConfigError, from_dict


def _cfg(**a):
    return from_dict({"async": a})


@pytest.mark.parametrize("cores, n, trainer, searcher, ref", [
    (2, 1, 1, 1, "trainer"),    # the default run on 2 cores: as before
    (2, 4, 1, 1, "trainer"),    # searchers share the trainer's cores: the trainer scores what it samples
    (8, 4, 4, 1, "searcher"),   # a laptop with 8 cores
    (16, 1, 8, 8, "trainer"),   # one searcher is the bottleneck: it gets half the cores
    (16, 2, 8, 4, "searcher"),
    (16, 4, 8, 2, "searcher"),
    (16, 8, 8, 1, "searcher"),
    (16, 16, 1, 1, "trainer"),  # no core of their own left: 17 processes on 16 cores
    (3, 2, 1, 1, "searcher"),   # exactly one core each
])
def test_threads_split_the_cores_and_the_reference_pass_goes_where_there_is_room(
        cores, n, trainer, searcher, ref):
    p = placement.plan(_cfg(num_searchers=n), cores=cores)
    assert (p.trainer_threads, p.searcher_threads, p.reference_pass) == (trainer, searcher, ref)
    assert n * p.searcher_threads + p.trainer_threads <= max(cores, n + 1)  # never oversubscribed by choice


def test_searchers_on_a_gpu_take_one_thread_and_score_their_own_batches():
    p = placement.plan(_cfg(num_searchers=6, trainer_device="cuda:0", searcher_devices=["cuda:0"]),
                       cores=16)
    assert (p.trainer_threads, p.searcher_threads, p.reference_pass) == (10, 1, "searcher")
    one = placement.plan(_cfg(num_searchers=1, trainer_device="cuda:0"), cores=16)
    assert one.reference_pass == "trainer" and one.searcher_devices == ("cuda:0",)


def test_sync_mode_gives_every_core_to_each_and_explicit_values_win():
    p = placement.plan(_cfg(mode="sync"), cores=16)
    assert (p.trainer_threads, p.searcher_threads) == (16, 16)
    p = placement.plan(_cfg(num_searchers=8, trainer_threads=3, searcher_threads=2,
                            reference_pass="trainer"), cores=16)
    assert (p.trainer_threads, p.searcher_threads, p.reference_pass) == (3, 2, "trainer")
    assert p.reason == "async.reference_pass: trainer"
    applied = placement.apply(_cfg(num_searchers=4), placement.plan(_cfg(num_searchers=4), cores=16))
    assert (applied.async_.trainer_threads, applied.async_.searcher_threads,
            applied.async_.reference_pass) == (8, 2, "searcher")


def test_describe_names_cores_threads_and_the_reference_pass():
    p = placement.plan(_cfg(num_searchers=4), cores=16)
    assert placement.describe(p) == (
        "placement: 16 cores; trainer on cpu with 8 threads; 4 searchers on cpu with 2 threads "
        "each; reference pass in the searchers (auto: 4 searchers, each with a device or core of "
        "its own)")
    assert placement.describe(p, needs_reference=False).endswith("no reference pass (the loss reads none)")
    crowded = placement.describe(placement.plan(_cfg(num_searchers=4), cores=2))
    assert crowded.endswith("; 5 processes share 2 cores, so each added searcher slows every "
                            "process, the trainer too")
    assert "share" not in placement.describe(placement.plan(_cfg(), cores=2))
    assert "share" not in placement.describe(placement.plan(_cfg(mode="sync"), cores=2))


def test_an_unknown_reference_pass_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"async.reference_pass='learner'.*'auto'"):
        _cfg(reference_pass="learner")


def test_four_searchers_on_two_cores_the_trainers_reference_time_is_at_most_half_its_update(
        tmp_path, capsys):
    """With the defaults on this 2-core machine and 4 searchers, the trainer scores only the
    rows it samples (at most one batch per update), so its reference time per update stays a
    fraction of its update time. Before, it scored every row the 4 searchers made (on 16
    cores: 0.43 s against an update of 0.32 s, 2026-12-04)."""
    from tba_lab.config import short_run
    from tba_lab.trainer import train

    cfg = short_run(tmp_path, 120, {"async": {"num_searchers": 4}, "training": {"max_steps": 10}},
                    eval_size=8, interim_eval_size=8, eval_every_seconds=0)
    cores = placement.available_cores()
    summary = train(cfg, progress=True)
    out = capsys.readouterr().out
    assert f"placement: {cores} cores; trainer on cpu" in out and "4 searchers" in out
    where = json.loads((tmp_path / "summary.json").read_text())["placement"]
    if cores < 5:  # the searchers share the trainer's cores: the trainer does the pass
        assert where["reference_pass"] == "trainer"
        rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
        later = rows[1:]
        ref = sorted(r["reference_seconds"] for r in later)[len(later) // 2]
        update = sorted(r["update_seconds"] for r in later)[len(later) // 2]
        assert 0 < ref <= 0.5 * update, (ref, update)
        assert summary["samples_generated"] > summary["trainer_steps"] * 128  # more made than trained
    else:
        assert where["reference_pass"] == "searcher"


def test_the_trainers_reference_scorer_loads_the_reference_only_when_a_row_needs_it():
    """With the searchers doing the pass, the trainer keeps no reference model unless a row
    arrives unscored (a buffer resumed from a run whose trainer did the pass); then it scores
    exactly those rows, once."""
    from tba_lab.buffer import Rollout
    from tba_lab.models import DEFAULT_MODEL_DIR, load_policy
    from tba_lab.trainer import ReferenceScorer

    loads = []

    def load():
        loads.append(1)
        return load_policy(DEFAULT_MODEL_DIR)[0].eval()

    def row(ref):
        return Rollout(prompt_id=0, prompt_ids=[5, 6, 7], response_ids=[8, 9], reward=0.0,
                       ref_token_logps=ref, behaviour_token_logps=[0.0, 0.0], version=0)

    scorer = ReferenceScorer(load, pad_id=0, temperature=0.6, load_now=False)
    scored = [row([-1.0, -2.0]) for _ in range(4)]
    assert scorer(scored) == 0 and loads == []  # every row scored by its searcher
    mixed = scored + [row(None), row(None)]
    assert scorer(mixed) == 2 and loads == [1]
    assert all(r.ref_token_logps is not None and len(r.ref_token_logps) == 2 for r in mixed)
    assert mixed[0].ref_token_logps == [-1.0, -2.0]  # a searcher's scores are kept as they are
    assert mixed[4].ref_token_logps == mixed[5].ref_token_logps  # same pair, same scores
    assert scorer(mixed) == 0 and loads == [1]
    assert ReferenceScorer(load, 0, 0.6, load_now=True).reference is not None and loads == [1, 1]
