"""tba_lab/minimal.py, the one-file asynchronous TBA: its pieces against the library's (so the
two cannot drift apart), its sampler against the exact probabilities, its weight sync, and a
brief run that must learn nothing in particular but leave no process behind."""
import ast
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
import torch

from tba_lab import losses, minimal
from tba_lab.models import load_policy
from tba_lab.rollout.scoring import response_logprobs
from tba_lab.tasks.arithmetic import ArithmeticTask
from tests.test_shutdown import TAG_VAR, RunWatch, assert_nothing_left, kill_searchers

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tba_lab" / "minimal.py"


def test_one_sitting_and_its_own_algorithm():
    """At most 450 lines; from the library only the embedded model, the arithmetic task, the
    usable core count and a searcher's watch on its trainer."""
    assert len(SOURCE.read_text().splitlines()) <= 450
    imported = set()
    for node in ast.walk(ast.parse(SOURCE.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    ours = {m for m in imported if m.startswith("tba_lab")}
    assert ours == {"tba_lab.models", "tba_lab.tasks.arithmetic", "tba_lab.actors.placement",
                    "tba_lab.actors.lifetime", "tba_lab.minimal"}, ours


def test_tb_loss_hand_computed():
    """B = 1, K = 2, beta = 0.5: r / beta = (2, 0), log pi - log pi_ref = (0.5, -0.5),
    log Z = mean(1.5, 0.5) = 1, residuals (-0.5, 0.5), loss 0.25."""
    loss = minimal.trajectory_balance_loss(torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.5]),
                                           torch.tensor([1.0, 0.0]), beta=0.5, k=2)
    assert loss.item() == pytest.approx(0.25)


@pytest.fixture(scope="module")
def batch():
    """A real batch: 4 prompts x 4 responses sampled by minimal's searcher step."""
    torch.manual_seed(0)
    policy, tokenizer = load_policy()
    policy.eval()
    task = ArithmeticTask()
    s = minimal.Settings(num_prompts_per_step=4, num_generations=4)
    rows = minimal.searcher_step(policy, policy, tokenizer, task, task.load("train")[:4],
                                 [10, 11, 12, 13], s, version=7)
    return policy, tokenizer, task, s, rows


def test_searcher_rows(batch):
    policy, tokenizer, task, s, rows = batch
    assert len(rows) == 16 and [r.prompt_id for r in rows] == [10] * 4 + [11] * 4 + [12] * 4 + [13] * 4
    assert all(r.version == 7 for r in rows)
    for r in rows:  # cut after the first EOS, which is kept
        assert tokenizer.eos_token_id not in r.response[:-1]
    texts = tokenizer.batch_decode([r.response for r in rows], skip_special_tokens=True)
    problems = [p for p in task.load("train")[:4] for _ in range(4)]
    assert [r.reward for r in rows] == task.rewards(problems, texts)


def test_sequence_logprobs_and_loss_equal_the_library(batch):
    """The shared-prompt log-probs equal the library's full-row scoring (values and gradients),
    and the TB loss equals tba_lab.losses.trajectory_balance_loss on the same batch."""
    policy, tokenizer, task, s, rows = batch
    prompts, responses = [r.prompt for r in rows], [r.response for r in rows]
    mine = minimal.sequence_logprobs(policy, prompts[::4], responses, tokenizer.pad_token_id, 0.6)
    grad_mine = torch.autograd.grad(mine.sum(), list(policy.parameters()))
    tokens, mask = response_logprobs(policy, prompts, responses, tokenizer.pad_token_id, 0.6,
                                     share_prompts=False)
    theirs = (tokens * mask).sum(1)
    grad_theirs = torch.autograd.grad(theirs.sum(), list(policy.parameters()))
    torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-4)
    for a, b in zip(grad_mine, grad_theirs):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)  # float32 sums in another order
    ref = torch.tensor([r.ref_logp for r in rows])
    torch.testing.assert_close(ref, theirs.detach(), rtol=1e-5, atol=1e-4)  # reference = policy here
    rewards = torch.tensor([r.reward for r in rows])
    logp = mine.detach() + torch.linspace(-1, 1, 16)  # away from the optimum
    want, _ = losses.trajectory_balance_loss(logp, ref, rewards, 0.1, 4)
    got = minimal.trajectory_balance_loss(logp, ref, rewards, 0.1, 4)
    torch.testing.assert_close(got, want)


def test_trainer_step_moves_the_policy_along_the_tb_gradient(batch):
    policy, tokenizer, task, s, rows = batch
    before = [p.detach().clone() for p in policy.parameters()]
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3, weight_decay=0.0)
    loss = minimal.trainer_step(policy, opt, rows, s, tokenizer.pad_token_id)
    assert loss > 0 and any(not torch.equal(a, p) for a, p in zip(before, policy.parameters()))
    with torch.no_grad():  # put the weights back for the other tests of this module
        for a, p in zip(before, policy.parameters()):
            p.copy_(a)


