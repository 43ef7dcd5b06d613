"""The weight channel's lock and the launcher's stop flag, across real spawned processes: a holder
killed with SIGKILL releases the lock, readers share it and the writer excludes them, the
lock's file goes with its owner, and the stop flag reaches a searcher (tba_lab/actors/locks.py).
"""
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from tba_lab.actors.locks import LOCK_PREFIX, FileLock, StopFlag
from tba_lab.actors.weights import FlatWeights, SharedWeights
from tests.test_cuda_weights import Mixed, digest, fill, puller

CTX = mp.get_context("spawn")


# ------------------------------------------------------------------ children (spawned: importable)
def hold_and_die(lock, shared: bool) -> None:
    """Take ``lock`` and kill this process with SIGKILL while holding it."""
    with lock.shared() if shared else lock.exclusive():
        os.kill(os.getpid(), signal.SIGKILL)


def hold_shared(lock, held, release) -> None:
    """Hold ``lock`` shared from ``held.set()`` until ``release`` is set (at most 300 s)."""
    with lock.shared():
        held.set()
        release.wait(300)


def die_in_pull(weights) -> None:
    """Pull from ``weights`` with the copy under the lock replaced by SIGKILL."""
    def killed(self, *args):
        os.kill(os.getpid(), signal.SIGKILL)

    type(weights)._copy_out = killed
    weights.pull(-1)


def wait_for_stop(flag) -> None:
    """Return once ``flag`` is set (at most 60 s, else exit code 3)."""
    deadline = time.monotonic() + 60
    while not flag.is_set():
        if time.monotonic() > deadline:
            raise SystemExit(3)
        time.sleep(0.001)


def use_lock_after_close(lock) -> None:
    """Exit 0 when taking ``lock`` raises FileNotFoundError (its owner removed the file)."""
    try:
        with lock.shared():
            pass
    except FileNotFoundError:
        raise SystemExit(0)
    raise SystemExit(4)


# ------------------------------------------------------------------ helpers
def _run_child(target, *args, timeout: float = 120.0) -> int:
    p = CTX.Process(target=target, args=args, daemon=True)
    p.start()
    p.join(timeout)
    if p.is_alive():
        p.kill()
        pytest.fail(f"{target.__name__} did not finish within {timeout:g} s")
    return p.exitcode


def _take(lock) -> None:
    with lock.exclusive():
        pass


def _finishes(fn, seconds: float) -> bool:
    """Whether ``fn()`` returns within ``seconds`` (run in a daemon thread)."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(seconds)
    return not t.is_alive()


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("shared", [True, False], ids=["shared", "exclusive"])
def test_a_holder_killed_by_sigkill_releases_the_lock(shared):
    lock = FileLock()
    try:
        assert _run_child(hold_and_die, lock, shared) == -signal.SIGKILL
        assert _finishes(lambda: _take(lock), 10.0), "the lock stayed held by a dead process"
    finally:
        lock.close()


def test_readers_share_the_lock_and_the_writer_waits_for_them():
    lock = FileLock()
    held, release = [CTX.Event(), CTX.Event()], CTX.Event()
    readers = [CTX.Process(target=hold_shared, args=(lock, h, release), daemon=True) for h in held]
    try:
        for r in readers:
            r.start()
        assert all(h.wait(120) for h in held), "two readers could not hold the lock at once"
        written = threading.Event()

        def write():
            with lock.exclusive():
                written.set()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        assert not written.wait(0.5), "the writer got the lock while two readers held it"
        release.set()
        assert written.wait(30), "the writer never got the lock after the readers let go"
        for r in readers:
            r.join(30)
            assert r.exitcode == 0
    finally:
        release.set()
        for r in readers:
            if r.is_alive():
                r.kill()
        lock.close()


def test_the_owner_removes_the_file_and_a_child_cannot_use_it_afterwards():
    lock = FileLock()
    path = Path(lock.path)
    assert path.exists() and path.name.startswith(f"{LOCK_PREFIX}{os.getpid()}-")
    with lock.shared():  # the owner uses it too
        pass
    assert _run_child(hold_shared_briefly, lock) == 0
    assert path.exists(), "a child's close removed its owner's file"
    lock.close()
    lock.close()  # idempotent
    assert not path.exists()
    assert _run_child(use_lock_after_close, lock) == 0

    forgotten = FileLock()  # never closed: removed when collected
    path = Path(forgotten.path)
    del forgotten
    assert not path.exists()


def hold_shared_briefly(lock) -> None:
    """Take ``lock`` shared once, then close it (a searcher's channel at its exit)."""
    with lock.shared():
        pass
    lock.close()


@pytest.mark.parametrize("cls", [SharedWeights, FlatWeights])
def test_a_searcher_killed_in_its_pull_does_not_block_publish(cls):
    """The copy a pull makes under the lock is where a searcher runs out of memory; killed
    there, it must not keep the trainer from publishing or another searcher from pulling."""
    model = Mixed() if cls is FlatWeights else torch.nn.Linear(5, 3)
    weights = cls(model, CTX)
    try:
        assert _run_child(die_in_pull, weights) == -signal.SIGKILL
        fill(model, 7)
        assert _finishes(lambda: weights.publish(model, 1), 10.0), \
            "publish waited for a lock the dead searcher held"
        commands, results = CTX.Queue(), CTX.Queue()
        child = CTX.Process(target=puller, args=(weights, commands, results), daemon=True)
        child.start()
        commands.put("pull")
        version, got, *_ = results.get(timeout=120)
        commands.put("stop")
        child.join(30)
        assert (version, got) == (1, digest(model.named_parameters()))
    finally:
        weights.close()


def test_the_stop_flag_reaches_a_spawned_process():
    flag = StopFlag(CTX)
    child = CTX.Process(target=wait_for_stop, args=(flag,), daemon=True)
    child.start()
    time.sleep(0.2)
    assert child.is_alive() and not flag.is_set()
    flag.set()
    child.join(30)
    assert flag.is_set() and child.exitcode == 0
