"""The vLLM backend without vLLM: conversion, sampling settings, weight hand-off, config checks.

CI has no GPU and no vLLM, so the engine is replaced by fakes whose outputs have exactly the
shape of vLLM 0.33.0's (``vllm/outputs.py``: ``RequestOutput``, ``CompletionOutput``;
``vllm/logprobs.py``: ``Logprob``, ``FlatLogprobs``). One fake samples from the embedded
model's own softmax(logits / T) as vLLM's sampler does in "processed_logprobs" mode, so the
conversion can be checked against the trainer's scoring. The last test runs a real engine and
is skipped unless vLLM and a CUDA GPU are present.
"""
from __future__ import annotations

import copy
import os
import random
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
import torch

from tba_lab.config import ConfigError, from_dict
from tba_lab.rollout import vllm_backend as vb
from tba_lab.rollout.backend import Generations, TransformersBackend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- stand-ins shaped like vLLM 0.33.0's output classes ---------------------------------------

@dataclass
class Logprob:                      # vllm/logprobs.py
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class FlatLogprobs:                 # vllm/logprobs.py (the fields to_generations reads)
    start_indices: list = field(default_factory=list)
    end_indices: list = field(default_factory=list)
    token_ids: list = field(default_factory=list)
    logprobs: list = field(default_factory=list)
    ranks: list = field(default_factory=list)
    decoded_tokens: list = field(default_factory=list)

    def append(self, position: dict) -> None:
        self.start_indices.append(len(self.logprobs))
        for tok, lp in position.items():
            self.token_ids.append(tok)
            self.logprobs.append(lp.logprob)
            self.ranks.append(lp.rank)
            self.decoded_tokens.append(lp.decoded_token)
        self.end_indices.append(len(self.logprobs))

    def __len__(self) -> int:
        return len(self.start_indices)


@dataclass
class CompletionOutput:             # vllm/outputs.py
    index: int
    text: str
    token_ids: list
    cumulative_logprob: float | None
    logprobs: object
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:                # vllm/outputs.py (the fields used)
    request_id: str
    prompt: str | None
    prompt_token_ids: list
    prompt_logprobs: object
    outputs: list
    finished: bool = True


def completion(index, tokens, logps=None, flat=False, extra=None):
    """A CompletionOutput as vLLM builds it with logprobs=0 (one entry per position: the
    sampled token, first) or with ``extra[j] = (token, logprob)`` also at position j (top-k)."""
    positions = None
    if logps is not None:
        positions = FlatLogprobs() if flat else []
        for j, (t, lp) in enumerate(zip(tokens, logps)):
            entry = {t: Logprob(lp, rank=2)}
            if extra and j in extra:  # a better token listed FIRST: lookup must be by id
                entry = {extra[j][0]: Logprob(extra[j][1], rank=1), **entry}
            positions.append(entry)
    return CompletionOutput(index, "", list(tokens), None, positions,
                            finish_reason="stop" if logps else "length")


# ---- to_generations --------------------------------------------------------------------------

def test_rows_are_prompt_major_and_sorted_by_completion_index():
    outputs = [
        RequestOutput("0", None, [1], None, [completion(1, [11, 2], [-0.1, -0.2]),
                                             completion(0, [10, 2], [-1.0, -2.0])]),
        RequestOutput("1", None, [1], None, [completion(0, [20, 2], [-3.0, -4.0]),
                                             completion(1, [21, 2], [-5.0, -6.0])]),
    ]
    gen = vb.to_generations(outputs, 2, eos_ids=[2])
    assert isinstance(gen, Generations)
    assert gen.responses == [[10, 2], [11, 2], [20, 2], [21, 2]]
    assert gen.token_logps == [[-1.0, -2.0], [-0.1, -0.2], [-3.0, -4.0], [-5.0, -6.0]]


