"""The explorer of notebook 06 (``tba_lab.lab.widgets``) without a browser.

* Runs on disk: :func:`list_runs` (the runs table a restarted kernel rebuilds),
  :func:`compare_runs` (the settings two runs differ in), :func:`export_config` (a YAML file that
  ``tba-lab train --config`` accepts), :func:`next_run_dir`. Fake run directories: a
  ``config.yaml`` written by the kit's own ``write_yaml`` and a ``summary.json``; no training.
* The widget: its controls, their labels and CSS classes (the browser test finds them by
  class), the table rebuilt from disk, Compare, Export and Clear, driven with ``Button.click()``.
* Interrupting the kernel: the stop hooks (unit tests), ``run_and_plot`` when Ctrl-C
  lands in its redraw loop, and one real run in a Jupyter kernel: "Run" clicked, "interrupt
  kernel" while the kernel is idle and again while a cell runs; each time the run ends, saved,
  every searcher process is gone and the explorer starts the next run.
"""
from __future__ import annotations

import json
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tba_lab.config import ConfigError, load_yaml, short_run, validate, write_yaml
from tba_lab.lab import widgets
from tba_lab.lab.widgets import (compare_runs, explorer, export_config, knob_overrides, list_runs,
                                 merge_overrides, next_run_dir, run_and_plot)

# a run small enough for a test: tiny batches and evaluations (as tests/test_shutdown.py)
TINY = {"model": {"max_new_tokens": 24},
        "training": {"num_prompts_per_step": 4, "num_generations": 4},
        "buffer": {"initial_fill": 16},
        "task": {"eval_size": 10, "interim_eval_size": 10, "eval_every_seconds": 0},
        "async": {"searcher_threads": 1, "trainer_threads": 1}}


def fake_run(root: Path, name: str, summary: dict | None = None, seconds: float = 60, **knobs) -> Path:
    """A run directory as the trainer leaves it: config.yaml (and summary.json if given)."""
    out = root / name
    out.mkdir(parents=True)
    write_yaml(short_run(out, seconds, knob_overrides(**knobs)), out / "config.yaml")
    if summary is not None:
        base = {"algo": knobs.get("algo", "tb"), "interrupted": False, "accuracy_before": 0.346,
                "accuracy_after": 0.40, "trainer_steps": 120, "wall_seconds": 61.2,
                "staleness_mean": 2.5, "staleness_max": 9}
        (out / "summary.json").write_text(json.dumps({**base, **summary}))
    return out


# ----------------------------------------------------------------------------------------------
# Runs on disk
# ----------------------------------------------------------------------------------------------


