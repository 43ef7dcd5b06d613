"""The course's exercise machinery (Spinning Up style: a stub the student fills, a checker).

``check("01.group_advantages", fn)`` compares ``fn``'s parameters with the stub's, runs ``fn``
on several inputs against the package's reference, prints PASS or FAIL with the first mismatch
and returns True or False; under nbgrader (``NBGRADER_EXECUTION`` set) a FAIL raises
``AssertionError``. The worked solutions live in the notebooks between ``### BEGIN SOLUTION``
and ``### END SOLUTION``; ``nbXX.py`` holds notebook XX's helpers and exercises, each a stub
registered by :func:`exercise` (no solutions).
"""
from __future__ import annotations

import importlib
import inspect
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch


@dataclass
class Exercise:
    """One exercise: ``name`` "NN.short_name" (NN the notebook), ``description`` (one line),
    ``stub`` (the empty function the notebook shows), ``reference`` (the package's), ``cases``
    (returns fresh (args, kwargs) inputs), ``rtol``/``atol`` of the default comparison
    (``np.allclose``) or ``compare(got, want) -> str | None`` (None = equal)."""
    name: str
    description: str
    stub: Callable
    reference: Callable
    cases: Callable[[], list[tuple[tuple, dict]]]
    rtol: float = 1e-5
    atol: float = 1e-6
    compare: Callable[[Any, Any], str | None] | None = None


EXERCISES: dict[str, Exercise] = {}  # name -> exercise, filled by @exercise as nbXX import


def exercise(name: str, description: str, reference: Callable, cases: Callable,
             **options) -> Callable:
    """Register the decorated stub as :class:`Exercise` ``name`` (``options``: rtol, atol or
    compare) and return it unchanged. ValueError: a name registered by two modules (a module
    reloaded, e.g. by IPython's autoreload, registers its exercises again)."""
    def register(stub: Callable) -> Callable:
        if name in EXERCISES and EXERCISES[name].stub.__module__ != stub.__module__:
            raise ValueError(f"duplicate exercise name {name!r}")
        EXERCISES[name] = Exercise(name, description, stub, reference, cases, **options)
        return stub
    return register


def from_minimal(name: str) -> Callable:
    """A reference that calls ``tba_lab.minimal.<name>``, imported at the first call (minimal.py
    loads transformers, which a notebook that never checks it need not wait for)."""
    def reference(*args, **kwargs):
        return getattr(importlib.import_module("tba_lab.minimal"), name)(*args, **kwargs)
    return reference


def _as_array(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _default_compare(got, want, rtol: float, atol: float) -> str | None:
    """``np.allclose`` of arrays or tensors (a sequence of them, or of numbers and arrays: item
    by item), with the shape and, for floating tensors, the dtype; why they differ, or None."""
    if isinstance(want, (tuple, list)) and not all(np.isscalar(w) for w in want):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return f"expected a sequence of {len(want)} outputs, got {type(got).__name__}"
        for i, (g, w) in enumerate(zip(got, want)):
            msg = _default_compare(g, w, rtol, atol)
            if msg:
                return f"output {i}: {msg}"
        return None
    if (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)
            and got.dtype != want.dtype and want.is_floating_point()):
        return f"dtype {got.dtype}, expected {want.dtype}"
    g, w = _as_array(got), _as_array(want)
    if g.shape != w.shape:
        return f"shape {g.shape}, expected {w.shape}"
    if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
        bad = np.argmax(np.abs(g - w).reshape(-1)) if g.size else 0
        return (f"values differ (largest gap at flat index {bad}: got {g.reshape(-1)[bad]:.6g}, "
                f"expected {w.reshape(-1)[bad]:.6g})")
    return None


def compare_gradient(requires_grad: bool, why: str, rtol: float, atol: float) -> Callable:
    """A compare that first checks whether a tensor result carries a gradient
    (``requires_grad``), failing with ``why`` otherwise, then compares the values."""
    def compare(got, want):
        if isinstance(got, torch.Tensor) and got.requires_grad != requires_grad:
            return why
        return _default_compare(got, want, rtol=rtol, atol=atol)
    return compare


def compare_value(got, want, unit: str = "", python_float: bool = False) -> str | None:
    """Equality of plain values: None only equals None; a number within 1e-6 (``python_float``:
    ``got`` must be an int or float, not a tensor; ``unit`` follows the numbers in the message);
    anything else by ``==`` (a list equals a tuple of the same items)."""
    if want is None or got is None:
        return None if got is want else f"got {got!r}, expected {want!r}"
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        try:
            ok = (not python_float or isinstance(got, (int, float))) and math.isclose(
                float(got), want, rel_tol=1e-6, abs_tol=1e-6)
        except (TypeError, ValueError):
            ok = False
        return None if ok else f"got {got!r}{unit}, expected {want:.6g}{unit}"
    if isinstance(got, list) and isinstance(want, tuple):
        got = tuple(got)
    return None if got == want else f"got {got!r}, expected {want!r}"


