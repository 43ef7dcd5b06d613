"""Two inter-process primitives that a killed process cannot leave held: the weight channel's
lock (:class:`FileLock`) and the local launcher's stop request (:class:`StopFlag`).

Why not ``multiprocessing``'s ``Lock`` and ``Event``: both are POSIX semaphores, and a process
that ends while it holds one (SIGKILL, the OOM killer, the launcher's own SIGTERM of a stalled
searcher) never gives it back. Two ways a run then hangs:

* a searcher killed while it copies the weights out of the channel (that copy allocates a
  model-sized tensor, which is exactly when the OOM killer strikes): the trainer's next
  ``publish`` waits for the lock, and the restarted searcher's first pull too. Ctrl-C or
  SIGTERM end that wait (and the run, with its saves); a run nobody watches (papermill, a
  background job) waits for good;
* a searcher killed inside ``Event.is_set()`` (it takes the event's lock to read the flag):
  every later ``is_set()`` and ``set()`` waits, and the trainer's shutdown sets the event with
  Ctrl-C and SIGTERM ignored (so that its final saves run to the end): only SIGKILL ends it,
  and the final saves are lost. The window is short (a few microseconds per check) but the
  searchers check often.

Here the kernel does the bookkeeping instead. :class:`FileLock` is ``flock(2)`` on a small file:
a lock belongs to an open file, and a process's files are closed when it ends, however it
ends. :class:`StopFlag` is one shared byte, read without any lock.

Linux and macOS (``fcntl``); the kit's multi-process runs are not supported on Windows.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import weakref

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

LOCK_PREFIX = "tba-lab-lock-"  # the files: tempfile.gettempdir() / "tba-lab-lock-<pid>-<random>"


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class FileLock:
    """A readers-writer lock between the processes of one machine, on ``flock(2)``.

    The process that builds it (the trainer) creates an empty file
    ``tba-lab-lock-<pid>-<random>`` in the temporary directory (``tempfile.gettempdir()``) and
    removes it in :meth:`close` (or when the object is garbage-collected or the process exits
    normally); a spawned child that closes it after its parent, the owner, died (a searcher
    exiting on its own after a SIGKILL of the trainer) removes it instead. The lock travels to
    a spawned child as that path; each process opens the file itself at first use, so no two
    processes share an open file (and so a lock). Within one process a ``threading.Lock``
    serialises users, because ``flock`` does not exclude two threads of one process.

    ``shared()``: several holders at once (searchers copying the weights out); ``exclusive()``:
    one holder and no shared ones (the trainer writing new weights). Both block in the kernel
    (no polling) and are released when the holder's process ends.

    Not cleaned up: a trainer killed with SIGKILL together with its searchers (a whole process
    group) leaves its empty file behind, as it leaves ``multiprocessing``'s named semaphores in
    ``/dev/shm``.

    Raises:
        RuntimeError: on a platform without ``fcntl`` (Windows), at first use.
        FileNotFoundError: in a child, at first use, when the owner already removed the file
            (it closed the channel).
    """

    def __init__(self):
        fd, self.path = tempfile.mkstemp(prefix=f"{LOCK_PREFIX}{os.getpid()}-")
        self._fd: int | None = fd
        self._owner = os.getpid()
        self._local = threading.Lock()
        self._finalizer = weakref.finalize(self, _remove, self.path)

    def __getstate__(self):
        return {"path": self.path, "_owner": self._owner}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._fd, self._local, self._finalizer = None, threading.Lock(), None

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR)  # never O_CREAT: a lock of its own is no lock
        return self._fd

    @contextlib.contextmanager
    def _hold(self, shared: bool):
        if fcntl is None:
            raise RuntimeError("tba_lab.actors.locks.FileLock needs fcntl (Linux or macOS); "
                               "multi-process runs are not supported on this platform")
        with self._local:
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def shared(self):
        """Context manager: hold the lock shared (readers)."""
        return self._hold(shared=True)

    def exclusive(self):
        """Context manager: hold the lock alone (the writer)."""
        return self._hold(shared=False)

    def close(self) -> None:
        """Close this process's file; the owner, or a child whose parent (the owner) has
        died, also removes it. Idempotent."""
        with self._local:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        if os.getpid() == self._owner or _orphaned(self._owner):
            _remove(self.path)
            if self._finalizer is not None:
                self._finalizer.detach()


def _orphaned(owner: int) -> bool:
    """This is a spawned child of process ``owner``, and ``owner`` has ended (judged by the
    parent's sentinel, so a reused pid does not count as alive)."""
    import multiprocessing

    parent = multiprocessing.parent_process()
    return parent is not None and parent.pid == owner and not parent.is_alive()


class StopFlag:
    """A stop request from the trainer to its spawned searchers: one byte of shared memory,
    set once, read without a lock (``threading.Event``'s ``set``/``is_set``).

    Args:
        ctx: the ``torch.multiprocessing`` spawn context the searchers are started with (the
            flag reaches them with their arguments).
    """

    def __init__(self, ctx):
        self._flag = ctx.Value("b", 0, lock=False)

    def set(self) -> None:
        """Request the stop (trainer side); it stays set."""
        self._flag.value = 1

    def is_set(self) -> bool:
        """Whether the stop was requested (searcher side; no lock, no system call)."""
        return bool(self._flag.value)