def test_list_runs_rebuilds_the_table_from_disk(tmp_path):
    assert list_runs(tmp_path / "nothing here") == []
    fake_run(tmp_path, "run_00", {}, algo="tb", beta=0.05, learning_rate=3e-5)
    fake_run(tmp_path, "run_10", {"interrupted": True, "trainer_steps": 7}, algo="grpo", beta=0.0)
    fake_run(tmp_path, "run_02", None, algo="rloo", beta=0.2, num_generations=4, sync_period=2)
    fake_run(tmp_path, "run_03", {}, algo="tb", beta=0.1, beta_final=0.02, beta_anneal_steps=50)
    (tmp_path / "notes").mkdir()                       # no config.yaml: not a run
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.yaml").write_text("[this is: not a mapping")
    rows = list_runs(tmp_path)
    assert [r["run"] for r in rows] == ["run_00", "run_02", "run_03", "run_10"]  # natural order
    r0, r2, r3, r10 = rows
    assert (r0["algo"], r0["beta"], r0["learning_rate"], r0["mode"]) == ("tb", 0.05, 3e-5, "async")
    assert (r0["status"], r0["accuracy_before"], r0["accuracy_after"], r0["updates"]) == \
        ("done", 0.346, 0.40, 120)
    assert (r0["seconds"], r0["staleness_mean"], r0["staleness_max"], r0["budget_seconds"]) == \
        (61.2, 2.5, 9, 60.0)
    assert r10["status"] == "interrupted" and r10["algo"] == "grpo" and r10["beta"] == 0.0
    assert r10["beta_final"] is None  # grpo's section has no annealing
    assert r2["status"] == "incomplete" and r2["updates"] is None  # running, or killed
    assert (r2["num_generations"], r2["sync_period"], r2["beta"]) == (4, 2, 0.2)
    assert (r3["beta_final"], r3["beta_anneal_steps"]) == (0.02, 50)
    for col in ("recency_prob", "inv_temp", "num_searchers", "seed", "run_dir"):
        assert col in r0
    html = widgets.runs_table_html(rows, marked=["run_03"])
    assert all(f"data-run='{r['run']}'" in html for r in rows) and "font-weight:bold" in html


def test_compare_runs_lists_the_settings_that_differ(tmp_path):
    a = fake_run(tmp_path, "run_00", {}, algo="tb", beta=0.1, learning_rate=5e-5)
    b = fake_run(tmp_path, "run_01", {}, algo="tb", beta=0.05, learning_rate=5e-5, sync_period=4)
    c = fake_run(tmp_path, "run_02", {}, algo="tb", beta=0.1, learning_rate=5e-5)
    assert compare_runs(a, b) == {"async.sync_period": (1, 4), "tb.beta": (0.1, 0.05)}
    assert compare_runs(a, c) == {}  # output_dir always differs and is left out
    assert compare_runs(a, c, ignore=()) == {"output_dir": (str(a), str(c))}
    with pytest.raises(FileNotFoundError):
        compare_runs(a, tmp_path / "missing")


def test_next_run_dir_counts_past_the_largest_run(tmp_path):
    assert next_run_dir(tmp_path / "new") == tmp_path / "new" / "run_00"
    for name in ("run_00", "run_07", "run_03-cli", "other"):
        (tmp_path / name).mkdir()
    assert next_run_dir(tmp_path) == tmp_path / "run_08"


def test_export_config_reads_back_to_the_runs_config(tmp_path):
    run = fake_run(tmp_path, "run_04", {}, algo="rloo", beta=0.02, learning_rate=2e-5,
                   num_generations=4, recency_prob=0.5, inv_temp=2.0, sync_period=3)
    path = export_config(run)
    assert path == run / "export.yaml"
    assert path.read_text().startswith("# settings of the run")
    exported, original = load_yaml(path), load_yaml(run / "config.yaml")
    assert exported.output_dir == str(run.resolve().parent / "run_04-cli")  # never the run itself
    a, b = exported.to_dict(), original.to_dict()
    a.pop("output_dir"), b.pop("output_dir")
    assert a == b
    validate(exported)
    other = export_config(run, tmp_path / "mine.yaml", output_dir=tmp_path / "elsewhere")
    assert load_yaml(other).output_dir == str(tmp_path / "elsewhere")
    with pytest.raises(FileNotFoundError):
        export_config(tmp_path / "missing")


def test_export_config_refuses_settings_that_do_not_validate(tmp_path):
    run = fake_run(tmp_path, "run_00", {})
    text = (run / "config.yaml").read_text().replace("num_generations: 8", "num_generations: 1")
    (run / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match="num_generations"):
        export_config(run)


def test_tba_lab_train_accepts_an_exported_config(tmp_path, monkeypatch, capsys):
    """``tba-lab train --config export.yaml --max-steps 1``: the CLI's own path (YAML, flags,
    validation, preflight of the model and data) up to ``train``, which is replaced here."""
    import tba_lab.trainer
    from tba_lab.cli import main

    run = fake_run(tmp_path, "run_00", {}, algo="tb", beta=0.05, sync_period=2)
    path = export_config(run)
    seen = {}

    def fake_train(cfg, progress=True, stop_event=None, resume=False):
        seen["cfg"] = cfg
        return {"algo": cfg.algo, "mode": cfg.async_.mode, "task": cfg.task.name,
                "held_out_metrics": ["accuracy"], "accuracy_before": 0.3, "accuracy_after": 0.3,
                "trainer_steps": 1, "wall_seconds": 1.0, "samples_generated": 128,
                "staleness_mean": 0.0, "staleness_max": 0}

    monkeypatch.setattr(tba_lab.trainer, "train", fake_train)
    assert main(["train", "--config", str(path), "--max-steps", "1", "--no-progress"]) == 0, \
        capsys.readouterr().err
    cfg = seen["cfg"]
    assert cfg.training.max_steps == 1 and cfg.tb.beta == 0.05 and cfg.async_.sync_period == 2
    assert cfg.output_dir == str(run.resolve().parent / "run_00-cli")


# ----------------------------------------------------------------------------------------------
# The widget
# ----------------------------------------------------------------------------------------------


CLASSES = {"run": "Run", "stop": "Stop", "clear": "Clear", "plot": None, "runs": None,
           "status": None, "overlay": None, "run-a": None, "run-b": None,
           "compare": "Compare A/B", "diff": None, "export": "Export A"}


def _classes(w) -> list[str]:
    return list(w._dom_classes)


def test_explorer_controls_have_their_labels_and_css_classes(tmp_path):
    pytest.importorskip("ipywidgets")
    ui = explorer(tmp_path / "explorer", seconds=30)
    assert "tba-explorer" in _classes(ui)
    for name, label in CLASSES.items():
        w = ui.controls[name]
        assert f"tba-explorer-{name}" in _classes(w), name
        if label is not None:
            assert w.description == label
    descriptions = set()

    def walk(w):
        descriptions.add(getattr(w, "description", None))
        for child in getattr(w, "children", ()):
            walk(child)
    walk(ui)
    for knob in ("algorithm", "mode", "beta (KL coef.)", "anneal beta (TB only)", "beta_final",
                 "beta_anneal_steps", "learning rate", "K (num_generations)", "m (recency_prob)",
                 "inv_temp", "sync period k", "searchers", "budget (s)"):
        assert knob in descriptions, knob
    assert ui.controls["runs"].value == "<i>no runs yet</i>"


def test_explorer_reloads_runs_compares_exports_and_clears(tmp_path):
    pytest.importorskip("ipywidgets")
    root = tmp_path / "explorer"
    fake_run(root, "run_00", {}, algo="tb", beta=0.1)
    fake_run(root, "run_01", {"accuracy_after": 0.45}, algo="tb", beta=0.03, sync_period=4)
    for name in ("run_00", "run_01"):  # a few metrics rows, so that the overlay can draw them
        rows = [{"step": i + 1, "wall_seconds": float(i), "reward_mean": 0.3, "loss": 1.0,
                 "staleness_mean": 1.0, "staleness_max": 2} for i in range(5)]
        (root / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ui = explorer(root)  # a restarted kernel: the table comes back from disk
    c = ui.controls
    assert c["plot"].layout.display == "none"  # no data, no broken-image icon
    assert "run_00" in c["runs"].value and "run_01" in c["runs"].value
    assert "2 earlier run(s)" in c["status"].value
    assert list(c["overlay"].options) == ["run_00", "run_01"] and c["overlay"].value == ()
    assert (c["run-a"].value, c["run-b"].value) == ("run_00", "run_01")
    c["compare"].click()
    assert "tb.beta" in c["diff"].value and "async.sync_period" in c["diff"].value
    assert "45.0%" in c["diff"].value  # results side by side
    assert c["overlay"].value == ("run_00", "run_01") and c["plot"].value  # both drawn
    assert c["plot"].layout.display is None
    c["export"].click()
    assert (root / "run_00" / "export.yaml").is_file() and "tba-lab train --config" in c["status"].value
    c["clear"].click()
    assert c["overlay"].value == () and c["plot"].value == b""
    assert c["plot"].layout.display == "none"
    assert len(list_runs(root)) == 2  # Clear forgets the plot, not the runs


def test_explorer_shows_a_bad_setting_without_starting_a_run(tmp_path):
    pytest.importorskip("ipywidgets")
    ui = explorer(tmp_path, overrides={"training": {"num_prompts_per_step": 0}})
    ui.controls["run"].click()
    assert "bad setting" in ui.controls["status"].value
    assert not ui.controls["run"].disabled and not any(tmp_path.iterdir())


def _sliders(w):
    import ipywidgets as W

    if isinstance(w, (W.IntSlider, W.FloatSlider, W.FloatLogSlider, W.SelectionSlider)):
        yield w
    for child in getattr(w, "children", ()):
        yield from _sliders(child)


@pytest.mark.parametrize("seconds", [60, 30, 45, 7, 1000])
def test_explorer_sliders_start_on_their_grid(tmp_path, seconds):
    """The browser snaps a slider's handle to min + k * step: a start value off that grid reads
    as another value than the run gets (value=100, min=1, step=10 showed "101")."""
    import math

    import ipywidgets as W

    pytest.importorskip("ipywidgets")
    ui = explorer(tmp_path, seconds=seconds)
    sliders = list(_sliders(ui))
    assert len(sliders) >= 10
    for w in sliders:
        if isinstance(w, W.SelectionSlider):  # exact values, shown by their labels
            assert w.value in dict(w.options).values() and w.label == f"{w.value:g}", w.description
            continue
        value = math.log(w.value, w.base) if isinstance(w, W.FloatLogSlider) else w.value
        k = (value - w.min) / w.step
        assert abs(k - round(k)) < 1e-6 and w.min <= value <= w.max, \
            f"{w.description}: value {w.value} is not min {w.min} + k * step {w.step}"
    budget = next(w for w in sliders if w.description == "budget (s)")
    assert budget.value == min(300, max(10, 10 * round(seconds / 10)))


def test_runs_stopped_early_are_stopped_in_the_table(tmp_path, monkeypatch):
    """``train`` saves a run ended by its stop event like one that used its budget; the table
    tells them apart: ``run_and_plot`` marks a run its stop event ended before the budget."""
    import tba_lab.lab.live as live

    class FakeRun:  # "trains" by writing what train() writes: config.yaml and summary.json
        wall, steps = 4.0, 3

        def __init__(self, cfg, stop_event=None):
            self.cfg, self.stop_event, self.error = cfg, stop_event, None

        def start(self):
            out = Path(self.cfg.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            write_yaml(self.cfg, out / "config.yaml")
            self.summary = {"interrupted": False, "trainer_steps": self.steps,
                            "wall_seconds": self.wall}
            (out / "summary.json").write_text(json.dumps(self.summary))
            return self

        def wait(self, timeout):
            return True

    monkeypatch.setattr(live, "BackgroundRun", FakeRun)
    overrides = merge_overrides(knob_overrides(), TINY)
    stop = threading.Event()
    stop.set()
    res = run_and_plot(overrides, 30, tmp_path / "run_00", on_update=lambda fig: None,
                       stop_event=stop)  # Stop (or an interrupt) 4 s into a 30-s budget
    assert res["stopped"] and (tmp_path / "run_00" / widgets.STOPPED_FILE).is_file()
    res = run_and_plot(overrides, 30, tmp_path / "run_01", on_update=lambda fig: None)
    assert not res["stopped"]  # no stop event: not stopped (whatever the clock says)
    FakeRun.wall = 30.4  # Stop pressed during the final evaluation: the budget was used
    res = run_and_plot(overrides, 30, tmp_path / "run_02", on_update=lambda fig: None,
                       stop_event=stop)
    assert not res["stopped"] and not (tmp_path / "run_02" / widgets.STOPPED_FILE).exists()
    FakeRun.wall = 4.0  # the run reached training.max_steps (3 updates): it used its budget
    res = run_and_plot(merge_overrides(knob_overrides(max_steps=3), TINY), 30, tmp_path / "run_03",
                       on_update=lambda fig: None, stop_event=stop)
    assert not res["stopped"]
    stale = fake_run(tmp_path, "run_04", {"trainer_steps": 12})  # marked at 5, then resumed
    (stale / widgets.STOPPED_FILE).write_text(json.dumps({"trainer_steps": 5}))
    status = {r["run"]: r["status"] for r in list_runs(tmp_path)}
    assert status == {"run_00": "stopped", "run_01": "done", "run_02": "done",
                      "run_03": "done", "run_04": "done"}
    run_and_plot(overrides, 30, tmp_path / "run_00", on_update=lambda fig: None)  # rerun there
    assert not (tmp_path / "run_00" / widgets.STOPPED_FILE).exists()
    assert list_runs(tmp_path)[0]["status"] == "done"


def test_draw_runs_shows_a_run_of_one_update(tmp_path):
    """A line through one point draws nothing: the first update of a run gets a dot."""
    rows = [{"step": i + 1, "wall_seconds": float(i), "reward_mean": 0.3, "loss": 1.0,
             "searcher_reward_mean": 0.2, "staleness_mean": 1.0, "staleness_max": 2}
            for i in range(3)]
    for n in (1, 3):
        run = tmp_path / f"run_{n}"
        run.mkdir()
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:n]))
        fig = widgets.draw_runs(run)
        (ax_r, ax_l), (ax_s, _) = fig.axes[0:2], fig.axes[2:4]
        lines = [*ax_r.get_lines(), *ax_l.get_lines(), *ax_s.get_lines()]
        assert len(lines) == 5
        assert {ln.get_marker() for ln in lines} == ({"."} if n == 1 else {"None"}), n


