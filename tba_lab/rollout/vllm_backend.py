"""The vLLM generation backend (``model.backend: vllm``): an in-process engine in each searcher,
for runs whose GPUs are limited by generation rather than training (paged KV cache, continuous
batching, CUDA graphs). Entry points: :class:`VllmBackend`, :func:`engine_kwargs`,
:func:`sampling_kwargs`, :func:`to_generations`.

Same contract as :class:`~tba_lab.rollout.backend.TransformersBackend`: prompt ids in,
prompt-major :class:`~tba_lab.rollout.backend.Generations` out, each response cut after its
first EOS (kept), behaviour log-probs of the sampled tokens under softmax(logits / T) (none for
greedy), new weights through ``load_weights`` with Hugging Face names.

Written against vLLM 0.33.0 (torch 2.14.0), read from its source; another version may rename
what this relies on, so check these first:

* ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (``vllm/envs.py``, ``vllm/v1/engine/llm_engine.py``):
  no engine process, since a daemonic searcher may not have children; set before the import.
* weights: ``LLM.apply_model(fn)`` calls ``fn`` on the unwrapped model in-process (no
  pickling; ``vllm/v1/worker/worker_base.py``); the model's ``load_weights`` takes HF names and
  fuses q/k/v itself (``vllm/model_executor/models/llama.py``). The prefix cache is reset
  after each load, or prompts would reuse keys and values of the old weights.
* log-probs: ``logprobs_mode="processed_logprobs"`` gives log_softmax(logits / T) in float32
  (``vllm/v1/sample/sampler.py``), what the trainer scores; the default ``raw_logprobs``
  ignores the temperature. ``logprobs=0`` gives the sampled token's entry per position, as
  dicts or ``FlatLogprobs`` (``vllm/logprobs.py``).
* EOS: ``stop_token_ids`` stay in ``token_ids`` (``vllm/v1/core/sched/utils.py``); no
  detokenizing (the kit tokenizes; the "Chat template warmup failed" log line is harmless),
  except for a task with stop strings (GSM8K's "Question:"): vLLM matches ``stop`` only on
  detokenized text, so the engine then loads the tokenizer and detokenizes, keeping special
  tokens in that text (``skip_special_tokens=False``: a special ``<|im_end|>`` stop is seen);
  the tokens that complete the stop string stay in ``token_ids`` and
  :func:`~tba_lab.rollout.rollout` cuts each row after them.
  ``generation_config="vllm"`` ignores the checkpoint's sampling defaults.
* sampling: full vocabulary, neutral penalties; greedy needs ``n=1``, so each prompt is sent K
  times; outputs come per prompt in request order, rows sorted by ``index`` (``vllm/outputs.py``).
* dtype: the policy's (``"auto"`` would run a float32 checkpoint in bfloat16 and the behaviour
  log-probs would drift from the trainer's float32 scoring).

CI has no GPU and no vLLM: the tests check the plain-Python parts (:func:`to_generations` on
outputs shaped like 0.33's, a fake engine sampling from the embedded model, the kwargs, the
weight hand-off through a fake ``apply_model``, :meth:`VllmBackend.check_config`).
"""
from __future__ import annotations

import importlib.util
import os
import warnings
from dataclasses import dataclass
from typing import Iterable

import torch

from tba_lab.registry import BACKENDS
from tba_lab.rollout.backend import Generations, cut_at_eos, eos_token_ids

VLLM_VERSION = "0.33.0"     # the version this module was written against
VLLM_TORCH = "2.14.0"       # the torch it pins
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class VllmConfig:
    """Options of the vLLM backend (YAML section ``vllm:``), passed to ``vllm.LLM``."""
    gpu_memory_utilization: float = 0.4  # fraction of the GPU's memory this engine may take (weights, activations, KV cache); searchers sharing a GPU split it
    enforce_eager: bool = True          # True: no CUDA graphs (faster start, less memory); False: graphs, faster decoding of large models
    enable_prefix_caching: bool = True  # reuse a prompt's KV blocks across its K samples; reset after every weight load
    dtype: str = ""                     # "" = the policy's dtype (float32 for the embedded model); float32 | bfloat16 | float16 (not the trainer's: behaviour log-probs drift from its scoring)
    max_model_len: int = 0              # prompt + response tokens per row; 0 = the checkpoint's max_position_embeddings

    def validate(self) -> None:
        """Raises :class:`~tba_lab.config.ConfigError` naming the bad field."""
        from tba_lab.config import check, check_choice

        check(0 < self.gpu_memory_utilization <= 1,
              f"vllm.gpu_memory_utilization={self.gpu_memory_utilization}: give a fraction in "
              f"(0, 1] of one GPU's memory (searchers sharing a GPU need their sum <= 1)")
        check_choice(self.dtype, ("",) + DTYPES, "vllm.dtype")
        check(self.max_model_len >= 0,
              f"vllm.max_model_len={self.max_model_len}: give tokens (> 0), or 0 for the "
              f"checkpoint's")