class R:  # a row as the sampler sees it
    def __init__(self, reward, tag):
        self.reward, self.tag = reward, tag


def test_sampler_matches_the_exact_probabilities():
    """Prompt of a batch's first slot: m / |fresh| + (1 - m) / |prompts| for a fresh prompt,
    (1 - m) / |prompts| otherwise; reward mode's first row softmax(inv_temp * r); recency
    mode's rows the K newest; a short group topped up to K; no prompt twice in a batch."""
    groups = {p: [R(float(i % 2), (p, i)) for i in range(5)] for p in range(4)}
    groups[4] = [R(1.0, (4, 0))]  # one row only: topped up
    fresh, m, beta_inv, n = {1, 4}, 0.6, 2.0, 6000
    rng = random.Random(0)
    first_prompt, first_row = [0] * 5, {i: 0 for i in range(5)}
    for _ in range(n):
        b = minimal.sample_batch(groups, fresh, 5, 3, m, beta_inv, rng)
        assert len(b) == 15 and len({r.tag[0] for r in b[::3]}) == 5  # every prompt once
        for g in range(5):
            assert len({r.tag[0] for r in b[3 * g:3 * g + 3]}) == 1
        first_prompt[b[0].tag[0]] += 1
        if b[0].tag[0] == 0:  # never fresh: reward mode
            first_row[b[0].tag[1]] += 1
        if b[0].tag[0] == 1 and [r.tag[1] for r in b[:3]] == [2, 3, 4]:
            first_row.setdefault("newest", 0)
            first_row["newest"] += 1
    for p in range(5):
        want = (m / len(fresh) if p in fresh else 0) + (1 - m) / 5
        se = (want * (1 - want) / n) ** 0.5
        assert abs(first_prompt[p] / n - want) < 5 * se, (p, first_prompt[p] / n, want)
    w = minimal.reward_weights(groups[0], beta_inv)
    n0 = sum(first_row[i] for i in range(5))
    for i in range(5):
        se = (w[i] * (1 - w[i]) / n0) ** 0.5
        assert abs(first_row[i] / n0 - w[i]) < 5 * se, (i, first_row[i] / n0, w[i])
    # prompt 1 is fresh: recency mode (probability m / 2 + ...) takes its 3 newest rows
    assert first_row["newest"] / n > 0.8 * m / len(fresh)
    short = minimal.sample_batch({4: groups[4]}, set(), 1, 3, 0.0, 0.0, rng)
    assert [r.tag for r in short] == [(4, 0)] * 3


def test_buffer_keeps_the_newest_rows_of_the_most_recent_prompts():
    buf = minimal.ReplayBuffer(capacity=2, max_prompts=2)
    row = lambda p, i: minimal.Row(p, [1], [2], 0.0, 0.0, i)  # noqa: E731
    buf.add([row(0, 0), row(0, 1), row(0, 2), row(1, 0)])
    assert [r.version for r in buf.groups[0]] == [1, 2] and buf.fresh == {0, 1}
    buf.mark_sync()
    buf.add([row(2, 0)])  # a third prompt: prompt 0, refreshed least recently, is forgotten
    assert list(buf.groups) == [1, 2] and buf.fresh == {2} and len(buf) == 2


def test_sampler_survives_a_softmax_that_underflows():
    """inv_temp 1000 on 0/1 rewards (and 200 on rewards in [-5, 0]): every weight but the best
    is exactly 0 (after muzero-general#111). Drawn without replacement, the next rows follow
    the softmax of the rows left: the best of those, never an error."""
    for rewards, inv_temp in (([0.0, 1.0, 0.0, 0.0], 1000.0), ([-5.0, -0.5, -3.0, -4.0], 200.0)):
        groups = {0: [R(r, i) for i, r in enumerate(rewards)]}
        rows = minimal.sample_batch(groups, set(), 1, 3, 0.0, inv_temp, random.Random(0))
        best = sorted(range(4), key=lambda i: -rewards[i])
        assert [r.tag for r in rows][0] == best[0] and len({r.tag for r in rows}) == 3
        if len(set(rewards)) == 4:  # distinct rewards: the order is the rewards' order
            assert [r.tag for r in rows] == best[:3]