# ----------------------------------------------------------------------------------------------
# Interrupts
# ----------------------------------------------------------------------------------------------


def test_interrupt_hook_stops_active_runs_or_does_what_the_kernel_did():
    hook = widgets._InterruptStops()
    stopped = threading.Event()
    hook.previous = signal.SIG_IGN          # an idle ipykernel ignores SIGINT
    hook.handle_sigint(signal.SIGINT, None)  # no active run: ignored, as before
    token = hook.add(stopped.set)
    hook.handle_sigint(signal.SIGINT, None)
    assert stopped.is_set()
    hook.remove(token)
    hook.previous = signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        hook.handle_sigint(signal.SIGINT, None)
    hook.previous = signal.SIG_DFL
    with pytest.raises(KeyboardInterrupt):
        hook.handle_sigint(signal.SIGINT, None)

    class Result:
        error_in_exec = KeyboardInterrupt()
    stopped.clear()
    token = hook.add(stopped.set)
    hook.post_run_cell(type("Ok", (), {"error_in_exec": None})())
    assert not stopped.is_set()
    hook.post_run_cell(Result())
    assert stopped.is_set()


def test_interrupt_hook_installs_into_the_kernels_idle_handler(monkeypatch):
    """ipykernel restores ``kernel.saved_sigint_handler`` after each message: the hook goes there."""
    import IPython

    class Events:
        def __init__(self):
            self.registered = []

        def register(self, name, fn):
            self.registered.append(name)

    kernel = type("Kernel", (), {"saved_sigint_handler": signal.SIG_IGN})()
    shell = type("Shell", (), {})()
    shell.events, shell.kernel = Events(), kernel
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    hook = widgets._InterruptStops()
    assert hook.install() and hook.install()  # idempotent
    assert kernel.saved_sigint_handler == hook.handle_sigint and hook.previous == signal.SIG_IGN
    assert shell.events.registered == ["post_run_cell"]
    result = {}
    thread = threading.Thread(target=lambda: result.update(ok=hook.install()))
    thread.start()
    thread.join()
    assert result["ok"] is False  # signal handlers belong to the main thread


