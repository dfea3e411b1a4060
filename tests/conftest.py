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

    from reporter.adapters import random_config

    cfg = random_config(family, vocab=vocab, **{**TINY, **size})
    if family.startswith("gemma"):
        cfg.head_dim = 16
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()


@pytest.fixture
def tiny_yaml(tmp_path):
    """Write a YAML file and return its path."""

    def write(text: str, name: str = "models.yaml"):
        p = tmp_path / name
        p.write_text(text)
        return p

    return write