def test_buffer_stores_copies_of_the_rows_it_is_given():
    """A producer that edits and adds its row again stores two rows (after Muesli-lunarlander#1)."""
    buf, row = minimal.ReplayBuffer(capacity=4, max_prompts=2), minimal.Row(0, [1], [2], 0, 0, 0)
    buf.add([row])
    row.response.append(3)
    row.reward = 1.0
    buf.add([row])
    assert [(r.response, r.reward) for r in buf.groups[0]] == [([2], 0.0), ([2, 3], 1.0)]


@pytest.mark.parametrize("value", ["nan", "inf", "0"])
def test_minutes_must_be_finite_and_positive(value, capsys, monkeypatch):
    def train(settings):  # an accepted value would train for ever (inf) or not at all
        raise AssertionError(f"--minutes {value} was accepted")

    monkeypatch.setattr(minimal, "train", train)
    with pytest.raises(SystemExit):
        minimal.main(["--minutes", value])
    assert "--minutes: finite and > 0" in capsys.readouterr().err


def test_weight_sync_publishes_versions_and_never_returns_a_torn_copy():
    source, _ = load_policy()
    target, _ = load_policy()
    with torch.no_grad():
        for p in source.parameters():
            p.add_(1.0)
    weights = minimal.SharedWeights(source)
    assert weights.pull(target, -1) == -1  # nothing published yet
    weights.publish(source, 3)
    assert weights.pull(target, 2) == 3
    assert all(torch.equal(a, b) for a, b in zip(source.parameters(), target.parameters()))
    weights.flat.add_(1.0)  # changed without a new version: a pull must not copy it
    assert weights.pull(target, 3) == 3
    assert all(torch.equal(a, b) for a, b in zip(source.parameters(), target.parameters()))
    weights.version.value, weights.writes.value = 4, weights.writes.value + 1  # a publish under way
    done = threading.Timer(0.2, lambda: setattr(weights.writes, "value", weights.writes.value + 1))
    t0 = time.time()
    done.start()
    assert weights.pull(target, 3) == 4 and time.time() - t0 >= 0.2  # waited for the copy
    assert torch.equal(torch.nn.utils.parameters_to_vector(target.parameters()), weights.flat)


def _ours(marker: str) -> list:
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("TBA_MINIMAL_TEST") == marker:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def _start(marker: str, minutes: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tba_lab.minimal", "--minutes", str(minutes), "--eval-size", "20",
         "--seed", "3"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "TBA_MINIMAL_TEST": marker, TAG_VAR: marker}, start_new_session=True,
        # a shell's background job (`pytest ... &`) ignores SIGINT and its children inherit it:
        # give the run Python's Ctrl-C, as in a terminal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_a_brief_run_trains_and_leaves_no_process():
    marker = uuid.uuid4().hex
    proc = _start(marker, 0.3)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    last = out.strip().splitlines()[-1]
    m = re.fullmatch(r"tb/async on arithmetic: held-out accuracy [\d.]+% -> [\d.]+% in (\d+) "
                     r"updates, \d+ s \(\d+ samples, staleness mean [\d.]+\)", last)
    assert m and int(m.group(1)) > 0, last
    assert not _ours(marker)


def test_ctrl_c_stops_every_searcher():
    marker = uuid.uuid4().hex
    proc = _start(marker, 5)
    for line in proc.stdout:  # training has begun once the first evaluation is printed
        if line.startswith("held-out accuracy before"):
            break
    time.sleep(3)
    assert len(_ours(marker)) >= 2  # the trainer and its searcher (and spawn's tracker)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole process group
    proc.communicate(timeout=60)
    deadline = time.time() + 10
    while _ours(marker) and time.time() < deadline:
        time.sleep(0.2)
    assert not _ours(marker)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_the_searcher_ends_with_its_trainer(sig):
    """``kill PID`` (SIGTERM) or the OOM killer (SIGKILL) ends the trainer alone once its
    searcher runs: within a few seconds of the trainer's exit no process of the run is left
    (not even the resource tracker) and none of its named semaphores is in /dev/shm."""
    marker = uuid.uuid4().hex
    proc = _start(marker, 5)
    with RunWatch(proc.pid) as watch:
        for line in proc.stdout:  # training has begun once the first evaluation is printed
            if line.startswith("held-out accuracy before"):
                break
        time.sleep(3)
        watch.sample()
        assert watch.searcher_pids() and proc.poll() is None, watch.seen
        os.kill(proc.pid, sig)
        proc.wait(timeout=60)  # not communicate(): a searcher left alive holds the pipe open
    proc.stdout.close()
    t_exit = time.time()
    try:
        assert_nothing_left(watch, marker, within=5.0, unheld=False)
    finally:
        kill_searchers(watch)
    assert not _ours(marker)
    print(f"{signal.Signals(sig).name}: exit code {proc.returncode}, the rest gone "
          f"{time.time() - t_exit:.1f} s later")
