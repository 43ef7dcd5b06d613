"""Non-finite numbers never reach an optimizer step, a published weight or a saved file (issue
34, part 1): a NaN log-prob is dropped and counted where it enters, a non-finite update is
skipped and counted (and MAX_NONFINITE_UPDATES in a row stop the run), and non-finite weights
are neither published nor saved."""
from __future__ import annotations

import json
import math
import multiprocessing

import pytest
import torch

from tba_lab.config import from_dict
from tba_lab.registry import LAUNCHERS
from tba_lab.rollout.backend import Generations, TransformersBackend


class _NanBackend(TransformersBackend):
    """Samples as the Transformers backend, then (while ``inject``) makes one token's log-prob
    NaN (what a vLLM engine returned in TRL PR 5001)."""

    inject = False

    def generate(self, *args, **kwargs) -> Generations:
        gen = super().generate(*args, **kwargs)
        if self.inject:
            gen.token_logps[0][0] = math.nan
        return gen


@LAUNCHERS.register
class InProcessNanLauncher:
    """One searcher inside the trainer's process: each poll is one rollout() batch, with a NaN
    behaviour log-prob made by the backend (odd polls: rollout() must drop it) or put into the
    finished message (even polls: the trainer's intake must drop it)."""

    name = "nan_logprob_test"

    def __init__(self, cfg, model, use_reference: bool):
        from tba_lab.models import load_policy
        from tba_lab.tasks import make_task

        self.cfg, self.polls, self.version = cfg, 0, 0
        self.task = make_task(cfg)
        self.problems = self.task.load("train")
        policy, tokenizer = load_policy(cfg.model.path)
        self.backend = _NanBackend(policy.eval(), tokenizer)

    def start(self):
        pass

    def publish(self, model, version: int) -> None:
        self.backend.load_weights(model.named_parameters())
        self.version = version

    def poll(self, timeout: float = 0.0) -> list:
        from tba_lab.rollout.collect import rollout

        self.polls += 1
        self.backend.inject = self.polls % 2 == 1
        tr = self.cfg.training
        start = (self.polls * tr.num_prompts_per_step) % (len(self.problems) - tr.num_prompts_per_step)
        ids = list(range(start, start + tr.num_prompts_per_step))
        with torch.random.fork_rng():
            batch = rollout(self.backend, self.task, [self.problems[i] for i in ids],
                            tr.num_generations, self.cfg.model.temperature,
                            self.cfg.model.max_new_tokens, version=self.version, problem_ids=ids)
        if self.polls % 2 == 0:  # a message that bypassed rollout()'s check
            batch.rollouts[0].behaviour_token_logps[-1] = math.nan
        return [batch]

    def restart(self, searcher_id: int) -> None:
        pass

    def retire(self, searcher_id: int) -> None:
        pass

    def stop(self) -> None:
        pass


def _config(tmp_path, steps: int, **overrides):
    data = {"output_dir": str(tmp_path / "run"), "algo": "grpo", "max_minutes": 2.0,
            "model": {"max_new_tokens": 8},
            "training": {"max_steps": steps, "num_prompts_per_step": 2, "num_generations": 4,
                         "save_seconds": 0, "learning_rate": 1e-3},
            "buffer": {"initial_fill": 8},
            "async": {"launcher": "nan_logprob_test"},
            "task": {"eval_size": 2, "interim_eval_size": 2, "eval_every_seconds": 0}}
    for section, values in overrides.items():
        data.setdefault(section, {}).update(values)
    return from_dict(data)


def _all_finite(tensors) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())


def test_a_nan_logprob_is_dropped_and_counted_and_the_weights_stay_finite(tmp_path):
    from tba_lab.trainer import train

    with pytest.warns(RuntimeWarning, match="NaN or infinite behaviour or reference log-prob"):
        summary = train(_config(tmp_path, steps=3), progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "searchers.jsonl").open()]
    # every message lost exactly its one NaN row (in rollout() or at the trainer's intake)
    assert len(rows) >= 3 and all(r["nonfinite_logprobs"] == 1 and r["rollouts"] == 7 for r in rows)
    assert summary["nonfinite_logprobs"] == len(rows) and summary["nonfinite_rewards"] == 0
    assert summary["trainer_steps"] == 3 and summary["nonfinite_updates"] == 0
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert all(math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) for m in metrics)
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert state["step"] == 3 and _all_finite(state["policy"].values())
    buffered = [r for _, rows in state["buffer"]["items"] for r in rows]
    assert buffered and all(math.isfinite(x) for r in buffered for x in r["behaviour_token_logps"])


