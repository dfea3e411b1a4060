"""Objects the doctests of ``reporter/`` share (``pytest --doctest-modules``).

A doctest that needs a model or a finished run uses ``lm`` (a tiny random-initialised Llama with
the packaged SmolLM2 tokenizer) or ``run_dir`` (a tiny three-model run, made once per session),
so every example in a docstring runs.
"""
from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from _pytest.doctest import DoctestItem

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RUN_YAML = """\
seed: 3
models:
  - {name: Llama chat, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}}
  - {name: GPT-2 base, source: random:gpt2, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}}
  - {name: Untrained, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4, seed: 9}}
"""
PROFILE_YAML = """\
lpp: {n_texts: 3, context: 40, min_tokens: 40}
contamination: {verbatim_items: 2, reference_texts: 4}
smoke_texts: 2
tasks:
  - {name: arc_easy, limit: 2, max_new_tokens: 4}
  - {name: spc, limit: 2, max_new_tokens: 4}
"""


@functools.lru_cache(maxsize=1)
def _objects() -> dict[str, Any]:
    from click.testing import CliRunner

    from reporter.cli import main
    from tests.conftest import tiny_lm

    root = Path(tempfile.mkdtemp(prefix="reporter-doctest-"))
    (root / "profile.yaml").write_text(PROFILE_YAML)
    (root / "models.yaml").write_text(f"profile: {root / 'profile.yaml'}\n" + RUN_YAML)
    r = CliRunner().invoke(main, ["run", str(root / "models.yaml"), "-o", str(root / "run"), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 0, r.output
    return {"lm": tiny_lm("llama"), "run_dir": root / "run"}


@pytest.fixture(autouse=True)
def _doctest_objects(request: pytest.FixtureRequest) -> None:
    if isinstance(request.node, DoctestItem):
        request.getfixturevalue("doctest_namespace").update(_objects())