def _import_vllm():
    """``import vllm`` with its engine kept in this process (see the module docstring).

    Raises:
        RuntimeError: ``VLLM_ENABLE_V1_MULTIPROCESSING`` is set to something other than 0
            (the engine would need a child process, which a daemonic searcher may not start,
            and weights would be pickled to it).
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":
        raise RuntimeError("model.backend=vllm runs the engine inside the searcher process: "
                           "unset VLLM_ENABLE_V1_MULTIPROCESSING or set it to 0")
    import vllm

    return vllm


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"`` (vLLM's spelling).

    Raises:
        ValueError: a dtype vLLM cannot run the model in.
    """
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"vLLM runs models in {list(DTYPES)}, not {name}")
    return name


def _task_stops(cfg) -> tuple[str, ...]:
    """The stop strings of the run's task (``cfg.task.name``; () for a task without any)."""
    from tba_lab.registry import TASKS

    return tuple(getattr(TASKS.get(cfg.task.name), "stop_strings", ()) or ())


def engine_kwargs(cfg, dtype: torch.dtype, seed: int) -> dict:
    """Keyword arguments of ``vllm.LLM`` for ``cfg`` (pure; see the module docstring for each).

    Args:
        cfg: the run's :class:`~tba_lab.config.RunConfig` (``cfg.model.path``, ``cfg.vllm``).
        dtype: the policy's parameter dtype; ``cfg.vllm.dtype`` overrides it when set.
        seed: the engine's sampling seed.
    """
    o = cfg.vllm
    kw = dict(model=str(cfg.model.path), dtype=o.dtype or dtype_name(dtype), seed=int(seed),
              gpu_memory_utilization=float(o.gpu_memory_utilization),
              enforce_eager=bool(o.enforce_eager),
              enable_prefix_caching=bool(o.enable_prefix_caching),
              logprobs_mode="processed_logprobs", generation_config="vllm",
              skip_tokenizer_init=not _task_stops(cfg), tensor_parallel_size=1,
              disable_log_stats=True)
    if o.max_model_len:
        kw["max_model_len"] = int(o.max_model_len)
    return kw


def sampling_kwargs(num_generations: int, temperature: float, max_new_tokens: int,
                    eos_ids: list[int], stop: tuple[str, ...] = ()) -> dict:
    """Keyword arguments of ``vllm.SamplingParams`` for plain softmax(logits / T) sampling.

    Sampling (``temperature > 0``): ``n=K``, full vocabulary (``top_k=0``, ``top_p=1``,
    ``min_p=0``), neutral penalties, the sampled token's log-prob per position
    (``logprobs=0``). Greedy (``temperature == 0``): ``n=1`` (vLLM refuses n > 1 when greedy;
    the caller repeats each prompt K times) and no log-probs. Either way the row stops at any
    of ``eos_ids`` (kept), after at most ``max_new_tokens`` tokens, and is not detokenized.
    With ``stop`` (a task's stop strings) the row also stops at the first of them, which vLLM
    finds only in detokenized text (``detokenize=True``; the engine needs its tokenizer:
    :func:`engine_kwargs`). That text keeps special tokens (``skip_special_tokens=False``,
    vLLM's default being True), so a stop string the tokenizer marks special (``<|im_end|>``
    on Qwen base checkpoints, not an EOS id there) is seen rather than deleted, and no spaces
    are put around them (``spaces_between_special_tokens=False``), the text the kit's own
    stop check decodes (:func:`~tba_lab.rollout.backend.cut_tokens_at_stop`).
    """
    greedy = temperature == 0
    stops = [s for s in stop if s]
    extra = dict(stop=stops, include_stop_str_in_output=True, detokenize=True,
                 skip_special_tokens=False, spaces_between_special_tokens=False) if stops else {}
    return dict(**extra, n=1 if greedy else int(num_generations), temperature=float(temperature),
                top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0,
                frequency_penalty=0.0, logprobs=None if greedy else 0,
                max_tokens=int(max_new_tokens), min_tokens=0, stop_token_ids=list(eos_ids),
                ignore_eos=False, **({} if stops else {"detokenize": False}))


