"""Watching a run while it runs: ``report_to`` and the console.

``report_to`` (TRL's option name: a list, default none) sends the numbers :class:`~tba_lab.runlog.RunLog`
writes to the JSONL files to a live dashboard as well:

* ``tensorboard``: event files in ``<output_dir>/tensorboard`` through
  ``torch.utils.tensorboard`` (the ``tensorboard`` extra: ``pip install -e ".[tensorboard]"``,
  in ``.[dev]`` and ``.[course]`` too); open them with ``tensorboard --logdir runs`` or, in
  JupyterLab, ``%load_ext tensorboard`` and ``%tensorboard --logdir runs`` (notebook 04);
* ``wandb`` and ``trackio``: their ``init`` / ``log`` / ``finish``, when installed.

What is sent (step = trainer updates, as in ``metrics.jsonl``):

* ``train/*`` and ``time/*``, per update: every number of the update's ``metrics.jsonl`` row
  (loss and the loss's terms such as ``kl``, ``log_z``, ``beta``; ``reward_mean``,
  ``staleness_mean``/``_max``, ``lr``, ``grad_norm``, ``buffer_size``; the ``*_seconds`` under
  ``time/``);
* ``throughput/*``, every :data:`RATE_SECONDS`: updates and samples per minute, and the
  fraction of the window the trainer spent updating or scoring (``trainer_busy``);
* ``searcher/<what>/s<id>``, per generation batch received: ``gen_seconds``,
  ``score_seconds``, ``sync_seconds`` and ``version_lag`` (trainer step minus the batch's
  weight version);
* ``eval/<metric>``, at each held-out evaluation, at the step of the weights it scored;
* ``config``, once per process, as text.

Not every value is sent in step order: with ``task.defer_interim_eval`` the interim
evaluations of weight copies are sent after the budget, at their copies' (earlier) steps. Each
dashboard's rule for a step below one it already has, and what the reporter does about it:

* TensorBoard: any order; an event is stored at the step it names. Only a resume's
  ``purge_step`` hides events, those at or after the checkpoint's step written before it.
* trackio: any order; ``log(values, step=s)`` stores each call at ``s`` (a step sent twice has
  two values).
* W&B: steps only increase. ``log(values, step=s)`` with ``s`` below its current step is dropped
  ("Steps must be monotonically increasing"), and calls at the same step merge into one row (a
  second value of a metric replaces the first). So the W&B reporter never passes ``step``: each
  call is a row of its own (W&B's step counts calls), and carries the update count as
  :data:`WANDB_STEP_METRIC`, the x-axis of every metric (``define_metric("*",
  step_metric=...)``, W&B's way to log to earlier steps); a late value keeps its step.

A new run (no resume) is a new dashboard run, also in a folder an earlier run used: that run's
``tensorboard/`` events are removed with its other files (:class:`~tba_lab.runlog.RunLog`), and
W&B and trackio start a new run whose id the checkpoints keep. A resumed run continues the same
curves: TensorBoard's writer purges every event at or after the checkpoint's step (``purge_step``)
and the events logged at that step before the checkpoint are sent again, so the event files hold
what the JSONL files keep (:meth:`RunLog.state_dict <tba_lab.runlog.RunLog.state_dict>`); W&B and
trackio continue the run the checkpoint names and are sent no step the stopped process may have
sent (neither can take a value back: they keep that process's values of the updates the resume
does again).

The console: in a terminal, or a notebook whose frontend takes input (JupyterLab, VS Code), a
tqdm bar over the run's budget (``max_steps`` updates when set, else the ``max_minutes`` budget
in seconds) with updates/min, staleness and the last held-out metric; anywhere else (a pipe,
``nohup``, a CI log, a notebook executed by papermill or ``nbconvert --execute``) one plain
status line every ``status_every_seconds`` instead, since tqdm's carriage-return frames would
pile up into one line and a widget would be drawn for nobody. With ``show=False``
(``--no-progress``) only warnings are printed.
"""
from __future__ import annotations

import importlib.util
import sys
import time
import uuid
from pathlib import Path

from tba_lab.config import ConfigError

RATE_SECONDS = 5.0  # the window of the throughput/* rates
WANDB_STEP_METRIC = "trainer/step"  # W&B's x-axis: the update count each value belongs to
INTEGRATIONS = {  # report_to name -> (module that must import, how to install it)
    "tensorboard": ("tensorboard", 'pip install -e ".[tensorboard]" (or pip install tensorboard)'),
    "wandb": ("wandb", "pip install wandb"),
    "trackio": ("trackio", "pip install trackio"),
}  # the keys are config.REPORT_TO


