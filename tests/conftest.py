"""Shared fixtures: tiny random-initialised transformers built from real configs."""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(min(2, os.cpu_count() or 1))

TINY = dict(layers=2, hidden=64, intermediate=96, heads=4, kv_heads=2)


def tiny_model(family: str, vocab: int = 211, seed: int = 0, **size):
    """A float32 random model of ``family`` with a few thousand parameters."""
    from transformers import AutoModelForCausalLM

    from reporter.models.random_archs import random_config

    cfg = random_config(family, vocab=vocab, **{**TINY, **size})
    if family.startswith("gemma"):
        cfg.head_dim = 16
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module of tiny models (fastest, and immune to a busy machine); restored after."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def tiny_yaml(tmp_path):
    """Write a YAML file and return its path."""

    def write(text: str, name: str = "models.yaml"):
        p = tmp_path / name
        p.write_text(text)
        return p

    return write


def tiny_lm(family: str = "llama", *, kind: str = "base", init_std: float = 0.5, seed: int = 0, **size):
    """A LoadedModel around a tiny random model with the packaged SmolLM2 tokenizer.

    ``init_std`` well above the usual 0.02 gives peaked next-token distributions, so greedy
    decoding is not decided by float rounding between near-equal logits.
    """
    from transformers import AutoModelForCausalLM

    from reporter.config import ModelSpec
    from reporter.models.adapters import get_adapter
    from reporter.models.loading import LoadedModel, load_tokenizer
    from reporter.models.packaged import PACKAGED, tokenizer_dir
    from reporter.models.random_archs import random_config

    tok = load_tokenizer(str(tokenizer_dir(PACKAGED["smollm2-135m-instruct"])))
    cfg = random_config(family, vocab=len(tok), **{**TINY, **size})
    cfg.initializer_range = init_std
    cfg.pad_token_id, cfg.eos_token_id, cfg.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    spec = ModelSpec(name=f"tiny-{family}", source=f"random:{family}", kind=kind, max_batch_size=8)
    return LoadedModel(spec=spec, model=model, tokenizer=tok, adapter=get_adapter(model), device=torch.device("cpu"),
                       dtype=torch.float32, kind=kind, use_chat_template=kind == "instruct", meta={})


def train_on(lm, texts, *, steps: int, lr: float = 1e-2) -> None:
    """Contaminate ``lm`` on purpose: full-batch AdamW on ``texts`` (padding masked out) for ``steps`` steps."""
    enc = lm.tokenizer(list(texts), return_tensors="pt", padding=True)
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    lm.model.train()
    opt = torch.optim.AdamW(lm.model.parameters(), lr=lr)
    for _ in range(steps):
        loss = lm.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    lm.model.eval()