def test_run_and_plot_sets_the_stop_event_on_ctrl_c(tmp_path, monkeypatch):
    """Ctrl-C in the redraw loop of ``run_and_plot``: the stop event is set, the run
    is waited for (it saves and stops its searchers), then the KeyboardInterrupt goes on."""
    import tba_lab.lab.live as live

    class FakeRun:
        def __init__(self, cfg, stop_event=None):
            self.stop_event, self.calls = stop_event, 0
            self.summary = {"interrupted": False, "trainer_steps": 3, "wall_seconds": 4.0}
            Path(cfg.output_dir).mkdir(parents=True)  # as train() does
            FakeRun.last = self

        def start(self):
            return self

        def wait(self, timeout):
            self.calls += 1
            if self.calls == 1:
                raise KeyboardInterrupt
            assert timeout is None and self.stop_event.is_set()
            return True

    monkeypatch.setattr(live, "BackgroundRun", FakeRun)
    with pytest.raises(KeyboardInterrupt):
        run_and_plot(merge_overrides(knob_overrides(), TINY), 30, tmp_path / "run",
                     on_update=lambda fig: None)
    assert FakeRun.last.stop_event.is_set() and FakeRun.last.calls == 2
    assert not widgets._INTERRUPTS._stops  # nothing left registered
    assert json.loads((tmp_path / "run" / widgets.STOPPED_FILE).read_text())["trainer_steps"] == 3