def check_report_to(names: list[str]) -> None:
    """Refuse a ``report_to`` entry whose package is missing, before anything starts (the
    names themselves are checked by :func:`tba_lab.config.validate`).

    Raises:
        tba_lab.config.ConfigError: naming the entry and the fix (the install command).
    """
    for name in names:
        module, install = INTEGRATIONS[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"report_to: {name!r} needs the {module!r} package, which is not "
                              f"installed; fix: {install}, or remove {name!r} from report_to")


class TensorBoardReporter:
    """Scalars and text into ``log_dir`` with ``torch.utils.tensorboard.SummaryWriter``.

    Every reporter has the same four methods: ``scalars(values, step)`` (``{tag: float}`` at
    trainer update ``step``, an int), ``text(tag, text, step)``, ``flush()`` (written to disk
    when it returns) and ``close()``. TensorBoard stores the values as float32; events are
    flushed every 10 s, at each :meth:`flush` and at :meth:`close`.

    Args:
        log_dir: the event files' folder (``<output_dir>/tensorboard``).
        purge_step: a resumed run's checkpoint step: TensorBoard hides every event of this
            folder at or after it (the resume sends again those of that step it keeps, and
            does the later ones again); None: a new run.
    """

    def __init__(self, log_dir: Path, purge_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(log_dir), purge_step=purge_step, flush_secs=10)

    def scalars(self, values: dict, step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def text(self, tag: str, text: str, step: int) -> None:
        self.writer.add_text(tag, text, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class TrackerReporter:
    """W&B or trackio through their module-level API: ``init(project=, name=, config=,
    resume=)``, ``log(values, step=)`` (W&B: ``define_metric`` once, then ``log(values)``),
    ``finish()``; W&B's files go under ``<output_dir>/wandb``.

    Each value is sent at the update it belongs to, also out of order (the deferred interim
    evaluations): trackio takes ``step=`` as given; W&B, whose steps only increase, gets no
    ``step=`` and plots every metric against :data:`WANDB_STEP_METRIC` sent with it (the
    rules: :mod:`tba_lab.reporting`).

    A new run (``run_id`` None) is a new tracker run, also in an output folder an earlier run
    used: W&B makes its id; trackio's run is named after the folder, the start time and 4
    random hex digits (``default-20261206-101500-3f2a``; trackio picks another name if it is
    taken). The id or name it got is :attr:`run_id`, which the run's checkpoints keep, so that
    ``--resume`` continues exactly that run (``run_id`` given: ``resume="allow"``).

    Args:
        name: ``"wandb"`` or ``"trackio"``.
        out: the run's output folder.
        config: ``RunConfig.to_dict()``.
        run_id: the tracker run to continue (W&B id, trackio name), or None for a new one.
        sent_through: a resumed run's last step the stopped process may have sent (-1: none).
            Calls at or before it are not sent: neither service takes a value back (each would
            store a second value at that step), so the tracker keeps the stopped process's
            values of the updates done again.
    Raises:
        ImportError: the package is missing (the preflight refuses such a run first:
            :func:`check_report_to`).
    """

    def __init__(self, name: str, out: Path, config: dict, run_id: str | None = None,
                 sent_through: int = -1):
        import importlib

        self.module = importlib.import_module(name)
        self.sent_through = sent_through
        args: dict = {"project": "tba-lab", "config": config}
        if name == "wandb":
            args.update(name=out.name, dir=str(out))
            if run_id is not None:
                args.update(id=run_id, resume="allow")
        elif run_id is None:
            stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"  # unique within 1 s
            args.update(name=f"{out.name}-{stamp}", resume="never")
        else:
            args.update(name=run_id, resume="allow")
        run = self.module.init(**args)
        self.run_id: str | None = getattr(run, "id" if name == "wandb" else "name", None) or run_id
        self.steps_only_increase = name == "wandb"
        if self.steps_only_increase:  # every metric against the update count it is sent with
            self.module.define_metric(WANDB_STEP_METRIC)
            self.module.define_metric("*", step_metric=WANDB_STEP_METRIC)

    def scalars(self, values: dict, step: int) -> None:
        if step <= self.sent_through:
            return
        if self.steps_only_increase:  # a row of its own at W&B's next step, never a lower one
            self.module.log({**values, WANDB_STEP_METRIC: step})
        else:
            self.module.log(values, step=step)

    def text(self, tag: str, text: str, step: int) -> None:
        pass  # the config went in with init

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.module.finish()


def folder_tracker_runs(out: Path) -> dict[str, str]:
    """The tracker runs of a run whose checkpoint names none (written before checkpoints kept
    them): W&B's id and trackio's name were made from the output folder."""
    import re

    return {"wandb": re.sub(r"[^A-Za-z0-9_-]", "-", str(out.resolve()).strip("/"))[-120:],
            "trackio": out.name}


def make_reporters(cfg, out: Path, first_step: int, purge_step: int | None = None,
                   tracker_runs: dict | None = None, sent_through: int = -1) -> list:
    """The reporters ``cfg.report_to`` names, each sent the config once (as YAML text, at
    ``first_step``); [] when it names none.

    Args:
        cfg: the run's config; out: its output folder; first_step: the update it starts from.
        purge_step: a resumed run: TensorBoard hides every event of ``out/tensorboard`` at or
            after this step; None: a new run.
        tracker_runs: ``{report_to name: run id}`` of the run being resumed (W&B id, trackio
            name); a tracker not in it (or None) starts a new run.
        sent_through: a resumed run: the last step its stopped process may have sent to the
            trackers it continues (:class:`TrackerReporter`); -1 for a new run.
    Raises:
        ImportError: a named package is missing (the preflight refuses such a run first).
    """
    import yaml

    if not cfg.report_to:
        return []
    config = cfg.to_dict()
    runs = tracker_runs or {}
    reporters = [TensorBoardReporter(out / "tensorboard", purge_step) if name == "tensorboard"
                 else TrackerReporter(name, out, config, runs.get(name),
                                      sent_through if name in runs else -1)
                 for name in cfg.report_to]
    text = "```yaml\n" + yaml.safe_dump(config, sort_keys=False) + "```"
    for r in reporters:
        r.text("config", text, first_step)
    return reporters


def read_tensorboard(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of a run's ``tensorboard/`` folder, read with TensorBoard's
    own reader (``event_accumulator``): every scalar kept, the events a resume purged left out,
    values as stored (float32).

    Raises:
        ModuleNotFoundError: tensorboard is not installed (``pip install -e ".[tensorboard]"``).
    """
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(Path(run_dir) / "tensorboard"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def update_scalars(row: dict) -> dict:
    """The numbers of one ``metrics.jsonl`` row as tags: ``time/<key>`` for the ``*_seconds``,
    ``train/<key>`` for the rest (``step`` and ``wall_seconds`` are the axes, not values)."""
    return {(f"time/{k}" if k.endswith("_seconds") else f"train/{k}"): float(v)
            for k, v in row.items() if k not in ("step", "wall_seconds")
            and isinstance(v, (int, float)) and not isinstance(v, bool)}


# -------------------------------------------------------------------------------- console
def interactive() -> bool:
    """Whether a live bar can be drawn, and someone can see it: stderr is a terminal, or this is
    a Jupyter kernel (the test tqdm's own notebook detection uses) whose current request comes
    from a frontend that takes input (``allow_stdin`` of the execute request: true from
    JupyterLab, Notebook, VS Code; false from nbclient, which papermill and ``nbconvert
    --execute`` run notebooks with and which renders no widget)."""
    if sys.stderr.isatty():
        return True
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or "IPKernelApp" not in getattr(shell, "config", {}):
        return False
    return _frontend_takes_input(getattr(shell, "kernel", None))


def _frontend_takes_input(kernel) -> bool:
    """``allow_stdin`` of the kernel's current execute request: the request's own content
    (``Kernel.get_parent()``, ipykernel 6 and later), else what ipykernel recorded for it
    (``_allow_stdin``, set for every execute request, also seen from other threads); True when
    neither can be read (a kernel of another kind)."""
    try:
        content = kernel.get_parent().get("content", {})
    except Exception:  # no get_parent (ipykernel < 6), or no request in this thread
        content = {}
    if "allow_stdin" in content:
        return bool(content["allow_stdin"])
    return bool(getattr(kernel, "_allow_stdin", True))


class Console:
    """What a person watching sees: a budget-aware bar, plain status lines, or nothing.

    Args:
        cfg: the run's config (``max_steps``, ``max_minutes``, ``status_every_seconds``).
        show: False (``--no-progress``): nothing but warnings (:meth:`write`); :meth:`info`
            lines, the bar and the status lines are left out.
        first_step: the update the run starts from (a resume's checkpoint step).
        bar: a live bar (True) or status lines (False); None: :func:`interactive` decides.
    """

    def __init__(self, cfg, show: bool, first_step: int, bar: bool | None = None):
        self.cfg, self.show, self.first_step = cfg, show, first_step
        self.use_bar = show and (interactive() if bar is None else bar)
        self.bar = None
        self.budget = 60.0 * cfg.max_minutes  # seconds
        self.steps = cfg.training.max_steps or None
        self.next_status = float("inf")
        self.held_out = ""  # "accuracy 0.412 @ 120"

    def start(self, elapsed: float) -> None:
        """The training clock started ``elapsed`` seconds ago (a resume's used seconds)."""
        if self.show and self.first_step:
            self.write(f"resumed at update {self.first_step}, {elapsed:.0f} s of the "
                       f"{self.budget:.0f}-s budget used")
        if self.use_bar:
            from tqdm.auto import tqdm

            # the numbers first and short, so that they fit 80 columns with the bar
            desc = f"{self.cfg.algo}/{self.cfg.async_.mode}"
            if self.steps:
                self.bar = tqdm(total=self.steps, initial=self.first_step, desc=desc,
                                bar_format="{desc} {percentage:3.0f}%|{bar}| {n}/{total} updates"
                                           "{postfix}")
            else:
                self.bar = tqdm(total=round(self.budget), initial=round(elapsed), desc=desc,
                                bar_format="{desc} {percentage:3.0f}%|{bar}| {n:.0f}/{total} s"
                                           "{postfix}")
        elif self.show:
            self.next_status = time.time() + self.cfg.status_every_seconds

    def update(self, step: int, elapsed: float, stats: dict) -> None:
        """After update ``step``; ``stats``: ``updates_per_minute``, ``samples_per_minute``,
        ``staleness_mean`` (of the batch), ``staleness_max`` (of the run so far),
        ``reward_mean`` (any may be missing)."""
        if self.bar is not None:
            if self.steps:
                self.bar.update(step - self.bar.n)
            else:
                self.bar.update(min(elapsed, self.budget) - self.bar.n)
            post = [f"{_fmt(stats.get('updates_per_minute'), '.0f')} upd/min",
                    f"stale {_fmt(stats.get('staleness_mean'), '.1f')}"]
            self.bar.set_postfix_str(", ".join(post + ([self.held_out] if self.held_out else [])),
                                     refresh=False)
        elif time.time() >= self.next_status:
            self.next_status = time.time() + self.cfg.status_every_seconds
            print(self.status_line(step, elapsed, stats), flush=True)

    def status_line(self, step: int, elapsed: float, stats: dict) -> str:
        """One plain line: ``[ 120/540 s] step 311 | 156 upd/min | 1,240 samples/min | stale
        0.9 (max 3) | reward 0.41 | held-out accuracy 0.412 @ 280``."""
        steps = f"/{self.steps}" if self.steps else ""
        parts = [f"[{elapsed:4.0f}/{self.budget:.0f} s] step {step}{steps}",
                 f"{_fmt(stats.get('updates_per_minute'), '.0f')} upd/min",
                 f"{_fmt(stats.get('samples_per_minute'), ',.0f')} samples/min",
                 f"stale {_fmt(stats.get('staleness_mean'), '.1f')} "
                 f"(max {_fmt(stats.get('staleness_max'), '.0f')})",
                 f"reward {_fmt(stats.get('reward_mean'), '.2f')}"]
        if self.held_out:
            parts.append(f"held-out {self.held_out}")
        return " | ".join(parts)

    def evaluated(self, step: int, metric: str, value: float) -> None:
        """A held-out evaluation at ``step``: its headline ``metric`` (``accuracy``, or the
        task's first metric) is shown from now on."""
        self.held_out = f"{metric} {value:.3f} @ {step}"

    def info(self, msg: str) -> None:
        """A progress line (an interim evaluation): printed as :meth:`write` does unless
        ``show`` is off."""
        if self.show:
            self.write(msg)

    def write(self, msg: str) -> None:
        """A line above the bar (or plainly printed), also with ``show`` off: for warnings."""
        if self.bar is not None:
            self.bar.write(msg)
        else:
            print(msg, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.next_status = float("inf")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)