def _sampled_logps(token_ids: list[int], logprobs) -> list[float]:
    """The log-prob of each sampled token from one ``CompletionOutput.logprobs``.

    ``logprobs`` is either a list with one ``{token_id: Logprob}`` dict per position (the
    sampled token among them; with ``logprobs=k > 0`` the top-k too, so the sampled token is
    looked up by id, never taken as the first or the best entry) or a ``FlatLogprobs``
    (``start_indices``/``end_indices`` into flat ``token_ids``/``logprobs`` lists).

    Raises:
        ValueError: fewer positions than tokens, or a position without the sampled token.
    """
    if logprobs is None or len(logprobs) < len(token_ids):
        raise ValueError(f"{len(token_ids)} tokens but log-probs for "
                         f"{0 if logprobs is None else len(logprobs)} positions; request "
                         f"logprobs=0 when sampling")
    out = []
    flat = hasattr(logprobs, "start_indices")
    for j, tok in enumerate(token_ids):
        if flat:
            span = range(logprobs.start_indices[j], logprobs.end_indices[j])
            hit = [logprobs.logprobs[i] for i in span if logprobs.token_ids[i] == tok]
            value = hit[0] if hit else None
        else:
            entry = logprobs[j].get(tok)
            value = None if entry is None else entry.logprob
        if value is None:
            raise ValueError(f"position {j}: no log-prob for the sampled token {tok}")
        out.append(float(value))
    return out


def to_generations(outputs, num_generations: int, eos_ids: Iterable[int],
                   with_logprobs: bool = True) -> Generations:
    """Turn ``LLM.generate``'s ``RequestOutput`` list into prompt-major :class:`Generations`.

    Args:
        outputs: ``RequestOutput`` s in request order, each with ``outputs``: its
            ``CompletionOutput`` s (``index``, ``token_ids``, ``logprobs``). Either K
            completions per request (sampling, ``n=K``), or one per request with each prompt
            sent K times in a row (greedy).
        num_generations: K.
        eos_ids: every id that ends a response; each row is cut after the first (kept).
        with_logprobs: False (greedy) returns empty log-prob lists.

    Returns:
        :class:`Generations` with rows i*K..i*K+K-1 answering prompt i, each completion's
        rows in ``index`` order; log-probs as long as the (cut) responses.

    Raises:
        ValueError: a request with a number of completions other than K or 1, indices that
            are not 0..n-1, a total that is not a multiple of K, or log-probs missing
            (see :func:`_sampled_logps`).
    """
    eos, K = list(eos_ids), int(num_generations)
    rows = []
    for r, request in enumerate(outputs):
        completions = sorted(request.outputs, key=lambda c: c.index)
        indices = [c.index for c in completions]
        if len(completions) not in (K, 1) or indices != list(range(len(completions))):
            raise ValueError(f"request {r}: completions with indices {indices}; expected "
                             f"0..{K - 1} (n=K) or 0 (n=1)")
        rows.extend(completions)
    if len(rows) % K:
        raise ValueError(f"{len(rows)} completions is not a multiple of num_generations={K}")
    responses, logps = [], []
    for c in rows:
        tokens = cut_at_eos(list(c.token_ids), eos)
        responses.append(tokens)
        logps.append(_sampled_logps(tokens, c.logprobs) if with_logprobs else [])
    return Generations(responses, logps)


def load_into(model, weights: list[tuple[str, torch.Tensor]]) -> set[str]:
    """``model.load_weights(weights)`` on vLLM's model, with a check of what it loaded.

    The model maps Hugging Face names itself (q/k/v into ``qkv_proj``, gate/up into
    ``gate_up_proj``, a tied ``lm_head`` skipped), so the names go in unchanged. Runs inside
    the engine (``LLM.apply_model``).

    Returns:
        the vLLM parameter names loaded (what ``load_weights`` returned).
    Raises:
        ValueError: from vLLM, for a name its model does not have.
    Warns:
        RuntimeWarning: parameters of the engine's model that were not loaded (they would
            keep their old values: a searcher sampling from a mix of two policies).
    """
    loaded = model.load_weights(weights)
    loaded = set(loaded) if loaded is not None else set()
    missing = sorted({n for n, _ in model.named_parameters()} - loaded)
    if loaded and missing:
        warnings.warn(f"vLLM loaded no new values into {len(missing)} parameters "
                      f"({missing[:4]}...); trainer and searchers must load the same model.path",
                      RuntimeWarning, stacklevel=2)
    return loaded