def test_background_run_survives_an_interrupted_wait():
    """CPython 3.11 marks a thread stopped when its ``join`` is interrupted; ``BackgroundRun``
    must still say it runs, and ``wait`` must still wait."""
    from tba_lab.lab.live import BackgroundRun

    release = threading.Event()

    class Run(BackgroundRun):
        def _target(self):
            try:
                release.wait(5)
                self.summary = {"ok": True}
            finally:
                self._done.set()

    run = Run(short_run("unused", 60)).start()
    old = signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            run.wait(3)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert run.running and not run.wait(0.1)
    release.set()
    assert run.join() == {"ok": True} and not run.running


EXPLORER_SETUP = """
import os, threading, time
from tba_lab.lab import widgets
ui = widgets.explorer({root!r}, seconds=60, overrides={tiny!r})
c = ui.controls
def state():
    return {{"busy": c["run"].disabled, "status": c["status"].value,
             "runs": [(r["run"], r["status"], r["updates"]) for r in widgets.list_runs({root!r})]}}
"""


def _assert_no_process_left(shutdown, watch, tag: str, kernel, within: float = 10.0) -> None:
    """No process of the run alive but the kernel and its resource tracker (shared memory is
    tests/test_shutdown.py's subject)."""
    deadline = time.time() + within
    while True:
        left = shutdown._leftovers(watch, tag, {kernel.pid} | kernel.tracker())["processes"]
        if not left or time.time() > deadline:
            break
        time.sleep(0.25)
    assert not left, "processes left:\n  " + "\n  ".join(map(shutdown._describe, left))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc (Linux)")