@pytest.mark.parametrize("flat", [False, True])
def test_eos_of_any_declared_id_cuts_and_is_kept_and_length_rows_have_none(flat):
    eos = [2, 7, 9]
    outputs = [RequestOutput("0", None, [1], None, [
        completion(0, [5, 7, 3, 2], [-0.5, -0.6, -0.7, -0.8], flat),   # 7 is an EOS too
        completion(1, [5, 6, 9], [-1.5, -1.6, -1.7], flat),            # stopped on 9
        completion(2, [4, 4, 4], [-2.0, -2.1, -2.2], flat),            # hit max_tokens
    ])]
    gen = vb.to_generations(outputs, 3, eos)
    assert gen.responses == [[5, 7], [5, 6, 9], [4, 4, 4]]
    assert gen.token_logps == [[-0.5, -0.6], [-1.5, -1.6, -1.7], [-2.0, -2.1, -2.2]]
    assert not set(gen.responses[2]) & set(eos)


@pytest.mark.parametrize("flat", [False, True])
def test_the_sampled_tokens_logprob_is_taken_not_the_top_one(flat):
    c = completion(0, [30, 31, 2], [-2.3, -0.05, -0.4], flat, extra={0: (99, -0.1), 2: (98, -0.2)})
    gen = vb.to_generations([RequestOutput("0", None, [1], None, [c])], 1, [2])
    assert gen.token_logps == [[-2.3, -0.05, -0.4]]


def test_greedy_returns_empty_logprobs_and_keeps_repeated_prompts_in_order():
    # greedy: vLLM needs n=1, so each prompt is sent K=2 times in a row
    outputs = [RequestOutput(str(r), None, [1], None, [completion(0, toks)])
               for r, toks in enumerate([[3, 2], [3, 2], [4, 5, 2, 6], [4, 5, 2, 6]])]
    gen = vb.to_generations(outputs, 2, [2], with_logprobs=False)
    assert gen.responses == [[3, 2], [3, 2], [4, 5, 2], [4, 5, 2]]
    assert gen.token_logps == [[], [], [], []]


def test_malformed_outputs_raise():
    two = [completion(0, [3, 2], [-1.0, -1.0]), completion(1, [3, 2], [-1.0, -1.0])]
    with pytest.raises(ValueError, match="indices"):  # 2 completions when K = 3
        vb.to_generations([RequestOutput("0", None, [1], None, two)], 3, [2])
    with pytest.raises(ValueError, match="multiple of num_generations"):
        vb.to_generations([RequestOutput("0", None, [1], None, two[:1])], 2, [2])
    with pytest.raises(ValueError, match="log-probs for 0 positions"):
        vb.to_generations([RequestOutput("0", None, [1], None, [completion(0, [3, 2])])], 1, [2])
    bad = completion(0, [3, 2], [-1.0, -1.0])
    bad.logprobs[1] = {7: Logprob(-0.3)}
    with pytest.raises(ValueError, match="no log-prob for the sampled token 2"):
        vb.to_generations([RequestOutput("0", None, [1], None, [bad])], 1, [2])


# ---- sampling and engine settings ------------------------------------------------------------

def test_sampling_kwargs_are_plain_softmax_with_every_eos_as_stop():
    kw = vb.sampling_kwargs(8, 0.7, 40, [2, 5])
    assert kw == dict(n=8, temperature=0.7, top_k=0, top_p=1.0, min_p=0.0,
                      repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
                      logprobs=0, max_tokens=40, min_tokens=0, stop_token_ids=[2, 5],
                      ignore_eos=False, detokenize=False)
    greedy = vb.sampling_kwargs(8, 0.0, 40, [2])
    assert greedy["n"] == 1 and greedy["logprobs"] is None and greedy["temperature"] == 0.0
    # a task's stop strings: vLLM matches them on detokenized text only, so the engine of a
    # task with stops (gsm8k) loads its tokenizer; one without (arithmetic) stays as it was
    stopped = vb.sampling_kwargs(8, 0.7, 40, [2], stop=("Question:",))
    assert stopped == dict(kw, stop_token_ids=[2], stop=["Question:"],
                           include_stop_str_in_output=True, detokenize=True,
                           skip_special_tokens=False, spaces_between_special_tokens=False)
    assert vb.engine_kwargs(from_dict({"task": {"name": "gsm8k"}}), torch.float32, 0)[
        "skip_tokenizer_init"] is False


