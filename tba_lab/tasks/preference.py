"""Preference tuning against a learned reward model: the TBA paper's TL;DR task (Sec. 5.2) in
miniature, built by the kit from a seed. The paper reports the win rate of greedy summaries
against human references as judged by a "gold" RM, and perplexity under the SFT model as a
proxy for the KL to the starting policy; so does :class:`PreferenceTask` (``task.name:
preference``; held-out metrics ``win_rate``, ``gold_score``, ``proxy_reward``,
``perplexity_sft``, ``length``; reward: the learned RM's standardised score).

* **Posts** (:func:`make_post`): 3-6 sentences, key facts (events, each actor has one fixed
  event) and fillers (tastes, moods); a summary copies sentences of the post, comma-separated.
* **References** (:func:`make_reference`): one key fact 55% of the time, two 30%, three 15%, a
  filler item 20% (the train split's SFT demonstrations: 70%, so the SFT policy starts below
  the references). The gold optimum is every key fact and no filler.
* **Gold judge** (:func:`gold_score`, hidden from the policy): +1 per key fact covered, -0.5 per
  filler, -1 per item not in the post, -1 per repeat, -0.1 per word beyond 20. The win rate
  (:func:`win_rate`) counts a tie as 1/2.
* **Preference pairs** (:func:`make_pair`; TRL's ``{"prompt", "chosen", "rejected"}`` rows)
  shaped like a policy's samples and labelled by the gold judge. They never repeat an item, so
  the learned RM (:mod:`tba_lab.reward_model`) never learns that repeats are bad: a policy that
  optimises it too hard (small beta) pads with repeats (reward over-optimisation, Gao et al.
  2023).

Real models and data: ``preference.reward_model`` / ``preference.gold_model`` take a Hugging
Face sequence-classification folder (a different tokenizer scores the decoded text);
``task.train_path`` / ``task.test_path`` take TL;DR-format rows (``post`` or ``prompt``, and
``reference`` or ``summary``; the programmatic judge also needs ``key_facts``). See
docs/usage.md#the-other-tasks-preference-and-red-teaming.

Departures from the paper: synthetic posts with a closed vocabulary instead of Reddit; ~1M
parameter policy and RM (the paper: Pythia 410M/2.8B); a programmatic gold judge instead of a
6.9B RM; SFT demonstrations sloppier than the references (the paper's are the references);
perplexity on completion tokens only (no EOS). The RM starts from the SFT policy, as in the
paper. Results: docs/results/README.md#preference-and-red-teaming.

Run ``python -m tba_lab.tasks.preference`` to print a few posts, references and gold scores.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from tba_lab.paths import DATA_DIR
from tba_lab.registry import TASKS
from tba_lab.tasks import Task

TASK_DIR = DATA_DIR / "preference"
SFT_MODEL = "tiny-llama-preference"
RM_MODEL = "tiny-rm-preference"
PROMPT_TEMPLATE = "Post: {post}\nTL;DR:"

NAMES = ["Tom", "Ana", "Ben", "Mia", "Sam", "Lily", "Omar", "Zoe", "Leo", "Eva", "Raj", "Kim"]
VERBS = ["lost", "found", "broke", "fixed", "sold", "painted", "bought", "hid"]
OBJECTS = ["lamp", "bike", "keys", "phone", "car", "fence", "laptop", "guitar", "boat", "radio"]
# The event of each key actor is fixed (Tom always broke the lamp, ...), so an item is copied
# by naming the actor: no binding of actor, verb and object has to be inferred from the post.
EVENTS = [f"{n} {VERBS[i % len(VERBS)]} {OBJECTS[(3 * i) % len(OBJECTS)]}" for i, n in enumerate(NAMES)]
FILLERS = ["Max likes pizza", "Ivy likes tea", "Noah likes cake", "Ruby feels tired",
           "Finn feels happy", "Nina feels bored"]

# Gold judge weights (gold_score). A summary of all key facts and nothing else scores n_key.
COVER, FILLER, HALLUCINATION, REPEAT = 1.0, -0.5, -1.0, -1.0
MAX_WORDS, PER_EXTRA_WORD = 20, -0.1
# Reference summaries: P(1, 2, 3 key facts) (capped at the post's count), P(one filler item).
REFERENCE_KEYS = (0.55, 0.30, 0.15)
# P(one filler item): the held-out references (test split) and the SFT demonstrations (train
# split), written by a sloppier writer, so the SFT policy starts below the references.
REFERENCE_FILLER, DEMO_FILLER = 0.2, 0.7


# ------------------------------------------------------------------------------ data
def format_prompt(post: str) -> str:
    """The prompt of a post: ``"Post: {post}\\nTL;DR:"``; the model continues ``" <summary>"``."""
    return PROMPT_TEMPLATE.format(post=post)


def make_post(rng: random.Random) -> dict:
    """One problem ``{"post", "key_facts", "filler_facts"}`` drawn with ``rng``.

    2-4 key facts (events of :data:`EVENTS`, e.g. ``"Tom lost lamp"``) and 1-2 filler facts
    (:data:`FILLERS`, tastes and moods), sentences shuffled; the verb is the visible cue
    (``likes``/``feels`` = filler). Each actor has one fixed event, so a summary item is a
    sentence of the post copied verbatim by naming its actor. The facts are stored as their
    summary items (the sentence without its ``.``), in post order.
    """
    sentences = ([("key", e) for e in rng.sample(EVENTS, rng.randint(2, 4))]
                 + [("filler", f) for f in rng.sample(FILLERS, rng.randint(1, 2))])
    rng.shuffle(sentences)
    return {"post": " ".join(s[1] + "." for s in sentences),
            "key_facts": [s[1] for s in sentences if s[0] == "key"],
            "filler_facts": [s[1] for s in sentences if s[0] == "filler"]}


def join_items(items: list[str]) -> str:
    """A summary from its items: ``"Tom broke lamp, Ana likes pizza."`` ("" for none)."""
    return ", ".join(items) + "." if items else ""


def make_reference(rng: random.Random, problem: dict, filler: float = REFERENCE_FILLER) -> str:
    """A reference summary of moderate quality (see the module docstring for the mix); one
    filler item at a random place with probability ``filler``."""
    keys = problem["key_facts"]
    k = min(len(keys), rng.choices((1, 2, 3), weights=REFERENCE_KEYS)[0])
    chosen = sorted(rng.sample(range(len(keys)), k))
    items = [keys[i] for i in chosen]
    if problem["filler_facts"] and rng.random() < filler:
        items.insert(rng.randint(0, len(items)), rng.choice(problem["filler_facts"]))
    return join_items(items)


def _hallucinate(rng: random.Random, problem: dict) -> str:
    """An item that is no fact of the post, like a slip of a sampling policy: the event of an
    actor who is not in the post (60%), or a key fact with its actor, verb or object swapped
    for another of the vocabulary (40%)."""
    facts = set(problem["key_facts"]) | set(problem["filler_facts"])
    for _ in range(20):
        if rng.random() < 0.6:
            item = rng.choice(EVENTS)
        else:
            parts = rng.choice(problem["key_facts"]).split()
            slot = rng.randrange(3)
            parts[slot] = rng.choice((NAMES, VERBS, OBJECTS)[slot])
            item = " ".join(parts)
        if item not in facts:
            return item
    return "nobody lost anything"


def make_candidate(rng: random.Random, problem: dict) -> str:
    """A candidate summary for a preference pair, shaped like a policy's samples: 0..n_key key
    facts (uniform; in post order 80% of the time), 0-2 filler items (50/35/15%), 0-2
    hallucinated items (70/22/8%); NEVER a repeated item (the RM's blind spot)."""
    keys = problem["key_facts"]
    k = rng.randint(0, len(keys))
    idx = rng.sample(range(len(keys)), k)
    items = [keys[i] for i in (sorted(idx) if rng.random() < 0.8 else idx)]
    fillers = problem["filler_facts"]
    n_fill = min(len(fillers), rng.choices((0, 1, 2), weights=(0.5, 0.35, 0.15))[0])
    extra = rng.sample(fillers, n_fill)
    for _ in range(rng.choices((0, 1, 2), weights=(0.7, 0.22, 0.08))[0]):
        extra.append(_hallucinate(rng, problem))
    for item in extra:
        if item not in items:
            items.insert(rng.randint(0, len(items)), item)
    if not items:
        items = [rng.choice(keys)]
    return join_items(items)


def make_pair(rng: random.Random, problem: dict, tries: int = 10) -> dict | None:
    """A preference pair ``{"prompt", "chosen", "rejected"}`` (summaries with a leading space)
    labelled by :func:`gold_score`, or None when ``tries`` draws all tied."""
    for _ in range(tries):
        a, b = make_candidate(rng, problem), make_candidate(rng, problem)
        ga, gb = gold_score(problem, a), gold_score(problem, b)
        if ga != gb:
            chosen, rejected = (a, b) if ga > gb else (b, a)
            return {"prompt": format_prompt(problem["post"]), "chosen": " " + chosen,
                    "rejected": " " + rejected}
    return None


def make_splits(seed: int = 0, num_train: int = 20000, num_test: int = 500,
                num_pairs: int = 3000, heldout_pairs: int = 400) -> tuple[list, list, list]:
    """Deterministic train/test problems and preference pairs; test posts never appear in
    train, and the pairs are drawn on posts of their own (neither train nor test).

    Returns:
        (train, test, pairs): problems ``{"post", "reference", "key_facts", "filler_facts"}``
        and pairs ``{"prompt", "chosen", "rejected", "heldout"}`` (the last ``heldout_pairs``
        are held out for the RM's pair accuracy).
    Raises:
        ValueError: a count is not positive.
    """
    if min(num_train, num_test, num_pairs) < 1 or not 0 <= heldout_pairs < num_pairs:
        raise ValueError("num_train, num_test and num_pairs must be >= 1 and "
                         "0 <= heldout_pairs < num_pairs")
    rng = random.Random(seed)
    seen: set[str] = set()

    def fresh(n):
        out = []
        while len(out) < n:
            p = make_post(rng)
            if p["post"] not in seen:
                seen.add(p["post"])
                out.append(p)
        return out

    test, train = fresh(num_test), fresh(num_train)
    for p in test:
        p["reference"] = make_reference(rng, p)
    for p in train:
        p["reference"] = make_reference(rng, p, DEMO_FILLER)
    pairs = []
    while len(pairs) < num_pairs:
        pair = make_pair(rng, fresh(1)[0])
        if pair is not None:
            pair["heldout"] = len(pairs) >= num_pairs - heldout_pairs
            pairs.append(pair)
    order = ("post", "reference", "key_facts", "filler_facts")
    return ([{k: p[k] for k in order} for p in train], [{k: p[k] for k in order} for p in test],
            pairs)


# ------------------------------------------------------------------------------ gold judge
def summary_items(summary: str) -> list[str]:
    """The items of a summary: split on commas after dropping one final ``.``; whitespace
    collapsed, lower-cased; empty items dropped."""
    text = summary.strip()
    if text.endswith("."):
        text = text[:-1]
    return [" ".join(x.split()).lower() for x in text.split(",") if x.strip()]


def gold_breakdown(problem: dict, summary: str) -> dict:
    """The gold judge's counts and score for ``summary`` of ``problem``.

    Args:
        problem: needs ``key_facts`` (and optionally ``filler_facts``): lists of items.
        summary: the summary text (a completion, leading space allowed).
    Returns:
        ``{"covered", "filler", "hallucinated", "repeated", "words", "score"}``: ``score`` =
        COVER * covered + FILLER * filler + HALLUCINATION * hallucinated + REPEAT * repeated
        + PER_EXTRA_WORD * max(0, words - MAX_WORDS) (weights at the top of the module).
    Raises:
        KeyError: ``problem`` has no ``key_facts`` (use ``preference.gold_model`` then).
    """
    keys = {" ".join(f.split()).lower() for f in problem["key_facts"]}
    fillers = {" ".join(f.split()).lower() for f in problem.get("filler_facts") or []}
    seen: set[str] = set()
    covered = filler = hallucinated = repeated = 0
    for item in summary_items(summary):
        if item in seen:
            repeated += 1
            continue
        seen.add(item)
        if item in keys:
            covered += 1
        elif item in fillers:
            filler += 1
        else:
            hallucinated += 1
    words = len(summary.replace(",", " ").replace(".", " ").split())
    score = (COVER * covered + FILLER * filler + HALLUCINATION * hallucinated + REPEAT * repeated
             + PER_EXTRA_WORD * max(0, words - MAX_WORDS))
    return {"covered": covered, "filler": filler, "hallucinated": hallucinated,
            "repeated": repeated, "words": words, "score": round(score, 6)}


def gold_score(problem: dict, summary: str) -> float:
    """The gold judge's score of ``summary`` (:func:`gold_breakdown`'s ``score``), a float."""
    return gold_breakdown(problem, summary)["score"]


def win_rate(policy_scores: list[float], reference_scores: list[float]) -> float:
    """Fraction of problems where the policy's summary beats the reference's under the gold
    judge: 1 for a win, 1/2 for a tie, 0 for a loss, averaged (the paper's win rate).

    Raises:
        ValueError: the lists differ in length or are empty.
    """
    if not policy_scores or len(policy_scores) != len(reference_scores):
        raise ValueError(f"win_rate needs two equal, non-empty lists (got {len(policy_scores)} "
                         f"and {len(reference_scores)})")
    return sum(1.0 if p > r else 0.5 if p == r else 0.0
               for p, r in zip(policy_scores, reference_scores)) / len(policy_scores)


# ------------------------------------------------------------------------------ loading
def _problem(row: dict, where: str) -> dict:
    """A loaded row as a problem ``{"prompt", "reference", ...facts}``; ValueError names the fix."""
    if isinstance(row.get("prompt"), str):
        prompt = row["prompt"]
    elif isinstance(row.get("post"), str):
        post = row["post"]
        if isinstance(row.get("title"), str):
            post = f"{row['title']}\n{post}"
        if isinstance(row.get("subreddit"), str):
            post = f"SUBREDDIT: r/{row['subreddit']}\n{post}"
        prompt = format_prompt(post)
    else:
        raise ValueError(f"{where}: no string field 'post' or 'prompt' (keys: {sorted(row)}); "
                         f"fix: give each row a 'post' (or a ready 'prompt') and a 'reference'")
    ref = row.get("reference", row.get("summary"))
    if not isinstance(ref, str):
        raise ValueError(f"{where}: no string field 'reference' or 'summary' (keys: "
                         f"{sorted(row)}); fix: add the reference summary")
    out = {"prompt": prompt, "reference": ref}
    for key in ("key_facts", "filler_facts"):
        if isinstance(row.get(key), list):
            out[key] = [str(x) for x in row[key]]
    return out


def load_rows(source: str, split: str) -> list[dict]:
    """Problems from a ``.jsonl`` file (read directly, errors name the line), a ``.json`` file,
    a dataset folder or a hub name (``datasets``, split ``split``). Local files are read as
    they are now (:func:`~tba_lab.tasks.gsm8k.load_local_dataset`), never from a cache.

    Raises:
        FileNotFoundError: a local-looking path that does not exist.
        ValueError: a row without a post/prompt or reference/summary field (names the fix).
    """
    from tba_lab.tasks.gsm8k import _looks_like_path, load_local_dataset, read_jsonl

    path = Path(source).expanduser()
    if path.is_file() and path.suffix.lower() == ".jsonl":
        rows = read_jsonl(path)
        return [_problem(r, f"{path}: row {i}") for i, r in enumerate(rows)]
    if not path.exists() and _looks_like_path(source):
        raise FileNotFoundError(f"preference data {source!r} not found (resolved to {path})")
    if path.exists():  # as the files are now, not datasets' cache of an older copy
        ds = load_local_dataset(path, split)
    else:
        import datasets  # lazy: heavy import, not needed for the embedded JSONL

        ds = datasets.load_dataset(source, split=split)
    return [_problem(r, f"{source}: row {i}") for i, r in enumerate(ds.to_list())]


# ------------------------------------------------------------------------------ the task
@dataclass
class PreferenceConfig:
    reward_model: str = ""       # RM folder (HF sequence classification, 1 output); "" = data/tiny-rm-preference
    gold_model: str = ""         # judge of the win rate: "" = the programmatic gold judge (needs key_facts); or an RM folder
    sft_model: str = ""          # causal LM for perplexity_sft; "" = model.path (the starting policy)
    normalize: bool = True       # standardise RM scores with score_mean/score_std of the RM's rm_summary.json (if present)
    reward_scale: float = 1.0    # reward = reward_scale * (standardised) RM score
    rm_batch_size: int = 64      # texts per RM / SFT forward pass

    def validate(self) -> None:
        from tba_lab.config import check

        check(math.isfinite(self.reward_scale) and self.reward_scale > 0,
              f"preference.reward_scale={self.reward_scale}: must be a positive number")
        check(self.rm_batch_size >= 1, f"preference.rm_batch_size={self.rm_batch_size}: must be >= 1")


def _model_folder_problem(field: str, value: str, fix: str, seq_cls: bool) -> str | None:
    """What is wrong with ``value`` as a local model folder for ``field`` (None: nothing)."""
    from tba_lab.preflight import TOKENIZER_FILES

    p = Path(value).expanduser()
    shown = f"{field}={value!r}"
    if not p.is_dir():
        return f"{shown}: no such folder ({p.resolve()}); fix: {fix}"
    cfg_file = p / "config.json"
    if not cfg_file.is_file():
        return f"{shown} has no config.json (not saved with save_pretrained); fix: {fix}"
    if not any((p / f).is_file() for f in TOKENIZER_FILES):
        return f"{shown} has no tokenizer files; fix: save its tokenizer into it ({fix})"
    if seq_cls:
        try:
            conf = json.loads(cfg_file.read_text())
        except ValueError:
            return f"{shown}: config.json is not valid JSON; fix: {fix}"
        archs = conf.get("architectures") or []
        labels = len(conf.get("id2label") or {0: ""})
        if archs and not any(a.endswith("ForSequenceClassification") for a in archs):
            return (f"{shown} is a {archs[0]}, not a sequence-classification reward model; fix: "
                    f"{fix}")
        if labels != 1:
            return (f"{shown} has {labels} output labels; a reward model has one (num_labels=1); "
                    f"fix: {fix}")
    return None


class PreferenceTask(Task):
    """Summaries scored by a learned reward model; win rate against references under a gold
    judge (see the module docstring).

    Problems: dicts ``{"prompt", "reference"[, "key_facts", "filler_facts"]}``. Auxiliary
    models (RM, gold RM, SFT model) load lazily on first use and are cached on the instance.
    """
    name = "preference"
    section = "preference"
    config_class = PreferenceConfig
    default_model = SFT_MODEL
    default_source = {"train": str(TASK_DIR / "train.jsonl"), "test": str(TASK_DIR / "test.jsonl")}
    # A summary is one line after "TL;DR:"; a base model that has written it may go on with the
    # next example of the prompt's pattern ("\nPost: ... TL;DR: ..."), which the reward model
    # would then score with it. The embedded SFT policy ends with EOS and never writes these.
    stop_strings = ("\nPost:", "\nTL;DR:")

    def __init__(self, cfg=None):
        super().__init__(cfg)
        if self.options is None:
            self.options = PreferenceConfig()
        self._rm = self._gold = self._sft = None

    # -------------------------------------------------------------- config
    @classmethod
    def sources(cls, cfg) -> dict[str, str]:
        task = None if cfg is None else cfg.task
        return {s: (task and getattr(task, f"{s}_path")) or cls.default_source[s]
                for s in ("train", "test")}

    def source(self, split: str) -> str:
        if split not in ("train", "test"):
            raise ValueError(f"split={split!r}: choose 'train' or 'test'")
        return self.sources(self.cfg)[split]

    @staticmethod
    def reward_model_dir(options) -> str:
        """The RM folder ``preference.reward_model`` names ("" = the embedded one)."""
        return options.reward_model or str(DATA_DIR / RM_MODEL)

    @classmethod
    def check_config(cls, cfg) -> None:
        """Data files, the RM folder, the gold RM / SFT model folders and the gold judge's needs.

        Raises:
            ConfigError: naming ``task.*_path`` or ``preference.*`` and the fix.
        """
        from tba_lab.config import check

        o = cfg.section("preference")
        for split, source in cls.sources(cfg).items():
            p = Path(source).expanduser()
            if source == cls.default_source[split] or p.suffix.lower() in (".jsonl", ".json"):
                check(p.is_file(), f"task.{split}_path={source!r} does not exist; run `tba-lab sft "
                                   f"--task preference` to write the embedded task or point it at "
                                   f"a TL;DR-format JSONL file (post/prompt, reference/summary)")
        if o.reward_model:
            fix = ("set preference.reward_model to a folder saved by save_pretrained from an "
                   "AutoModelForSequenceClassification with num_labels=1, or to \"\" for the "
                   "embedded RM")
        else:
            fix = ("run `tba-lab train-rm` (or `tba-lab sft --task preference`) to build the "
                   "embedded RM, or set preference.reward_model to a sequence-classification "
                   "RM folder")
        problem = _model_folder_problem("preference.reward_model", cls.reward_model_dir(o), fix,
                                        seq_cls=True)
        check(problem is None, problem or "")
        if o.gold_model:
            problem = _model_folder_problem(
                "preference.gold_model", o.gold_model, "set it to a sequence-classification RM "
                "folder (num_labels=1), or to \"\" for the programmatic gold judge", seq_cls=True)
            check(problem is None, problem or "")
        if o.sft_model:
            problem = _model_folder_problem(
                "preference.sft_model", o.sft_model, "set it to a causal LM folder saved by "
                "save_pretrained, or to \"\" for model.path", seq_cls=False)
            check(problem is None, problem or "")
        if not o.gold_model:
            test = cls.sources(cfg)["test"]
            p = Path(test).expanduser()
            if p.is_file() and p.suffix.lower() == ".jsonl":
                with p.open(encoding="utf-8") as f:
                    first = next((line for line in f if line.strip()), "{}")
                try:
                    row = json.loads(first)
                except ValueError:
                    row = {"key_facts": []}  # the loader reports the bad line with its number
                check(isinstance(row, dict) and "key_facts" in row,
                      f"task.test_path={test!r} has no 'key_facts' field, which the programmatic "
                      f"gold judge needs (preference.gold_model=\"\"); fix: set "
                      f"preference.gold_model to a sequence-classification gold RM folder")

    # -------------------------------------------------------------- problems
    def load(self, split: str) -> list[dict]:
        """Problems of ``split`` (see :func:`load_rows`)."""
        return load_rows(self.source(split), split)

    def format_prompt(self, problem: dict) -> str:
        return problem["prompt"] if "prompt" in problem else format_prompt(problem["post"])

    # -------------------------------------------------------------- models (lazy)
    def reward_model(self):
        """The learned RM (:class:`tba_lab.reward_model.RewardModel`), loaded on first use with
        its standardisation (``score_mean``/``score_std`` of its ``rm_summary.json``) when
        ``preference.normalize`` is on."""
        if self._rm is None:
            from tba_lab.reward_model import RewardModel

            self._rm = RewardModel.from_pretrained(self.reward_model_dir(self.options),
                                                   normalize=self.options.normalize)
        return self._rm

    def _sft_model(self):
        if self._sft is None:
            from tba_lab.models import load_policy
            from tba_lab.tasks import embedded_model_dir

            path = (self.options.sft_model or (self.cfg.model.path if self.cfg is not None else "")
                    or str(embedded_model_dir(self.name)))
            model, tok = load_policy(path)
            model.eval()
            self._sft = (model, tok)
        return self._sft

    def _gold_model(self):
        if self._gold is None:
            from tba_lab.reward_model import RewardModel

            self._gold = RewardModel.from_pretrained(self.options.gold_model, normalize=False)
        return self._gold

    # -------------------------------------------------------------- rewards and metrics
    def rewards(self, problems: list, completions: list[str]) -> list[float]:
        """``reward_scale`` x the RM's (standardised) score of ``prompt + completion``: floats
        of a few units (standardised: mean 0, sd 1 over the reference summaries of the train
        split). A non-finite score is returned as it is (``rollout`` drops that row)."""
        texts = [self.format_prompt(p) + c for p, c in zip(problems, completions)]
        scores = self.reward_model().score(texts, batch_size=self.options.rm_batch_size)
        return [self.options.reward_scale * s for s in scores]

    def gold_scores(self, problems: list, summaries: list[str]) -> list[float]:
        """Gold scores of ``summaries`` (one per problem): the programmatic judge, or the RM
        ``preference.gold_model`` on ``prompt + summary``."""
        if self.options.gold_model:
            texts = [self.format_prompt(p) + s for p, s in zip(problems, summaries)]
            return self._gold_model().score(texts, batch_size=self.options.rm_batch_size)
        return [gold_score(p, s) for p, s in zip(problems, summaries)]

    def perplexity(self, problems: list, completions: list[str]) -> float:
        """exp(mean NLL per completion token) under the SFT model (token-weighted over all
        rows; completion tokens only, no EOS; temperature 1). NaN when no completion has a
        token."""
        import torch

        model, tok = self._sft_model()
        rows = []
        for p, c in zip(problems, completions):
            prompt = tok(self.format_prompt(p))["input_ids"]
            resp = tok(c, add_special_tokens=False)["input_ids"]
            if resp:
                rows.append((prompt, resp))
        if not rows:
            return float("nan")
        total, count = 0.0, 0
        bs = self.options.rm_batch_size
        with torch.no_grad():
            for start in range(0, len(rows), bs):
                chunk = rows[start:start + bs]
                length = max(len(p) + len(r) for p, r in chunk)
                ids = torch.full((len(chunk), length), tok.pad_token_id, dtype=torch.long)
                attn = torch.zeros_like(ids)
                labels = torch.full_like(ids, -100)
                for i, (p, r) in enumerate(chunk):  # right padding: positions start at 0
                    ids[i, :len(p) + len(r)] = torch.tensor(p + r)
                    attn[i, :len(p) + len(r)] = 1
                    labels[i, len(p):len(p) + len(r)] = torch.tensor(r)
                logits = model(input_ids=ids, attention_mask=attn).logits.float()
                logp = torch.log_softmax(logits[:, :-1], dim=-1)
                tgt = labels[:, 1:]
                mask = tgt != -100
                nll = -logp.gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1)
                total += float(nll[mask].sum())
                count += int(mask.sum())
        return math.exp(total / count)

    def metrics(self, problems: list, completions: list[str], rewards: list[float]) -> dict[str, float]:
        """``{"win_rate", "gold_score", "proxy_reward", "perplexity_sft", "length"}``: win rate
        of the completions against the references under the gold judge (ties 1/2), the mean
        gold score, the mean RM reward (``rewards``), the SFT model's perplexity of the
        completions and their mean length in words."""
        gold = self.gold_scores(problems, completions)
        refs = self.gold_scores(problems, [" " + p["reference"].strip() for p in problems])
        return {"win_rate": win_rate(gold, refs),
                "gold_score": sum(gold) / len(gold),
                "proxy_reward": sum(rewards) / len(rewards),
                "perplexity_sft": self.perplexity(problems, completions),
                "length": sum(len(c.split()) for c in completions) / len(completions)}

    # -------------------------------------------------------------- embedded build
    @classmethod
    def build_embedded(cls, output_dir=None, task_dir=None, seed: int = 0, steps: int | None = None,
                       rm_dir=None, rm_steps: int = 150, steps2: int = 0,
                       num_threads: int = 1, eval_size: int = 300, **kwargs) -> dict:
        """``tba-lab sft --task preference``: write ``data/preference`` (train/test/pairs),
        SFT the policy ``data/tiny-llama-preference`` on the train split's demonstrations
        (:func:`tba_lab.models.train_sft`: ``steps`` updates of 64 rows at lr 2e-3 drawn from
        20,000 distinct posts, so the policy learns to copy rather than memorise posts; an
        optional warm restart of ``steps2`` updates of 32 rows at lr 1e-3), then train the RM
        ``data/tiny-rm-preference`` from it (:func:`tba_lab.reward_model.train_reward_model`).

        Returns:
            the SFT summary (also ``output_dir/sft_summary.json``): greedy ``win_rate``,
            ``gold_score`` and ``length`` on the first ``eval_size`` test problems, the sampled
            (temperature 0.6) win rate, and the RM's summary under ``reward_model``.
        """
        import time

        import torch

        from tba_lab.models import build_model, build_tokenizer, train_sft
        from tba_lab.tasks.gsm8k import write_jsonl

        torch.set_num_threads(num_threads)
        output_dir = Path(output_dir or DATA_DIR / SFT_MODEL)
        task_dir = Path(task_dir or TASK_DIR)
        steps = 300 if steps is None else steps
        train, test, pairs = make_splits(seed=seed)
        write_jsonl(train, task_dir / "train.jsonl")
        write_jsonl(test, task_dir / "test.jsonl")
        write_jsonl(pairs, task_dir / "pairs.jsonl")

        prompts = [format_prompt(r["post"]) for r in train]
        targets = [" " + r["reference"] for r in train]
        vocab_text = " ".join(NAMES + VERBS + OBJECTS + FILLERS + ["nobody", "anything"]) + ", ."
        tokenizer = build_tokenizer(prompts + targets + [vocab_text] + [
            format_prompt(r["post"]) + " " + r["reference"] for r in test])
        model = build_model(tokenizer, seed=seed)
        t0 = time.time()
        # num_threads=1: on 2 shared cores two torch threads ran 10x slower per step
        train_sft(model, tokenizer, prompts, targets, seed=seed, steps=steps, batch_size=64,
                  lr=2e-3, log_every=50)
        if steps2:
            train_sft(model, tokenizer, prompts, targets, seed=seed + 1, steps=steps2,
                      batch_size=32, lr=1e-3, log_every=100)
        wall = time.time() - t0
        from tba_lab.checkpoint import check_finite_weights

        check_finite_weights(model.named_parameters(), f"save {output_dir}")  # FloatingPointError
        output_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(output_dir)
        tokenizer.save_pretrained(output_dir)

        from tba_lab.reward_model import train_reward_model

        rm_summary = train_reward_model(pairs_path=task_dir / "pairs.jsonl", init_from=output_dir,
                                        output_dir=rm_dir or DATA_DIR / RM_MODEL, seed=seed,
                                        steps=rm_steps, num_threads=num_threads,
                                        standardize_texts=[format_prompt(r["post"]) + " "
                                                           + r["reference"] for r in train[:1000]])
        summary = {"steps": steps, "steps2": steps2, "wall_seconds": round(wall, 1), "seed": seed,
                   "num_parameters": sum(p.numel() for p in model.parameters()),
                   **sft_eval(output_dir, task_dir / "test.jsonl", rm_dir or DATA_DIR / RM_MODEL,
                              eval_size, seed=seed),
                   "reward_model": rm_summary}
        (output_dir / "sft_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary


def sft_eval(policy_dir, test_path, rm_dir, n: int = 500, seed: int = 0,
             max_new_tokens: int = 40, temperature: float = 0.6, samples: int = 4) -> dict:
    """Greedy metrics of a policy on the first ``n`` test problems, and the win rate of
    ``samples`` samples at ``temperature`` per problem (the headroom RL can use).

    Returns:
        ``{"win_rate", "gold_score", "proxy_reward", "perplexity_sft", "length",
        "sampled_win_rate", "sampled_any_win"}`` (the last: fraction of problems where at
        least one sample beats the reference).
    """
    import torch

    from tba_lab.config import from_dict
    from tba_lab.eval import evaluate
    from tba_lab.models import load_policy
    from tba_lab.rollout import rollout
    from tba_lab.rollout.backend import TransformersBackend

    cfg = from_dict({"model": {"path": str(policy_dir)},
                     "task": {"name": "preference", "test_path": str(test_path)},
                     "preference": {"reward_model": str(rm_dir)}})
    task = PreferenceTask(cfg)
    model, tok = load_policy(policy_dir)
    model.eval()
    backend = TransformersBackend(model, tok)
    problems = task.load("test")[:n]
    out = evaluate(task, backend, problems, max_new_tokens)
    torch.manual_seed(seed)
    batch = rollout(backend, task, problems, samples, temperature, max_new_tokens)
    gold = task.gold_scores([problems[r.prompt_id] for r in batch.rollouts], batch.completions)
    refs = task.gold_scores(problems, [" " + p["reference"] for p in problems])
    wins = [1.0 if g > refs[r.prompt_id] else 0.5 if g == refs[r.prompt_id] else 0.0
            for g, r in zip(gold, batch.rollouts)]
    any_win = {r.prompt_id for g, r in zip(gold, batch.rollouts) if g > refs[r.prompt_id]}
    out["sampled_win_rate"] = sum(wins) / len(wins)
    out["sampled_any_win"] = len(any_win) / len(problems)
    return {k: round(float(v), 4) for k, v in out.items()}


if __name__ != "__main__":  # `python -m` runs a second copy; the package's own one registers
    TASKS.register(PreferenceTask)

if __name__ == "__main__":
    _train, _test, _pairs = make_splits(seed=0, num_train=3, num_test=1, num_pairs=2, heldout_pairs=1)
    for row in _train:
        print(format_prompt(row["post"]), row["reference"], gold_score(row, row["reference"]))
    print(_pairs[0])