@pytest.mark.slow  # a real kernel, two runs: about 40 s; tests/test_browser.py interrupts notebook 06 too
def test_interrupting_the_kernel_stops_an_explorer_run(tmp_path):
    """In a real Jupyter kernel: "Run" starts a run (searcher processes and all); "interrupt
    kernel" while the kernel is idle stops it within seconds, saved, with every searcher gone,
    and "Run" works again; that second run is stopped by interrupting a cell that is running.
    Then the table lists both runs, read back from disk."""
    shutdown = pytest.importorskip("tests.test_shutdown")
    pytest.importorskip("ipywidgets")
    tag, root = uuid.uuid4().hex, tmp_path / "explorer"
    kernel = shutdown.Kernel(tmp_path, tag)
    try:
        kernel.run(EXPLORER_SETUP.format(root=str(root), tiny=TINY))
        with shutdown.RunWatch(kernel.pid) as watch:
            for i, how in enumerate(("idle", "busy cell")):
                out = root / f"run_{i:02d}"
                kernel.run('c["run"].click()')
                shutdown.wait_for_updates(out, 2, timeout=120, why=kernel.output)
                watch.sample()
                assert watch.searcher_pids(), "no searcher process seen under the kernel"
                msg_id = None
                if how == "busy cell":
                    msg_id = kernel.execute("while True:\n    time.sleep(0.1)")
                    time.sleep(1.0)
                t0 = time.time()
                kernel.km.interrupt_kernel()
                if msg_id is not None:
                    content = kernel.reply(msg_id, 30)
                    assert content["ename"] == "KeyboardInterrupt", content
                deadline = time.time() + shutdown.STOP_WITHIN
                while not (out / "summary.json").exists():
                    assert time.time() < deadline, f"{how}: the run did not stop after the " \
                                                   f"interrupt:\n{kernel.output()[-4000:]}"
                    time.sleep(0.2)
                seconds = time.time() - t0
                for _ in range(100):  # the worker thread finishes: the Run button comes back
                    got = kernel.run("", s="state()")
                    if "'busy': False" in got["s"]:
                        break
                    time.sleep(0.2)
                assert "'busy': False" in got["s"], got
                summary = json.loads((out / "summary.json").read_text())
                assert summary["interrupted"] is False and summary["trainer_steps"] >= 2
                assert summary["wall_seconds"] < 50, "the run went on to its 60-s budget"
                assert "stopped after" in got["s"], got
                _assert_no_process_left(shutdown, watch, tag, kernel)
                print(f"{how}: the run ended {seconds:.1f} s after the interrupt")
        got = kernel.run("", s="state()")
        assert "('run_00', 'stopped'" in got["s"] and "('run_01', 'stopped'" in got["s"], got
        kernel.km.shutdown_kernel(now=False)
    finally:
        kernel.close()