def test_engine_kwargs_keep_the_policy_dtype_and_processed_logprobs():
    cfg = from_dict({"seed": 3})
    kw = vb.engine_kwargs(cfg, torch.float32, seed=11)
    assert kw["model"] == str(cfg.model.path) and kw["dtype"] == "float32"  # not "auto" (-> bf16)
    assert kw["logprobs_mode"] == "processed_logprobs" and kw["generation_config"] == "vllm"
    assert kw["seed"] == 11 and kw["skip_tokenizer_init"] is True
    assert kw["gpu_memory_utilization"] == 0.4 and kw["enable_prefix_caching"] is True
    assert "max_model_len" not in kw
    cfg = from_dict({"vllm": {"dtype": "bfloat16", "max_model_len": 128,
                              "gpu_memory_utilization": 0.25, "enforce_eager": False}})
    kw = vb.engine_kwargs(cfg, torch.float32, seed=0)
    assert (kw["dtype"], kw["max_model_len"], kw["gpu_memory_utilization"], kw["enforce_eager"]) == \
        ("bfloat16", 128, 0.25, False)
    assert vb.engine_kwargs(from_dict({}), torch.bfloat16, 0)["dtype"] == "bfloat16"
    with pytest.raises(ValueError, match="int8"):
        vb.dtype_name(torch.int8)


# ---- a fake engine that samples from the embedded model --------------------------------------

class FakeLLM:
    """``generate`` samples like vLLM's sampler in processed_logprobs mode: token by token from
    softmax(logits / T) of a transformers model, log-probs = log_softmax(logits / T) of the
    sampled token; stops on ``stop_token_ids`` (kept), ``max_tokens``, or (given a
    ``tokenizer``) a ``stop`` string in the text as vLLM detokenizes it; completions are
    returned in shuffled order (their ``index`` says which is which). Records calls."""

    def __init__(self, model, engine_model=None, seed=0, tokenizer=None):
        self.model, self.engine_model, self.tokenizer = model, engine_model, tokenizer
        self.rng = torch.Generator().manual_seed(seed)
        self.calls, self.resets = [], 0

    def _stopped(self, tokens, p) -> bool:
        """vLLM's stop-string rule: ``stop`` is looked for in the detokenized output text,
        decoded with ``p.skip_special_tokens`` (vLLM's default True when not given)."""
        stops = getattr(p, "stop", None) or []
        if not stops or self.tokenizer is None:
            return False
        text = self.tokenizer.decode(tokens, skip_special_tokens=getattr(p, "skip_special_tokens", True))
        return any(s in text for s in stops)

    @torch.no_grad()
    def _one(self, prompt, p):
        seq, tokens, logps = list(prompt), [], []
        for _ in range(p.max_tokens):
            logits = self.model(torch.tensor([seq])).logits[0, -1].float()
            if p.temperature == 0:
                tok = int(logits.argmax())
            else:
                lp = torch.log_softmax(logits / p.temperature, -1)
                tok = int(torch.multinomial(lp.exp(), 1, generator=self.rng))
                logps.append(float(lp[tok]))
            seq.append(tok)
            tokens.append(tok)
            if tok in p.stop_token_ids or self._stopped(tokens, p):
                break
        return tokens, (logps if p.logprobs is not None else None)

    def generate(self, requests, params, use_tqdm=True):
        self.calls.append((requests, params))
        out = []
        for r, req in enumerate(requests):
            comps = [completion(i, *self._one(req["prompt_token_ids"], params))
                     for i in range(params.n)]
            random.Random(r).shuffle(comps)
            out.append(RequestOutput(str(r), None, req["prompt_token_ids"], None, comps))
        return out

    def apply_model(self, fn):
        return [fn(self.engine_model)]

    def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
        self.resets += 1
        return True


