import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the kit never needs the hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny():
    """A very small untrained model + the kit's tokenizer (fast to build, for mechanics tests)."""
    from tba_lab.models import build_model, build_tokenizer
    from tba_lab.tasks import format_prompt
    from tba_lab.tasks.arithmetic import make_splits

    torch.set_num_threads(1)
    train, _ = make_splits(seed=0, num_train=300, num_test=10)
    texts = [format_prompt(r["question"]) + " " + r["answer"] for r in train]
    tok = build_tokenizer(texts)
    model = build_model(tok, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, seed=0)
    model.eval()
    return model, tok, train