def hf_weights(weights: Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
    """The weight channel's ``(Hugging Face name, tensor)`` pairs as a list for
    ``load_weights`` (detached, names unchanged; vLLM copies each into its own parameter,
    casting dtype and moving device).

    Raises:
        TypeError: an item that is not ``(str, Tensor)``.
        ValueError: a name given twice.
    """
    out, seen = [], set()
    for item in weights:
        name, tensor = item
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise TypeError(f"weights must be (name, tensor) pairs, got ({type(name).__name__}, "
                            f"{type(tensor).__name__})")
        if name in seen:
            raise ValueError(f"parameter {name!r} is given twice")
        seen.add(name)
        out.append((name, tensor.detach()))
    return out


def _vllm_installed() -> bool:
    """Whether ``import vllm`` would find a package (without importing it: validation stays cheap)."""
    return importlib.util.find_spec("vllm") is not None


def _vllm_version() -> str:
    """The installed vLLM's version string ("unknown" without package metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm")
    except PackageNotFoundError:
        return "unknown"


def _searcher_devices(cfg) -> list[str]:
    """``async.searcher_devices`` as strings, [] when the config has no such field or it is empty."""
    value = getattr(cfg.async_, "searcher_devices", None) or []
    return [str(d) for d in ([value] if isinstance(value, str) else value)]


@BACKENDS.register
class VllmBackend:
    """Sampling with an in-process vLLM engine (``vllm.LLM``) that holds its own copy of the
    policy, loaded from ``model.path`` and updated by :meth:`load_weights`.

    Args:
        llm: a ``vllm.LLM`` (or an object with its ``generate``, ``apply_model`` and
            ``reset_prefix_cache``).
        tokenizer: the kit's tokenizer of ``model.path`` (the engine gets token ids only).
        eos_ids: every id that ends a response (:func:`~tba_lab.rollout.backend.eos_token_ids`).
        sampling_params: the ``vllm.SamplingParams`` class (a stand-in in tests).
        prefix_caching: the engine caches prompt prefixes (reset after each weight load).

    Raises:
        ValueError: no EOS id (responses could never end).
    """

    name = "vllm"
    section = "vllm"
    config_class = VllmConfig
    own_engine = True  # holds its own copy of the model: the trainer evaluates through transformers

    def __init__(self, llm, tokenizer, eos_ids: list[int], sampling_params,
                 prefix_caching: bool = False):
        if not eos_ids:
            raise ValueError("the vLLM backend needs an EOS id (tokenizer eos_token_id, or "
                             "eos_token_id in the model's config); load the model with "
                             "tba_lab.models.load_policy, which sets it")
        self.llm, self.tokenizer, self.eos_ids = llm, tokenizer, list(eos_ids)
        self.sampling_params, self.prefix_caching = sampling_params, prefix_caching

    @classmethod
    def check_config(cls, cfg) -> None:
        """Refuse, before any process starts, a run vLLM cannot serve here (no import of vLLM).

        Raises:
            tba_lab.config.ConfigError: vLLM is not installed; no CUDA GPU is visible (vLLM's
                CPU build is not supported by the kit); an ``async.searcher_devices`` entry that
                is not a CUDA device; searchers sharing a GPU whose
                ``vllm.gpu_memory_utilization`` adds up to more than 1.
        Warns:
            UserWarning: an installed vLLM other than 0.33.x (this module was written against it).
        """
        from tba_lab.config import ConfigError

        if not _vllm_installed():
            raise ConfigError(
                f"model.backend=vllm needs vLLM, which is not installed: on a machine with a CUDA "
                f"GPU run pip install -e \".[gpu]\" (it installs vLLM {VLLM_VERSION} and the torch "
                f"{VLLM_TORCH} it pins), or set model.backend: transformers")
        found = _vllm_version()
        if not found.startswith(VLLM_VERSION.rsplit(".", 1)[0] + "."):
            warnings.warn(f"vLLM {found} is installed; tba_lab's vLLM backend was written against "
                          f"{VLLM_VERSION} (check tba_lab/rollout/vllm_backend.py's notes)",
                          UserWarning, stacklevel=2)
        if not torch.cuda.is_available():
            raise ConfigError(
                "model.backend=vllm needs a CUDA GPU and this machine has none visible (vLLM's "
                "CPU build is not supported by the kit); set model.backend: transformers")
        devices = _searcher_devices(cfg)
        bad = [d for d in devices if not d.startswith("cuda")]
        if bad:
            raise ConfigError(f"async.searcher_devices={devices}: model.backend=vllm runs each "
                              f"searcher's engine on a GPU; give CUDA devices (e.g. ['cuda:1']), "
                              f"not {bad}, or set model.backend: transformers")
        share = max((devices.count(d) for d in set(devices)), default=1)
        util = cfg.vllm.gpu_memory_utilization
        if share * util > 1:
            raise ConfigError(f"vllm.gpu_memory_utilization={util} with {share} searchers on one "
                              f"GPU (async.searcher_devices={devices}) asks for {share * util:.2f} "
                              f"of its memory; give at most {1 / share:.2f}")

    @classmethod
    def build(cls, cfg, model, tokenizer) -> "VllmBackend":
        """Start an engine on this process's GPU for ``cfg.model.path`` in ``model``'s dtype.

        ``model`` (the searcher's transformers copy) supplies the dtype and EOS ids only; the
        engine loads the checkpoint itself. The engine seed is ``torch.initial_seed()``: a
        searcher seeds torch with its own seed before building its backend, so searchers
        sample differently. Starting an engine takes seconds to a minute (profiling, KV-cache
        allocation; more with CUDA graphs).
        """
        vllm = _import_vllm()
        seed = torch.initial_seed() % 2**31
        llm = vllm.LLM(**engine_kwargs(cfg, next(model.parameters()).dtype, seed))
        return cls(llm, tokenizer, eos_token_ids(model, tokenizer), vllm.SamplingParams,
                   prefix_caching=cfg.vllm.enable_prefix_caching)

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy ``(Hugging Face name, tensor)`` pairs into the engine's model, in place
        (:func:`load_into` through ``LLM.apply_model``), then reset the prefix cache if on.

        Raises:
            ValueError: a name the engine's model does not have (from vLLM), or as
                :func:`hf_weights`.
            RuntimeError: the prefix cache could not be reset (requests still running).
        """
        pairs = hf_weights(weights)
        self.llm.apply_model(lambda m: load_into(m, pairs))
        if self.prefix_caching and self.llm.reset_prefix_cache() is False:
            raise RuntimeError("vLLM could not reset its prefix cache after a weight load; "
                               "prompts would reuse keys and values of the old weights")

    def generate(self, prompts: list[list[int]], num_generations: int = 1,
                 temperature: float = 1.0, max_new_tokens: int = 48,
                 stop: tuple[str, ...] = ()) -> Generations:
        """Sample ``num_generations`` responses per prompt (``temperature == 0``: greedy).

        Args:
            prompts: N token-id lists (no padding), e.g. ``tokenizer(texts)["input_ids"]``.
            num_generations: K responses per prompt.
            temperature: sampling temperature (> 0), or 0 for greedy decoding.
            max_new_tokens: response length cap, tokens.
            stop: stop strings passed to vLLM's ``SamplingParams(stop=...)``; the tokens that
                complete one are kept (cut after them by :func:`~tba_lab.rollout.rollout`).
        Returns:
            :class:`Generations` with N*K prompt-major rows.
        Raises:
            ValueError: empty ``prompts`` or an empty prompt.
        """
        if not prompts:
            raise ValueError("prompts is empty: give at least one prompt")
        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise ValueError(f"prompt {i} has no tokens")
        greedy = temperature == 0
        params = self.sampling_params(**sampling_kwargs(num_generations, temperature,
                                                        max_new_tokens, self.eos_ids, stop))
        copies = num_generations if greedy else 1  # greedy: n must be 1, so send each K times
        requests = [{"prompt_token_ids": list(p)} for p in prompts for _ in range(copies)]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        return to_generations(outputs, num_generations, self.eos_ids, with_logprobs=not greedy)
