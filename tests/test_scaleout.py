"""Scale-out: the Ray executor gives the local executor's results; sharded models keep hooks correct."""
import json

import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner

from reporter.cli import main
from reporter.collect.collectors.mui import key_neurons
from reporter.config import ModelSpec, parse_config
from reporter.errors import UserError
from reporter.models.loading import load_model

from .conftest import small_random, tiny_lm, without_timings

YAML = """
profile: {profile}
seed: 5
models:
  - {{name: tiny-gpt2, source: random:gpt2, random: {{layers: 2, hidden: 64, intermediate: 96, heads: 4}}}}
"""
# one model, one task and a probe: what a Ray worker computes (MUI, LPP, the evidence passes) must equal the
# local run's; starting the cluster is most of the test's time, a second model would only double the work
PROFILE = ("lpp: {n_texts: 3, context: 40, min_tokens: 40}\n"
           "tasks:\n  - {name: arc_easy, limit: 3, max_new_tokens: 4}\n  - {name: spc, limit: 2, max_new_tokens: 6}\n")


def _strip(res):
    res.pop("run")
    return without_timings(res)


def _assert_same(x, y, path="results"):
    """Equal, except floats may differ in the last bits (Ray workers run torch with 1 thread)."""
    if isinstance(x, dict):
        assert isinstance(y, dict) and set(x) == set(y), path
        for k in x:
            _assert_same(x[k], y[k], f"{path}.{k}")
    elif isinstance(x, list):
        assert isinstance(y, list) and len(x) == len(y), path
        for i, (p, q) in enumerate(zip(x, y)):
            _assert_same(p, q, f"{path}[{i}]")
    elif isinstance(x, float) and isinstance(y, float):
        assert x == pytest.approx(y, rel=1e-9, abs=1e-12, nan_ok=True), path
    else:
        assert x == y, path


@pytest.mark.slow
def test_ray_executor_equals_local(tiny_yaml, tmp_path):
    prof = tiny_yaml(PROFILE, "profile.yaml")
    models = tiny_yaml(small_random(YAML.format(profile=prof)))
    local, remote = tmp_path / "local", tmp_path / "ray"
    r1 = CliRunner().invoke(main, ["run", str(models), "-o", str(local), "--no-progress", "--no-render"])
    assert r1.exit_code == 0, r1.output
    r2 = CliRunner().invoke(main, ["run", str(models), "-o", str(remote), "--no-progress", "--no-render",
                                   "--executor", "ray"])
    assert r2.exit_code == 0, r2.output
    a = json.loads((local / "results.json").read_text())
    b = json.loads((remote / "results.json").read_text())
    _assert_same(_strip(a), _strip(b))
    assert sorted(b["models"]) == ["tiny-gpt2"]
    assert all(m["status"] == "complete" for m in b["models"].values())


def test_a_ray_task_asks_for_a_gpu_where_the_model_runs_on_cuda_by_its_own_device_or_the_runs(tmp_path):
    """The GPUs a model's Ray task asks for: its ``num_gpus`` where given, else 1 for ``cuda`` whether the model or
    the run names it (the YAML's top-level ``device`` or ``--device``), or a ``device_map``; else 0."""
    from reporter.cli_options import resolve

    models = [{"name": "own", "source": "random:llama", "device": "cuda:1"},
              {"name": "run", "source": "random:llama"},
              {"name": "cpu", "source": "random:llama", "device": "cpu"},
              {"name": "given", "source": "random:llama", "num_gpus": 0.5},
              {"name": "sharded", "source": "random:llama", "device_map": "auto"}]
    for device, want in (("cuda", [1, 1, 0, 0.5, 1]), ("auto", [1, 0, 0, 0.5, 1]), ("cpu", [1, 0, 0, 0.5, 1])):
        cfg = parse_config({"executor": "ray", "device": device, "models": models}, "m.yaml")
        assert [m.gpus(cfg.device) for m in cfg.models] == want, device
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump({"executor": "ray", "models": models}))
    cfg, _ = resolve(p, "quick", None, None, "cuda", None)  # --device cuda: every model on cuda, its own value gone
    assert [m.gpus(cfg.device) for m in cfg.models] == [1, 1, 1, 0.5, 1]


def test_executor_and_sharding_keys_validate(tmp_path):
    cfg = parse_config({"executor": "ray", "address": "auto", "models": [
        {"name": "a", "source": "random:llama", "device": "cuda", "num_gpus": 2, "device_map": "auto"}]}, "m.yaml")
    assert cfg.executor == "ray" and cfg.models[0].num_gpus == 2  # cuda is the workers' business
    with pytest.raises(UserError) as e:
        parse_config({"executor": "slurm", "models": [
            {"name": "a", "source": "random:llama", "device_map": "everywhere", "num_gpus": -1,
             "generation_backend": "vllm"}]}, "m.yaml")
    msg = str(e.value)
    assert "m.yaml: executor: 'slurm' is not valid; use one of local, ray" in msg
    assert "models[0].device_map: 'everywhere' is not valid" in msg
    assert "models[0].num_gpus: must be a non-negative number, got -1" in msg
    assert "models[0].generation_backend: vllm cannot load a random:ARCH model" in msg