def _describe(args: tuple, kwargs: dict) -> str:
    """Short text of a case's inputs: shapes and dtypes of tensors, values of scalars."""
    def one(x):
        shape = getattr(x, "shape", None)
        if shape is not None and len(shape) > 0:
            return f"{type(x).__name__}{tuple(shape)} {getattr(x, 'dtype', '')}".strip()
        if isinstance(x, (list, tuple)) and len(x) > 6:
            return f"{type(x).__name__} of {len(x)}"
        text = repr(x)
        if "\n" in text:  # a model, an optimizer: its type says enough
            return type(x).__name__
        return text if len(text) <= 60 else text[:57] + "..."
    return ", ".join([one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()])


_VAR = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _signature_problem(fn: Callable, stub: Callable, cases: list) -> str | None:
    """Why ``fn`` does not have the stub's signature (the stub's parameters in its order, then
    only ones with a default; a ``*args, **kwargs`` wrapper passes; every case must bind), or
    None. Callables without a readable signature (some builtins) are not checked."""
    try:
        want, got = inspect.signature(stub), inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    kinds = {p.kind for p in got.parameters.values()}
    if set(_VAR) <= kinds:
        return None
    want_names = [p.name for p in want.parameters.values() if p.kind not in _VAR]
    got_params = [p for p in got.parameters.values() if p.kind not in _VAR]
    for i, w in enumerate(want_names):
        if i >= len(got_params):
            if inspect.Parameter.VAR_POSITIONAL in kinds:
                break  # the rest arrive in *args
            return f"parameter {w!r} is missing"
        if got_params[i].name != w:
            return f"parameter {i + 1} is {got_params[i].name!r}, expected {w!r}"
    extra = [p.name for p in got_params[len(want_names):] if p.default is inspect.Parameter.empty]
    if extra:
        return f"extra parameter{'s' if len(extra) > 1 else ''} without a default: {', '.join(extra)}"
    for i, (args, kwargs) in enumerate(cases):
        try:
            got.bind(*args, **kwargs)
        except TypeError as e:
            return f"case {i} cannot call it: {e}"
    return None


GRADING_ENV = "NBGRADER_EXECUTION"  # nbgrader sets it to "autograde" or "validate" while it runs


def check(name: str, fn: Callable, verbose: bool = True) -> bool:
    """Run exercise ``name`` on ``fn``; print PASS/FAIL (when ``verbose``) and return the
    result. KeyError: unknown name; AssertionError: a FAIL while nbgrader grades."""
    if name not in EXERCISES:
        raise KeyError(f"unknown exercise {name!r}; known: {sorted(EXERCISES)}")
    ex = EXERCISES[name]
    message = _failure(ex, fn)
    if verbose:
        print(f"PASS {name}: {ex.description}" if message is None else f"FAIL {name}: {message}")
    if message is not None and os.environ.get(GRADING_ENV):
        raise AssertionError(f"FAIL {name}: {ex.description}")
    return message is None


def _failure(ex: Exercise, fn: Callable) -> str | None:
    """Why ``fn`` fails exercise ``ex`` (after "FAIL <name>: "), or None when it passes."""
    if fn is ex.reference:  # the notebooks import it for their later cells
        return (f"that is the package's own {getattr(fn, '__name__', 'function')}: "
                f"write your own ({ex.description})")
    cases = ex.cases()
    problem = _signature_problem(fn, ex.stub, cases)
    if problem:
        shown = getattr(fn, "__name__", "fn")
        return (f"wrong signature: {problem}\n"
                f"  expected signature: {shown}{inspect.signature(ex.stub)}\n"
                f"  got:                {shown}{inspect.signature(fn)}\n"
                f"  (keep the stub's parameter names and defaults; only its body is yours)")
    for i, (args, kwargs) in enumerate(cases):
        want = ex.reference(*args, **kwargs)
        try:
            got = fn(*args, **kwargs)
        except NotImplementedError:
            return f"not implemented yet ({ex.description})"
        except Exception as e:  # the student's error, shown, not raised
            return f"case {i} raised {type(e).__name__}: {e}"
        msg = (ex.compare(got, want) if ex.compare else
               _default_compare(got, want, ex.rtol, ex.atol))
        if msg:
            return (f"case {i}: {msg}\n  inputs: {_describe(args, kwargs)}\n"
                    f"  (to get them: from tba_lab.lab.course import EXERCISES; "
                    f"args, kwargs = EXERCISES[{ex.name!r}].cases()[{i}])")
    return None


def output_folder(path) -> Path:
    """``path`` as a Path, created with its parents (a notebook's OUTPUT_DIR)."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def show_figure(fig, path) -> None:
    """Lay out ``fig``, save it to ``path`` (a notebook's figure) and show it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.show()


def save_metrics(output_dir, metrics: dict) -> None:
    """Write ``metrics.json`` in ``output_dir`` (``tba-lab reproduce`` puts it in the report)."""
    (output_folder(output_dir) / "metrics.json").write_text(
        json.dumps(metrics, indent=2, default=float) + "\n")


for _module in ("nb01", "nb02", "nb03", "nb04", "nb05", "nb06", "nb07", "nb08", "nb09", "nb10"):
    importlib.import_module(f"tba_lab.lab.course.{_module}")  # each registers its exercises

__all__ = ["Exercise", "EXERCISES", "check", "compare_gradient", "compare_value",
           "exercise", "from_minimal", "output_folder", "save_metrics", "show_figure"]