def test_nonfinite_updates_are_skipped_and_five_in_a_row_stop_the_run(tmp_path, monkeypatch):
    import tba_lab.trainer as trainer
    from tba_lab.trainer import MAX_NONFINITE_UPDATES, NonFiniteUpdateError, train

    real = trainer.compute_loss
    calls = []

    def nan_on(which):
        def compute_loss(*args, **kwargs):  # the loss times NaN: every gradient NaN too
            loss, info = real(*args, **kwargs)
            calls.append(len(calls) + 1)
            return (loss * math.nan if which(len(calls)) else loss), info
        return compute_loss

    # one bad update among good ones: skipped (no optimizer step), counted, the run completes
    monkeypatch.setattr(trainer, "compute_loss", nan_on(lambda n: n == 2))
    with pytest.warns(RuntimeWarning):  # the NaN log-prob rows of the launcher above
        summary = train(_config(tmp_path / "a", steps=4), progress=False)
    assert summary["trainer_steps"] == 4 and summary["nonfinite_updates"] == 1
    metrics = [json.loads(line) for line in (tmp_path / "a" / "run" / "metrics.jsonl").open()]
    assert [m["step"] for m in metrics] == [1, 3, 4]  # update 2 was skipped: no row
    state = torch.load(tmp_path / "a" / "run" / "checkpoint.pt", weights_only=True)
    assert _all_finite(state["policy"].values())
    assert state["optimizer"]["state"][0]["step"].item() == 3  # AdamW stepped 3 times, not 4

    # every update bad from step 2 on: MAX_NONFINITE_UPDATES in a row stop the run with a clear
    # error; the weights after update 1 (the last finite state) are saved
    assert MAX_NONFINITE_UPDATES == 5
    calls.clear()
    monkeypatch.setattr(trainer, "compute_loss", nan_on(lambda n: n >= 2))
    with pytest.warns(RuntimeWarning), pytest.raises(
            NonFiniteUpdateError, match=r"5 updates in a row \(up to step 6\) had a NaN or infinite"):
        train(_config(tmp_path / "b", steps=20), progress=False)
    summary = json.loads((tmp_path / "b" / "run" / "summary.json").read_text())
    assert summary["nonfinite_updates"] == 5 and summary["error"].startswith("NonFiniteUpdateError")
    state = torch.load(tmp_path / "b" / "run" / "checkpoint.pt", weights_only=True)
    assert _all_finite(state["policy"].values())
    assert state["optimizer"]["state"][0]["step"].item() == 1
    assert (tmp_path / "b" / "run" / "policy").is_dir()


def test_nonfinite_weights_are_never_published_or_saved(tmp_path, tiny):
    import copy

    from tba_lab.actors.weights import FlatWeights, SharedWeights
    from tba_lab.checkpoint import atomic_torch_save, checkpoint_path, load_checkpoint, save_checkpoint
    from tba_lab.trainer import _save_policy_and_buffer
    from tba_lab.buffer import ReplayBuffer

    model, tok, _ = tiny
    bad = copy.deepcopy(model)
    with torch.no_grad():
        next(bad.parameters()).view(-1)[3] = math.nan
    name = next(n for n, _ in bad.named_parameters())
    (tmp_path / "old").mkdir()
    ctx = multiprocessing.get_context("spawn")
    for channel in (SharedWeights(model, ctx), FlatWeights(model, ctx)):
        channel.publish(model, 1)
        with pytest.raises(FloatingPointError, match=f"refusing to publish weights version 2: 1 weight "
                                                     f"tensor\\(s\\) hold NaN or inf \\({name}\\)"):
            channel.publish(bad, 2)
        assert channel.version.value == 1  # the searchers keep version 1
        channel.close()
    save_checkpoint(tmp_path, {"step": 1, "policy": model.state_dict(), "algorithm": []})
    before = checkpoint_path(tmp_path).read_bytes()
    log_z = torch.tensor([math.inf])
    for policy, algorithm in ((bad, []), (model, [log_z])):
        with pytest.raises(FloatingPointError, match="refusing to save checkpoint.pt"):
            save_checkpoint(tmp_path, {"step": 2, "policy": policy.state_dict(), "algorithm": algorithm})
    assert checkpoint_path(tmp_path).read_bytes() == before  # the last finite checkpoint stays
    atomic_torch_save({"format": 1, "step": 2, "policy": bad.state_dict()},
                      tmp_path / "old" / "checkpoint.pt")
    with pytest.raises(FloatingPointError, match="refusing to resume from .*old/checkpoint.pt"):
        load_checkpoint(tmp_path / "old")  # written before such states were refused
    with pytest.raises(FloatingPointError, match="refusing to save policy/"):
        _save_policy_and_buffer(tmp_path, bad, tok, ReplayBuffer())
    assert not (tmp_path / "policy").exists()


def test_rows_the_trainer_scores_to_nan_and_saved_nan_rows_leave_the_buffer(tmp_path):
    from tba_lab.buffer import ReplayBuffer, Rollout
    from tba_lab.rollout.collect import RolloutBatch
    from tba_lab.runlog import RunLog
    from tba_lab.trainer import Feed

    cfg = _config(tmp_path, steps=1)
    rows = [Rollout(prompt_id=n // 4, prompt_ids=[5, 6], response_ids=[7, n], reward=float(n % 2),
                    ref_token_logps=None, behaviour_token_logps=[-1.0, -2.0], version=0)
            for n in range(8)]

    class OneBatch:  # a launcher with one message waiting
        def poll(self, timeout=0.0):
            out, self.out = getattr(self, "out", [RolloutBatch(rows, [""] * 8, version=0)]), []
            return out

    def score(batch):  # the trainer's reference pass, NaN for one row (once per row)
        todo = [r for r in batch if r.ref_token_logps is None]
        for r in todo:
            r.ref_token_logps = [math.nan if r is rows[5] else -1.5, -1.5]
        return len(todo)

    buffer, log = ReplayBuffer(recency_prob=0.0), RunLog(cfg, progress=False)
    feed = Feed(cfg, OneBatch(), buffer, log, score_reference=score)
    assert feed.next_batch(0) is None  # the sampled batch held the row: it is not trained on
    assert len(buffer) == 7 and log.summary["nonfinite_logprobs"] == 1
    assert all(r is not rows[5] for dq in buffer._items.values() for r in dq)

    state = buffer.state_dict()  # as a buffer saved before such rows were refused
    state["items"][0][1][0]["behaviour_token_logps"][1] = math.inf
    with pytest.warns(RuntimeWarning, match="1 rows with a NaN or infinite log-prob dropped"):
        buffer.load_state_dict(state)
    assert len(buffer) == 6
    log.close(0)