@pytest.fixture(scope="module")
def embedded():
    from tba_lab.models import DEFAULT_MODEL_DIR, load_policy
    from tba_lab.tasks import format_prompt
    from tba_lab.tasks.arithmetic import make_splits

    torch.set_num_threads(1)
    model, tok = load_policy(DEFAULT_MODEL_DIR)
    model.eval()
    train, _ = make_splits(seed=0, num_train=20, num_test=2)
    prompts = [tok(format_prompt(r["question"]))["input_ids"] for r in train[:3]]
    return model, tok, prompts


def test_behaviour_logprobs_equal_the_trainers_scoring(embedded):
    """With processed log-probs at temperature T, what the searcher records is what the
    trainer computes (response_logprobs at T): an importance ratio of exactly 1 on-policy."""
    from tba_lab.rollout.scoring import response_logprobs

    model, tok, prompts = embedded
    backend = vb.VllmBackend(FakeLLM(model, seed=0), tok, vb.eos_token_ids(model, tok),
                             SimpleNamespace)
    K, T = 4, 0.7
    gen = backend.generate(prompts, K, temperature=T, max_new_tokens=12)
    (requests, params), = backend.llm.calls
    assert [r["prompt_token_ids"] for r in requests] == prompts and params.n == K
    assert params.stop_token_ids == backend.eos_ids and params.top_k == 0
    assert len(gen.responses) == len(prompts) * K
    rows = [prompts[i // K] for i in range(len(gen.responses))]      # prompt-major
    with torch.no_grad():
        ref, mask = response_logprobs(model, rows, gen.responses, tok.pad_token_id, T)
    ended = 0
    for i, r in enumerate(gen.responses):
        assert len(gen.token_logps[i]) == len(r) == int(mask[i].sum())
        torch.testing.assert_close(torch.tensor(gen.token_logps[i]), ref[i, :len(r)],
                                   atol=1e-5, rtol=1e-5)
        ended += r[-1] in backend.eos_ids
        assert not set(r[:-1]) & set(backend.eos_ids)                  # EOS only at the end
    assert ended > 0                                                   # some rows stopped on EOS
    with torch.no_grad():                                              # T = 1 would not match
        wrong, _ = response_logprobs(model, rows, gen.responses, tok.pad_token_id, 1.0)
    assert max((wrong[i, :len(r)] - torch.tensor(gen.token_logps[i])).abs().max().item()
               for i, r in enumerate(gen.responses)) > 0.01


def test_greedy_and_length_capped_rows_match_the_transformers_backend(embedded):
    model, tok, prompts = embedded
    fake = FakeLLM(model)
    backend = vb.VllmBackend(fake, tok, vb.eos_token_ids(model, tok), SimpleNamespace)
    for m in (3, 12):
        gen = backend.generate(prompts, 2, temperature=0.0, max_new_tokens=m)
        ref = TransformersBackend(model, tok).generate(prompts, 2, temperature=0.0, max_new_tokens=m)
        assert gen.responses == ref.responses and gen.token_logps == ref.token_logps == [[]] * 6
    requests, params = fake.calls[-1]
    assert params.n == 1 and params.logprobs is None
    assert [r["prompt_token_ids"] for r in requests] == [p for p in prompts for _ in range(2)]
    short = backend.generate(prompts, 1, temperature=0.0, max_new_tokens=3).responses
    assert all(len(r) == 3 or r[-1] in backend.eos_ids for r in short)
    with pytest.raises(ValueError, match="prompt 1 has no tokens"):
        backend.generate([[1], []], 1, 0.0, 4)


def test_a_stop_string_the_tokenizer_marks_special_stops_the_engine():
    """After vllm#2123: vLLM matches ``stop`` in text detokenized with ``skip_special_tokens``
    (default True), which deletes a special ``<|im_end|>`` (Qwen base; not an EOS id), so the
    engine ran on through an invented turn. The sampling parameters keep special tokens in
    that text when the task has stop strings."""
    from tba_lab.rollout import rollout
    from tba_lab.tasks import format_prompt
    from tba_lab.tasks.gsm8k import GSM8KTask
    from tests._special_stop import (ANSWER, PROBLEM, QUESTION, STOP, scripted_model,
                                     special_stop_tokenizer)

    tok = special_stop_tokenizer()
    model = scripted_model(tok)
    fake = FakeLLM(model, tokenizer=tok)
    backend = vb.VllmBackend(fake, tok, vb.eos_token_ids(model, tok), SimpleNamespace)
    kept = tok(ANSWER + STOP, add_special_tokens=False)["input_ids"]
    prompt = tok(format_prompt(QUESTION))["input_ids"]
    gen = backend.generate([prompt], 2, temperature=1.0, max_new_tokens=64,
                           stop=GSM8KTask.stop_strings)
    assert gen.responses == [kept, kept] and [len(lp) for lp in gen.token_logps] == [len(kept)] * 2
    (_, params), = fake.calls
    assert params.skip_special_tokens is False and params.stop == list(GSM8KTask.stop_strings)
    greedy = backend.generate([prompt], 1, temperature=0.0, max_new_tokens=64,
                              stop=GSM8KTask.stop_strings)
    assert greedy.responses == [kept]
    batch = rollout(backend, GSM8KTask(), [PROBLEM], 2, 1.0, 64)
    assert batch.completions == [ANSWER] * 2 and batch.rewards == [1.0, 1.0]


# ---- weights ----------------------------------------------------------------------------------

class FakeVllmLlama(torch.nn.Module):
    """vLLM's Llama parameter layout (fused ``qkv_proj`` and ``gate_up_proj``, tied lm_head
    absent) with a ``load_weights`` that maps Hugging Face names like ``LlamaModel``'s
    ``hf_to_vllm_mapper`` (vllm/model_executor/models/llama.py) and returns the loaded names."""

    STACKED = {".q_proj": (".qkv_proj", 0), ".k_proj": (".qkv_proj", 1), ".v_proj": (".qkv_proj", 2),
               ".gate_proj": (".gate_up_proj", 0), ".up_proj": (".gate_up_proj", 1)}

    def __init__(self, hf_model):
        super().__init__()
        self.shards, params = {}, {}
        for name, p in hf_model.named_parameters():
            for old, (new, shard) in self.STACKED.items():
                if old in name:
                    self.shards.setdefault(name.replace(old, new), {})[shard] = p.shape[0]
                    break
            else:
                params[name] = torch.zeros_like(p)
        for name, sizes in self.shards.items():
            cols = hf_model.get_parameter(name.replace(".qkv_proj", ".q_proj")
                                          .replace(".gate_up_proj", ".up_proj")).shape[1]
            params[name] = torch.zeros(sum(sizes.values()), cols)
        self.flat = torch.nn.ParameterDict({k.replace(".", "/"): torch.nn.Parameter(v, requires_grad=False)
                                            for k, v in params.items()})
        self.calls = []

    def named_parameters(self, *args, **kwargs):
        return [(k.replace("/", "."), v) for k, v in self.flat.items()]

    def load_weights(self, weights):
        self.calls.append([n for n, _ in weights])
        loaded = set()
        for name, w in weights:
            target, shard = name, None
            for old, (new, s) in self.STACKED.items():
                if old in name:
                    target, shard = name.replace(old, new), s
            key = target.replace(".", "/")
            if key not in self.flat:
                raise ValueError(f"There is no module or parameter named {target!r}")
            param = self.flat[key]
            if shard is None:
                param.data.copy_(w)
            else:
                sizes = self.shards[target]
                start = sum(sizes[i] for i in range(shard))
                param.data[start:start + sizes[shard]].copy_(w)
            loaded.add(target)
        return loaded


def test_load_weights_hands_hf_names_to_the_engine_model_and_resets_prefix_cache(embedded):
    model, tok, _ = embedded
    engine = FakeVllmLlama(model)
    fake = FakeLLM(model, engine_model=engine)
    backend = vb.VllmBackend(fake, tok, [2], SimpleNamespace, prefix_caching=True)
    published = [(n, p.detach().clone() + 1.0) for n, p in model.named_parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                 # every parameter loaded
        backend.load_weights(iter(published))                         # a one-pass iterator too
    assert engine.calls == [[n for n, _ in published]]                 # HF names, unchanged
    assert fake.resets == 1
    got = dict(engine.named_parameters())
    layer = "model.layers.0"
    want_qkv = torch.cat([dict(published)[f"{layer}.self_attn.{x}_proj.weight"] for x in "qkv"])
    assert torch.equal(got[f"{layer}.self_attn.qkv_proj.weight"], want_qkv)
    assert torch.equal(got["model.embed_tokens.weight"], dict(published)["model.embed_tokens.weight"])
    assert "lm_head.weight" not in got                                 # tied: loaded once
    vb.VllmBackend(fake, tok, [2], SimpleNamespace, prefix_caching=False).load_weights(published)
    assert fake.resets == 1


def test_weight_pairs_are_checked_and_partial_loads_warn(embedded):
    model, tok, _ = embedded
    pairs = list(model.named_parameters())
    assert [n for n, _ in vb.hf_weights(pairs)] == [n for n, _ in pairs]
    assert not any(t.requires_grad for _, t in vb.hf_weights(pairs))
    with pytest.raises(ValueError, match="given twice"):
        vb.hf_weights(pairs[:1] * 2)
    with pytest.raises(TypeError, match="pairs"):
        vb.hf_weights([("x", [1.0])])
    engine = FakeVllmLlama(model)
    with pytest.warns(RuntimeWarning, match="no new values"):
        vb.load_into(engine, pairs[:3])
    with pytest.raises(ValueError, match="no module or parameter"):
        vb.load_into(engine, [("model.nope.weight", torch.zeros(1))])


# ---- registration and configuration ----------------------------------------------------------

def test_registered_with_its_options_section():
    from tba_lab.config import section_classes
    from tba_lab.registry import BACKENDS

    assert BACKENDS.get("vllm") is vb.VllmBackend and vb.VllmBackend.name == "vllm"
    assert section_classes()["vllm"] is vb.VllmConfig


def test_importing_the_package_and_validating_never_imports_vllm():
    """A finder that fails any ``import vllm``: the module, the registry and validating a
    default config (which imports every backend module) must not try it."""
    code = ("import sys\n"
            "class NoVllm:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'vllm': raise ImportError('vllm imported')\n"
            "sys.meta_path.insert(0, NoVllm())\n"
            "import tba_lab.rollout.vllm_backend\n"
            "from tba_lab.config import from_dict\n"
            "from tba_lab.registry import BACKENDS\n"
            "assert 'vllm' in BACKENDS.names()\n"
            "from_dict({'vllm': {'gpu_memory_utilization': 0.3}})\n"
            "assert not [m for m in sys.modules if m.split('.')[0] == 'vllm']\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert "vllm" not in sys.modules


def test_missing_vllm_stops_at_validation_with_the_fix():
    if vb._vllm_installed():
        pytest.skip("vLLM is installed here")
    with pytest.raises(ConfigError) as e:
        from_dict({"model": {"backend": "vllm"}})
    msg = str(e.value)
    for part in ("model.backend=vllm", 'pip install -e ".[gpu]"', "CUDA", "0.33.0",
                 "torch 2.14.0", "model.backend: transformers"):
        assert part in msg


@pytest.fixture
def vllm_present(monkeypatch):
    """Pretend vLLM 0.33.0 is installed and a GPU is visible (check_config imports neither)."""
    monkeypatch.setattr(vb, "_vllm_installed", lambda: True)
    monkeypatch.setattr(vb, "_vllm_version", lambda: "0.33.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = from_dict({})
    cfg.model.backend = "vllm"
    return cfg


def test_no_gpu_or_cpu_searchers_are_refused(vllm_present, monkeypatch):
    cfg = vllm_present
    vb.VllmBackend.check_config(cfg)                                   # GPU and vLLM: fine
    cfg.async_.searcher_devices = ["cuda:0", "cpu"]
    with pytest.raises(ConfigError, match=r"async.searcher_devices=.*\['cpu'\]"):
        vb.VllmBackend.check_config(cfg)
    cfg.async_.searcher_devices = ["cuda:1", "cuda:1", "cuda:1"]
    with pytest.raises(ConfigError, match="gpu_memory_utilization=0.4 with 3 searchers.*at most 0.33"):
        vb.VllmBackend.check_config(cfg)
    cfg.vllm.gpu_memory_utilization = 0.3
    vb.VllmBackend.check_config(cfg)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="CUDA GPU.*CPU build is not supported"):
        vb.VllmBackend.check_config(cfg)


def test_another_vllm_version_warns(vllm_present, monkeypatch):
    monkeypatch.setattr(vb, "_vllm_version", lambda: "0.30.2")
    with pytest.warns(UserWarning, match="vLLM 0.30.2 .*written against 0.33.0"):
        vb.VllmBackend.check_config(vllm_present)


@pytest.mark.parametrize("bad, field", [({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization"),
                                        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
                                        ({"dtype": "auto"}, "vllm.dtype"),
                                        ({"max_model_len": -1}, "max_model_len")])
def test_options_are_validated(bad, field):
    with pytest.raises(ConfigError, match=field):
        from_dict({"vllm": bad})


# ---- a real engine (needs vLLM and a CUDA GPU; never runs in CI) -----------------------------

@pytest.mark.slow
@pytest.mark.skipif(not (vb._vllm_installed() and torch.cuda.is_available()),
                    reason="needs vLLM (pip install -e '.[gpu]') and a CUDA GPU")
def test_real_engine_logprobs_match_scoring_before_and_after_a_weight_load(embedded):
    from tba_lab.rollout.scoring import response_logprobs

    model, tok, prompts = embedded
    cfg = from_dict({"model": {"backend": "vllm", "temperature": 0.7},
                     "vllm": {"gpu_memory_utilization": 0.2}})
    torch.manual_seed(0)
    backend = vb.VllmBackend.build(cfg, model, tok)
    gpu = copy.deepcopy(model).to("cuda")
    for step in range(2):
        gen = backend.generate(prompts, 4, temperature=0.7, max_new_tokens=16)
        rows = [prompts[i // 4] for i in range(len(gen.responses))]
        with torch.no_grad():
            ref, _ = response_logprobs(gpu, rows, gen.responses, tok.pad_token_id, 0.7)
        for i, r in enumerate(gen.responses):
            assert len(r) == len(gen.token_logps[i]) and not set(r[:-1]) & set(backend.eos_ids)
            torch.testing.assert_close(torch.tensor(gen.token_logps[i]), ref[i, :len(r)].cpu(),
                                       atol=2e-3, rtol=2e-3)
        if step == 0:                                                  # new weights, in place
            with torch.no_grad():
                for p in gpu.parameters():
                    p.add_(0.02 * torch.randn_like(p))
            backend.load_weights(gpu.named_parameters())


def test_trainer_evaluates_through_transformers_when_the_backend_has_its_own_engine(embedded):
    """A vLLM run must not start a second engine in the trainer process for held-out evaluation:
    the trainer decodes with its own policy through the transformers backend."""
    from dataclasses import replace

    from tba_lab.trainer import _eval_backend

    policy, tokenizer, _ = embedded
    cfg = from_dict({})
    cfg = replace(cfg, model=replace(cfg.model, backend="vllm"))  # not validated: no vLLM here
    backend = _eval_backend(cfg, policy, tokenizer)
    assert isinstance(backend, TransformersBackend) and backend.model is policy
    assert vb.VllmBackend.own_engine and not getattr(TransformersBackend, "own_engine", False)
    assert isinstance(_eval_backend(from_dict({}), policy, tokenizer), TransformersBackend)
