"""One property for every collector that has two implementations: its fused path (riding generation's own
forward passes) writes the same artifacts as its teacher-forced pass, on random inputs.

The test is generic: it takes every registered collector plugin with a fused implementation, runs the task
runner both ways on tiny random float64 models of two architectures, several random seeds and random task
items (a multiple-choice benchmark and generated lists cut by a stop string), and compares every artifact
the task wrote — ``summary.json``, every sample record, every ``.npz`` array — value by value. A new plugin
with both paths is covered without editing this file; one whose paths disagree fails it by name.

A task whose collectors cannot all ride generation falls back to the teacher-forced pass and says why
(``summary.json``'s ``collection_fallback``, the manifest's ``collection``, the card's methods section).
"""
from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest
import torch

from reporter.collect.collectors import COLLECTORS, CollectorPlugin, enabled_collectors
from reporter.collect.plan import plan_task
from reporter.collect.task_run import collection_choice, run_task
from reporter.config import MUIConfig, Profile, TaskConfig
from reporter.run.manifest import collection_record
from reporter.store.atomic import write_json
from reporter.store.layout import RunDir
from reporter.store.samples import read_samples

from .conftest import tiny_lm

pytestmark = pytest.mark.usefixtures("one_thread")

#: summary keys that name the path itself, and the task's wall time
PATH_KEYS = {"collection", "collection_fallback", "seconds"}


def _two_path_plugins(profile: Profile) -> list[CollectorPlugin]:
    """Every enabled plugin with a task-scope measurement and a fused implementation."""
    return [p for p in enabled_collectors(profile)
            if type(p).for_batch is not CollectorPlugin.for_batch and p.fusable(profile)]


def _same(a, b, where: str) -> None:
    """Deep equality, floats within float64 rounding of two summation orders."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {sorted(set(a) ^ set(b))} differ"
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)) and not (a and isinstance(a[0], float)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{where}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray) and a.dtype.kind not in "fc":
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, (float, list, np.ndarray)):
        np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=1e-9,
                                   atol=1e-6, equal_nan=True, err_msg=where)
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def _artifacts(task_dir) -> dict:
    """Everything a finished task wrote, as plain values."""
    out = {}
    for f in sorted(task_dir.iterdir()):
        if f.name == "summary.json":
            out[f.name] = {k: v for k, v in json.loads(f.read_text()).items() if k not in PATH_KEYS}
        elif f.name == "samples.jsonl":
            out[f.name] = read_samples(f)
        elif f.suffix == ".npz":
            with np.load(f, allow_pickle=False) as z:
                out[f.name] = {k: z[k] for k in z.files}
        elif f.is_file():
            out[f.name] = f.read_bytes()
    return out


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("seed", [11, 29])
def test_both_paths_of_every_two_path_collector_write_the_same_artifacts(tmp_path, arch, seed):
    rng = random.Random(seed)
    lm = tiny_lm(arch, seed=seed, init_std=0.3)
    lm.model.double()
    lm = dataclasses.replace(lm, dtype=torch.float64)
    data = tmp_path / "lists.jsonl"
    starts = rng.sample(range(100), 5)
    data.write_text("".join(json.dumps({"id": f"g{s}", "q": f"List: {s}, {s + 2}, {s + 4},", "a": str(s + 6)}) + "\n"
                            for s in starts))
    tasks = (TaskConfig(name="arc_easy", limit=rng.randint(3, 6), max_new_tokens=rng.randint(3, 8)),
             TaskConfig(name="lists", type="jsonl", path=str(data), prompt_field="q", answer_field="a",
                        scorer="numeric", max_new_tokens=rng.randint(4, 10), stop=("o",)))
    top_ratio = rng.choice([0.02, 0.05])
    written = {}
    for path in ("fused", "teacher-forced"):
        profile = Profile(name="t", tasks=tasks, mui=MUIConfig(top_ratio=top_ratio), collection=path)
        plugins = _two_path_plugins(profile)
        assert {p.name for p in plugins} >= {"mui", "logprobs", "calibration"}
        assert collection_choice(lm, profile, plugins) == (path, None)
        for cfg in tasks:
            d = tmp_path / path / cfg.name
            summary = run_task(lm, profile, cfg, plan_task(lm, cfg, seed=seed), d, seed=seed, progress=False,
                               plugins=plugins)
            assert summary["collection"] == path
            written[path, cfg.name] = _artifacts(d)
    for cfg in tasks:
        fused, forced = written["fused", cfg.name], written["teacher-forced", cfg.name]
        assert set(fused) == set(forced) and {"summary.json", "samples.jsonl", "neurons.npz", "logprobs.npz"} <= set(fused)
        _same(fused, forced, f"{arch}/{seed}/{cfg.name}")


def test_a_collector_without_a_fused_path_makes_the_task_say_it_fell_back(tmp_path):
    @dataclasses.dataclass
    class Count:
        n: int = 0

        def attach(self, hooks, adapter, batch):
            self.n = int(batch.attention_mask.sum())

        def after_forward(self, batch, logits):
            pass

    class TokenCount(CollectorPlugin):
        name = "token_count"

        def for_batch(self, batch):
            return Count()

        def save_batch(self, collector, batch):
            batch.records[0]["tokens_in_batch"] = collector.n

    COLLECTORS.add("token_count", TokenCount())
    try:
        lm = tiny_lm("llama")
        cfg = TaskConfig(name="arc_easy", limit=2, max_new_tokens=3)
        profile = Profile(name="t", tasks=(cfg,))
        rd = RunDir(tmp_path)
        write_json(rd.model_dir(lm.spec.slug) / "model.json", {"name": lm.spec.name})
        summary = run_task(lm, profile, cfg, plan_task(lm, cfg, seed=0), rd.task_dir(lm.spec.slug, cfg.name), seed=0,
                           progress=False)
    finally:
        COLLECTORS.remove("token_count")
    why = "collector 'token_count' cannot ride generation under this profile"
    assert summary["collection"] == "teacher-forced" and summary["collection_fallback"] == why
    assert collection_record(rd) == {lm.spec.name: {"arc_easy": {"path": "teacher-forced", "fallback": why}}}


def test_the_card_names_each_fallback(tmp_path):
    import re
    import shutil
    from pathlib import Path

    from reporter.card.render import render

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "run2-analysed", run)
    res = json.loads((run / "results.json").read_text())
    model = next(iter(res["models"]))
    task = next(iter(res["models"][model]["tasks"]))
    html_before = render(run, formats=("html",))["html"].read_text()
    assert "Teacher-forced pass instead" not in html_before  # nothing fell back: nothing said
    why = "collector 'token_count' cannot ride generation under this profile"
    res["models"][model]["tasks"][task].update(collection="teacher-forced", collection_fallback=why)
    (run / "results.json").write_text(json.dumps(res))
    text = re.sub(r"<[^>]+>|\s+", " ", render(run, formats=("html",))["html"].read_text())
    assert f"{model} / {task}: {why}" in re.sub(r"\s+", " ", text.replace("&#39;", "'"))