def test_missing_vllm_is_a_clear_error(tmp_path):
    lm = tiny_lm("llama")
    d = tmp_path / "m"
    lm.model.save_pretrained(d)
    lm.tokenizer.save_pretrained(d)
    v = load_model(ModelSpec(name="v", source=str(d), generation_backend="vllm"))
    from reporter.models.generation import generate

    with pytest.raises(UserError, match=r"generation_backend vllm needs vLLM, which is not installed; run: pip install 'reporter\[vllm\]'"):
        generate(v, [[1, 2, 3]], max_new_tokens=2)


def test_hooks_stay_correct_on_a_model_dispatched_by_a_device_map(tmp_path):
    """accelerate wraps every module of a device-mapped model; hooks and MUI must not notice. A map that lands on one
    device (which transformers 5 does not dispatch) is recorded as that device."""
    lm = tiny_lm("llama", init_std=0.3)
    d = tmp_path / "m"
    lm.model.save_pretrained(d)
    lm.tokenizer.save_pretrained(d)
    from accelerate import dispatch_model

    plain = load_model(ModelSpec(name="p", source=str(d)))
    via_yaml = load_model(ModelSpec(name="s", source=str(d), device_map="sequential"))  # the YAML path loads
    other = load_model(ModelSpec(name="o", source=str(d)))
    names = ["model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm", "model.rotary_emb", "lm_head"]
    sharded = dispatch_model(other.model, device_map={n: "cpu" for n in names}, main_device="cpu", force_hooks=True)
    assert hasattr(sharded.model.layers[1], "_hf_hook")  # every block wrapped by accelerate's device hooks
    ids = torch.randint(0, 500, (3, 12), generator=torch.Generator().manual_seed(0))
    am = torch.ones_like(ids)
    am[0, :4] = 0  # left padding
    resp = torch.zeros_like(ids, dtype=torch.bool)
    resp[:, 7:] = True
    for mode in ("score", "activation"):
        a = key_neurons(plain.model, ids, am, resp, top_ratio=0.05, mode=mode)
        b = key_neurons(sharded, ids, am, resp, top_ratio=0.05, mode=mode)
        c = key_neurons(via_yaml.model, ids, am, resp, top_ratio=0.05, mode=mode)
        assert all(np.array_equal(x, y) and np.array_equal(x, z) for x, y, z in zip(a, b, c))
    assert all(len(m._forward_pre_hooks) == 0 for m in sharded.modules())
    # transformers 5 dispatches a map only where it spans devices: on one, the model stays where it landed, and the
    # record says so (it recorded no map, and moved the model to the run's device)
    assert not hasattr(via_yaml.model, "hf_device_map")
    assert via_yaml.meta["device_map"] == {"": "cpu"} and str(via_yaml.device) == "cpu"
    assert "device_map" not in plain.meta


def test_vllm_generates_from_the_commit_the_hooked_model_loaded(tmp_path, monkeypatch):
    """A hub model with ``generation_backend: vllm`` is loaded twice, by transformers (the hooked pass) and by vLLM
    (the replies). vLLM was given the entry's revision (None: the branch as it is when vLLM loads), so the two could
    read two commits of a repository that moved in between; it now gets the commit the hooked model loaded. vLLM is
    not installed here: a stand-in module records what it is asked, the model's replies come from the model."""
    import sys
    import types
    from dataclasses import replace

    lm = tiny_lm("llama")
    asked = {}

    class LLM:
        def __init__(self, **kw):
            asked.update(kw)

        def generate(self, requests, params, use_tqdm):
            from reporter.models.generation import generate

            gens = generate(lm, [r["prompt_token_ids"] for r in requests], max_new_tokens=params["max_tokens"])
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=g.response_ids)]) for g in gens]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=lambda **kw: kw))
    from reporter.models.vllm_backend import generate_vllm

    hub = replace(lm, spec=replace(lm.spec, source="org/tiny", revision="main", generation_backend="vllm"),
                  meta={**lm.meta, "vllm_path": "org/tiny", "commit": "c" * 40})
    gens = generate_vllm(hub, [[1, 2, 3]], max_new_tokens=2, stop=[])
    assert asked["model"] == "org/tiny" and asked["revision"] == "c" * 40
    assert len(gens) == 1 and gens[0].prompt_ids == [1, 2, 3]
    local = replace(hub, spec=replace(hub.spec, revision=None), meta={**lm.meta, "vllm_path": "/models/tiny"})
    generate_vllm(local, [[1, 2, 3]], max_new_tokens=2, stop=[])
    assert asked["model"] == "/models/tiny" and asked["revision"] is None
