"""The course's exercise machinery (Spinning Up style: a stub the student fills, a checker).

Each notebook has at least two exercises. A student writes a function in a notebook cell and
calls ``check("01.group_advantages", my_function)``, which first compares the function's
parameters with the stub's (a renamed, missing or extra parameter is a FAIL that shows the
expected signature), then runs it on several inputs and compares with the package's reference
implementation using ``np.allclose``-type checks. It prints PASS or FAIL with the first
mismatch, and returns True or False: in a student's kernel it never raises, so the notebook runs
on. Under nbgrader's autograder (which sets ``NBGRADER_EXECUTION``) a FAIL raises
``AssertionError``, which is how nbgrader scores the check cell 0.

Where things live:
    notebooks/NN_*.ipynb        the instructor's copy: each exercise cell holds its worked
                                solution between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
                                (nbgrader's regions); ``tba-lab course release`` removes them
    tba_lab/lab/course/nbXX.py  exercises of notebook XX: the empty stub, the reference and the
                                inputs (no solutions: students install this package)
    check(name, fn)             the checker a notebook cell calls (nbgrader's graded cell)
    EXERCISES                   every exercise by name (tests: solutions pass, stubs fail)
"""
from __future__ import annotations

import importlib
import inspect
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


@dataclass
class Exercise:
    """One exercise.

    Attributes:
        name: "NN.short_name", NN the notebook number.
        description: one line shown by ``check``.
        stub: the empty function the notebook shows (raises NotImplementedError).
        reference: the package implementation the answer is compared with.
        cases: returns a list of (args, kwargs) inputs; called fresh for every check.
        rtol, atol: tolerances of the comparison.
        compare: optional ``compare(got, want) -> str | None`` (None = equal) for outputs
            that are not arrays (e.g. dicts or tuples); default: ``np.allclose`` on arrays.
    """
    name: str
    description: str
    stub: Callable
    reference: Callable
    cases: Callable[[], list[tuple[tuple, dict]]]
    rtol: float = 1e-5
    atol: float = 1e-6
    compare: Callable[[Any, Any], str | None] | None = None
    notes: str = field(default="")


_MODULES = ("nb01", "nb02", "nb03", "nb04", "nb05", "nb06", "nb07", "nb08", "nb09", "nb10")


def _load() -> dict[str, Exercise]:
    found: dict[str, Exercise] = {}
    for mod in _MODULES:
        try:
            m = importlib.import_module(f"tba_lab.lab.course.{mod}")
        except ModuleNotFoundError as e:
            if e.name == f"tba_lab.lab.course.{mod}":
                continue  # that notebook has no exercises module (yet)
            raise
        for ex in getattr(m, "EXERCISES", []):
            if ex.name in found:
                raise ValueError(f"duplicate exercise name {ex.name!r}")
            found[ex.name] = ex
    return found


EXERCISES: dict[str, Exercise] = _load()


def _as_array(x) -> np.ndarray:
    try:
        import torch

        if isinstance(x, torch.Tensor):
            return x.detach().cpu().double().numpy()
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(x, dtype=np.float64)


def _default_compare(got, want, rtol: float, atol: float) -> str | None:
    if isinstance(want, (tuple, list)) and want and not np.isscalar(want[0]):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return f"expected a sequence of {len(want)} outputs, got {type(got).__name__}"
        for i, (g, w) in enumerate(zip(got, want)):
            msg = _default_compare(g, w, rtol, atol)
            if msg:
                return f"output {i}: {msg}"
        return None
    try:
        import torch

        if (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)
                and got.dtype != want.dtype and want.is_floating_point()):
            return f"dtype {got.dtype}, expected {want.dtype}"
    except ImportError:  # pragma: no cover
        pass
    g, w = _as_array(got), _as_array(want)
    if g.shape != w.shape:
        return f"shape {g.shape}, expected {w.shape}"
    if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
        bad = np.argmax(np.abs(g - w).reshape(-1)) if g.size else 0
        return (f"values differ (largest gap at flat index {bad}: got {g.reshape(-1)[bad]:.6g}, "
                f"expected {w.reshape(-1)[bad]:.6g})")
    return None


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
    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


