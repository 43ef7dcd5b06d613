"""The four extension tables: algorithms, tasks, generation backends and launchers.

Each table maps the name a config uses (``algo: tb``, ``task.name: gsm8k``, ``model.backend:
transformers``, ``async.launcher: local``) to a class. Every class enters its table the same
way, with a decorator on its definition (``@ALGORITHMS.register``), inside the package or out.
A table lists the package modules that hold its built-in entries and imports them the first
time it is asked for a name, so importing this module (or :mod:`tba_lab.config`) imports no
torch; those modules import optional extras (vLLM, Ray) only inside functions.

Adding an extension (worked, tested examples in ``tests/test_extensions.py``):

* in the package: the class, decorated, in a module its table already lists (a loss: its unit
  in ``losses.py`` and its class in ``algorithms.py``), or in a new module whose name you add
  to the table's list below: two files at most;
* outside the package (a test file, your own project): decorate the class and import its module
  before building the config, then train from Python (``tba_lab.trainer.train(cfg)``): the
  command line knows only the modules listed here. Spawned searchers receive the classes and
  the config (with every registered options section) by reference, so the module that defines
  them must be importable in a fresh process: a file, not a notebook cell or ``__main__``.

A class that has options sets ``config_class`` (a dataclass) and ``section`` (its YAML key);
:mod:`tba_lab.config` reads those options from that section and validates them.
"""
from __future__ import annotations

import importlib


class Registry:
    """Name -> class for one kind of extension.

    Args:
        kind: what the entries are, for messages ("algorithm").
        config_key: the config field that names an entry, for messages ("algo").
        modules: package modules whose classes register themselves here, imported on first use.
    """

    def __init__(self, kind: str, config_key: str, modules: tuple[str, ...]):
        self.kind, self.config_key = kind, config_key
        self._modules, self._loaded = tuple(modules), False
        self._entries: dict[str, type] = {}

    def _load(self) -> None:
        """Import the built-in modules once (their decorators fill the table)."""
        if self._loaded:
            return
        self._loaded = True  # first, so a module that registers while loading does not recurse
        try:
            for module in self._modules:
                importlib.import_module(module)
        except BaseException:
            self._loaded = False
            raise

    def register(self, cls: type | None = None, *, name: str | None = None, replace: bool = False):
        """Add ``cls`` under ``name`` (default ``cls.name``); usable as a class decorator.

        Raises:
            ValueError: the name is taken by another class (pass ``replace=True`` to override),
                or neither ``name`` nor ``cls.name`` is given.
        """
        self._load()  # built-ins first, so a user's replace=True overrides them, not vice versa

        def add(c: type) -> type:
            key = name or getattr(c, "name", None)
            if not key:
                raise ValueError(f"{self.kind} {c.__name__} needs a class attribute `name` "
                                 f"(the value of {self.config_key} that selects it)")
            old = self._entries.get(key)
            if old is not None and old is not c and not replace and not _same_class(old, c):
                raise ValueError(f"{self.kind} name {key!r} is taken by {old.__module__}."
                                 f"{old.__qualname__}; choose another name or register with "
                                 f"replace=True")
            self._entries[key] = c
            return c

        return add if cls is None else add(cls)

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order (built-ins first)."""
        self._load()
        return tuple(self._entries)

    def __contains__(self, key: str) -> bool:
        self._load()
        return key in self._entries

    def get(self, key: str) -> type:
        """The class registered as ``key``.

        Raises:
            KeyError: unknown name; the message lists the known ones.
        """
        self._load()
        if key not in self._entries:
            raise KeyError(f"{self.config_key}={key!r}: unknown {self.kind}; choose one of "
                           f"{list(self._entries)} or register yours (tba_lab.registry)")
        return self._entries[key]

    def classes(self) -> dict[str, type]:
        """Every entry: ``{name: class}``."""
        self._load()
        return dict(self._entries)


def section_key(cls) -> str:
    """The YAML section of a registered class's (or instance's) options: its ``section``, else
    its ``name``."""
    return getattr(cls, "section", None) or cls.name


def _same_class(old: type, new: type) -> bool:
    """A module imported again (``importlib.reload`` in a notebook) registers an equal class."""
    return (old.__module__, old.__qualname__) == (new.__module__, new.__qualname__)


ALGORITHMS = Registry("algorithm", "algo", ("tba_lab.algorithms",))
TASKS = Registry("task", "task.name", ("tba_lab.tasks.gsm8k", "tba_lab.tasks.arithmetic",
                                        "tba_lab.tasks.preference", "tba_lab.tasks.redteam"))
BACKENDS = Registry("generation backend", "model.backend", ("tba_lab.rollout.backend",
                                                            "tba_lab.rollout.vllm_backend"))
LAUNCHERS = Registry("launcher", "async.launcher", ("tba_lab.actors.local",
                                                    "tba_lab.actors.ray_launcher"))