_VAR = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _signature_problem(fn: Callable, stub: Callable, cases: list) -> str | None:
    """Why ``fn`` does not have the stub's signature, or None when it does.

    ``fn`` must name the stub's parameters in the stub's order; it may add parameters with a
    default after them. A function taking ``*args, **kwargs`` (a wrapper) accepts any call and
    passes. Independently of the names, every case's call must bind to ``fn`` (a parameter the
    stub gives a default needs one too; a positional-only parameter cannot take a keyword).
    Callables without a readable signature (some builtins) are not checked.
    """
    try:
        want, got = inspect.signature(stub), inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    kinds = {p.kind for p in got.parameters.values()}
    if set(_VAR) <= kinds:
        return None  # *args, **kwargs: takes whatever the cases pass
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
    for i, case in enumerate(cases):
        try:
            got.bind(*case[0], **case[1])
        except TypeError as e:
            return f"case {i} cannot call it: {e}"
    return None


GRADING_ENV = "NBGRADER_EXECUTION"  # nbgrader sets it to "autograde" or "validate" while it runs


def check(name: str, fn: Callable, verbose: bool = True) -> bool:
    """Run exercise ``name`` on ``fn``; print PASS/FAIL (when ``verbose``) and return the result.

    Raises:
        KeyError: unknown exercise name (the message lists the known ones).
        AssertionError: a FAIL while nbgrader grades (``NBGRADER_EXECUTION`` set): the check
            cell then scores 0; in a student's kernel a FAIL returns False instead.
    """
    if name not in EXERCISES:
        raise KeyError(f"unknown exercise {name!r}; known: {sorted(EXERCISES)}")
    passed = _check(EXERCISES[name], fn, print if verbose else (lambda *a, **k: None))
    if not passed and os.environ.get(GRADING_ENV):
        raise AssertionError(f"FAIL {name}: {EXERCISES[name].description}")
    return passed


def _check(ex: Exercise, fn: Callable, say: Callable) -> bool:
    name = ex.name
    if fn is ex.reference:  # the notebooks import it for their later cells
        say(f"FAIL {name}: that is the package's own {getattr(fn, '__name__', 'function')}: "
            f"write your own ({ex.description})")
        return False
    cases = ex.cases()
    problem = _signature_problem(fn, ex.stub, cases)
    if problem:
        shown = getattr(fn, "__name__", "fn")
        say(f"FAIL {name}: wrong signature: {problem}\n"
            f"  expected signature: {shown}{inspect.signature(ex.stub)}\n"
            f"  got:                {shown}{inspect.signature(fn)}\n"
            f"  (keep the stub's parameter names and defaults; only its body is yours)")
        return False
    for i, case in enumerate(cases):
        args, kwargs = case[0], case[1]
        want = ex.reference(*args, **kwargs)
        try:
            got = fn(*args, **kwargs)
        except NotImplementedError:
            say(f"FAIL {name}: not implemented yet ({ex.description})")
            return False
        except Exception as e:  # the student's error, shown, not raised
            say(f"FAIL {name}: case {i} raised {type(e).__name__}: {e}")
            return False
        msg = (ex.compare(got, want) if ex.compare else
               _default_compare(got, want, ex.rtol, ex.atol))
        if msg:
            say(f"FAIL {name}: case {i}: {msg}\n  inputs: {_describe(args, kwargs)}\n"
                f"  (to get them: from tba_lab.lab.course import EXERCISES; "
                f"args, kwargs = EXERCISES[{name!r}].cases()[{i}][:2])")
            return False
    say(f"PASS {name}: {ex.description}")
    return True


def save_metrics(output_dir, metrics: dict) -> None:
    """Write ``metrics.json`` in ``output_dir`` (``tba-lab reproduce`` puts it in the report)."""
    import json
    from pathlib import Path

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float) + "\n")


__all__ = ["Exercise", "EXERCISES", "check", "save_metrics"]
