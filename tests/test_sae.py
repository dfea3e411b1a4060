"""MUI over SAE features: a small SAE trained here in seconds, saved in SAELens and Gemma Scope formats,
loaded back, and its key features checked against a float64 loop reference, exactly, with padding.

No pretrained SAE is reachable offline, so the SAE is trained with plain PyTorch on a tiny random
model's residual stream (a few hundred steps of reconstruction + L1). The end-to-end test runs
`reporter run` with neuron and feature MUI in the same pass, and the one-line refusals.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import save_file

from reporter.cli import main
from reporter.collect.collectors.sae import SAECollector, utilization_by_sae
from reporter.instrument.batch import PassBatch
from reporter.instrument.hooked_pass import hooked_pass
from reporter.models.adapters import get_adapter
from reporter.models.sae import SAE, hook_module, load_sae_file
from tests.conftest import tiny_model

from .conftest import small_random

D_SAE = 96


def _train_sae(model, layer: int, *, hook: str = "resid_post", steps: int = 300, seed: int = 0
               ) -> dict[str, torch.Tensor]:
    """A ReLU SAE on the ``hook`` activations of ``layer`` over random token sequences: MSE + L1, Adam."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (32, 16), generator=g)
    d = model.config.hidden_size
    stub = SAE("stub", layer, hook, "standard", torch.zeros(d, 1), torch.zeros(1), torch.zeros(d), None, False, "")
    cap = _Capture(stub)
    hooked_pass(model, get_adapter(model), PassBatch(ids, torch.ones_like(ids), torch.ones_like(ids).bool()), [cap])
    raw = cap.x.reshape(-1, d).float()
    scale = float(raw.std())  # train on unit-scale activations, then fold the scale into the weights
    x = raw / scale
    torch.manual_seed(seed)
    W_enc = torch.nn.Parameter(torch.randn(d, D_SAE) / d ** 0.5)
    W_dec = torch.nn.Parameter(W_enc.detach().t().clone())
    b_enc, b_dec = torch.nn.Parameter(torch.zeros(D_SAE)), torch.nn.Parameter(x.mean(0).clone())
    opt = torch.optim.Adam([W_enc, W_dec, b_enc, b_dec], lr=3e-3)
    first = None
    for _ in range(steps):
        f = torch.relu((x - b_dec) @ W_enc + b_enc)
        loss = ((f @ W_dec + b_dec - x) ** 2).mean() + 1e-3 * f.abs().sum(1).mean()
        first = first if first is not None else float(loss.detach())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < first  # it trained
    return {k: v.detach().contiguous() for k, v in
            {"W_enc": W_enc / scale, "W_dec": W_dec * scale, "b_enc": b_enc, "b_dec": b_dec * scale}.items()}


def _save_saelens(path: Path, w: dict[str, torch.Tensor], layer: int, hook: str = "resid_post",
                  architecture: str = "standard") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in w.items()}, str(path / "sae_weights.safetensors"))
    cfg = {"architecture": architecture, "d_in": int(w["W_enc"].shape[0]), "d_sae": int(w["W_enc"].shape[1]),
           "dtype": "float32", "apply_b_dec_to_input": True, "normalize_activations": "none",
           "metadata": {"hook_name": f"blocks.{layer}.hook_{hook}", "model_name": "tiny"}}
    (path / "cfg.json").write_text(json.dumps(cfg))
    return path


def _save_gemma_scope(path: Path, w: dict[str, torch.Tensor], threshold: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Gemma Scope does not centre its input: fold b_dec into b_enc, so the encoder computes the same pre-activations
    b_enc = (w["b_enc"] - w["b_dec"] @ w["W_enc"]).numpy()
    np.savez(path, W_enc=w["W_enc"].numpy(), W_dec=w["W_dec"].numpy(), b_enc=b_enc,
             b_dec=w["b_dec"].numpy(), threshold=np.full(w["W_enc"].shape[1], threshold, np.float32))
    return path


class _Capture:
    """Keeps the activation an SAE reads, from the same hooked pass."""

    def __init__(self, sae: SAE):
        self.sae, self.x = sae, None

    def attach(self, hooks, adapter, batch):
        module, where = hook_module(adapter, self.sae)
        if where == "input":
            hooks.on_input(module, lambda x: setattr(self, "x", x.detach().clone()))
        else:
            hooks.on_output(module, lambda out: setattr(self, "x", (out[0] if isinstance(out, tuple) else out)
                                                         .detach().clone()))

    def after_forward(self, batch, logits):
        pass


def _reference(sae: SAE, x: torch.Tensor, positions: torch.Tensor, rho: float) -> list[set[int]]:
    """Key features per sample with plain float64 loops over positions, features and dimensions."""
    W = sae.W_enc.double().tolist()
    b_enc, b_dec = sae.b_enc.double().tolist(), sae.b_dec.double().tolist()
    thr = sae.threshold.double().tolist() if sae.threshold is not None else None
    out = []
    for b in range(x.shape[0]):
        best = [float("-inf")] * sae.d_sae
        rows = [x[b, t].double().tolist() for t in range(x.shape[1]) if positions[b, t]]
        for row in rows:
            if sae.apply_b_dec_to_input:
                row = [v - c for v, c in zip(row, b_dec)]
            for j in range(sae.d_sae):
                pre = b_enc[j]
                for i in range(len(row)):
                    pre += row[i] * W[i][j]
                f = (pre if pre > thr[j] else 0.0) if thr is not None else max(pre, 0.0)
                best[j] = max(best[j], f)
        M = max(best) if rows else 0.0
        out.append({j for j in range(sae.d_sae) if M > 0 and best[j] >= rho * M})
    return out


def _batch(vocab: int, seed: int) -> PassBatch:
    """Three left-padded sequences of different lengths with responses of different lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (3, 12), generator=g)
    am = torch.ones_like(ids)
    am[1, :4] = 0
    am[2, :7] = 0
    resp = torch.zeros_like(ids, dtype=torch.bool)
    resp[0, 8:] = True
    resp[1, 10:] = True
    resp[2, 11:] = True
    return PassBatch(ids, am, resp)


@pytest.mark.parametrize("family,hook,fmt", [("llama", "resid_post", "saelens"), ("gemma", "resid_post", "npz"),
                                              ("llama", "mlp_out", "npz"), ("gemma", "resid_pre", "saelens")])
def test_key_features_equal_a_float64_loop_reference(tmp_path, family, hook, fmt):
    model = tiny_model(family, seed=1)
    w = _train_sae(model, 1, hook=hook)
    if fmt == "saelens":
        sae = load_sae_file(_save_saelens(tmp_path / "sae", w, 1, hook), layer=1)
    else:  # JumpReLU with a threshold that switches some features off
        sae = load_sae_file(_save_gemma_scope(tmp_path / "params.npz", w, 0.05), layer=1, hook=hook)
    assert sae.hook == hook and sae.layer == 1 and sae.d_sae == D_SAE
    assert torch.equal(sae.W_enc, w["W_enc"]) and torch.equal(sae.b_dec, w["b_dec"])
    batch = _batch(model.config.vocab_size, seed=2)
    for rho in (0.9, 0.5):
        c, cap = SAECollector([sae], rho=rho), _Capture(sae)
        hooked_pass(model, get_adapter(model), batch, [cap, c])
        expected = _reference(sae, cap.x, batch.scored_positions(), rho)
        got = [set(s.tolist()) for s in c.results()]
        assert got == expected
        assert all(got)  # every sample has key features
        assert rho == 0.9 or any(len(s) > 1 for s in got)  # a lower rho keeps more than the strongest


def test_chunking_and_several_layers_give_the_same_sets(tmp_path):
    model = tiny_model("llama", seed=3)
    saes = [load_sae_file(_save_saelens(tmp_path / f"l{l}", _train_sae(model, 0, steps=50, seed=l), l), layer=l)
            for l in (0, 1)]
    batch = _batch(model.config.vocab_size, seed=4)
    whole, chunked = SAECollector(saes, chunk_elements=1 << 30), SAECollector(saes, chunk_elements=1)
    hooked_pass(model, get_adapter(model), batch, [whole, chunked])
    assert [s.tolist() for s in whole.results()] == [s.tolist() for s in chunked.results()]
    flat = whole.results()
    assert any(s.max() >= D_SAE for s in flat) and any(s.min() < D_SAE for s in flat)  # both layers contribute
    total, per = utilization_by_sae(flat, whole.offsets)
    union = set().union(*map(set, (s.tolist() for s in flat)))
    assert total == len(union) / (2 * D_SAE)
    assert per == [len({f for f in union if f < D_SAE}) / D_SAE, len({f for f in union if f >= D_SAE}) / D_SAE]


def test_wrong_width_missing_layer_and_nan_weights_are_one_line_errors(tmp_path):
    from reporter.errors import UserError

    model = tiny_model("llama")
    w = _train_sae(model, 0, steps=5)
    narrow = {k: (v[:32] if k == "W_enc" else v[:, :32] if k == "W_dec" else v[:32] if k == "b_dec" else v)
              for k, v in w.items()}
    sae = load_sae_file(_save_saelens(tmp_path / "narrow", narrow, 0), layer=0)
    with pytest.raises(UserError, match="d_in 32 does not match the model's hidden size 64"):
        hook_module(get_adapter(model), sae)
    far = load_sae_file(_save_saelens(tmp_path / "far", w, 7), layer=7)
    with pytest.raises(UserError, match=r"blocks.7.hook_resid_post does not exist; the model has 2 layers"):
        hook_module(get_adapter(model), far)
    with pytest.raises(UserError, match="trained on layer 7"):
        load_sae_file(tmp_path / "far", layer=3)
    broken = {k: v.clone() for k, v in w.items()}
    broken["W_enc"][0, :3] = float("nan")
    with pytest.raises(UserError, match=r"'W_enc' holds 3 NaN or infinite value\(s\) of \d+; the SAE file is damaged"):
        load_sae_file(_save_saelens(tmp_path / "nan", broken, 0), layer=0)


# --- end to end --------------------------------------------------------------------------------

PROFILE = """\
name: sae-test
mui: {{top_ratio: 0.01, unit: both, sae: {{path: {sae}, layers: [1], rho: 0.9}}}}
lpp: {{enabled: false}}
contamination: {{verbatim_items: 0, reference_texts: 4}}
smoke_texts: 2
tasks:
  - {{name: arc_easy, limit: 6, shots: 0, max_new_tokens: 4}}
  - {{name: sums, type: jsonl, path: sums.jsonl, prompt_field: q, answer_field: a, scorer: numeric, shots: 0,
      max_new_tokens: 4}}
"""


@pytest.fixture(scope="module")
def sae_run(tmp_path_factory):
    from tests.test_golden import _save_local_model

    root = tmp_path_factory.mktemp("sae")
    _save_local_model(root / "m", "llama", 1)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(root / "m")
    _save_saelens(root / "sae", _train_sae(model, 1, steps=100), 1)
    (root / "sums.jsonl").write_text("".join(json.dumps({"q": f"What is {i} + 2?", "a": str(i + 2)}) + "\n"
                                             for i in range(8)))
    (root / "profile.yaml").write_text(PROFILE.format(sae="sae"))
    (root / "models.yaml").write_text("profile: profile.yaml\nseed: 3\nmodels:\n  - {name: M, source: ./m}\n")
    r = CliRunner().invoke(main, ["run", str(root / "models.yaml"), "-o", str(root / "run"), "--no-progress"])
    assert r.exit_code == 0, r.output
    return root, json.loads((root / "run" / "results.json").read_text())


def test_run_reports_feature_and_neuron_mui_from_one_pass(sae_run):
    root, res = sae_run
    t = res["models"]["M"]["tasks"]["arc_easy"]
    assert t["mui"] > 0 and 0 < t["mui_sae"] <= 100  # both units from the same pass
    assert t["mui_sae_per_layer"] == [t["mui_sae"]]  # one SAE layer
    s = t["mui_sae_settings"]
    assert s["rho"] == 0.9 and s["n_samples"] == 6 and s["saes"][0]["layer"] == 1 and s["saes"][0]["d_sae"] == D_SAE
    # MUI(SAE) from features.npz, recomputed here
    from reporter.store.neurons import load_neuron_sets

    _, sets, meta = load_neuron_sets(root / "run" / "models" / "M" / "tasks" / "arc_easy" / "features.npz")
    assert meta["unit"] == "sae" and len(sets) == 6
    union = set().union(*(set(x.tolist()) for x in sets))
    assert t["mui_sae"] == pytest.approx(100 * len(union) / D_SAE)
    top = t["sae_top_features"]
    counts = {f: sum(f in set(x.tolist()) for x in sets) for f in union}
    assert top[0]["feature"] == max(counts, key=lambda f: (counts[f], -f)) and top[0]["layer"] == 1
    assert top[0]["share"] == pytest.approx(counts[top[0]["feature"]] / 6)


def test_card_shows_feature_mui_and_top_features(sae_run):
    root, res = sae_run
    html = (root / "run" / "card.html").read_text()
    assert (root / "run" / "card.md").is_file()  # `reporter run` writes the Markdown card too
    assert "MUI over SAE features" in html and "blocks.1.hook_resid_post" in html
    f = res["models"]["M"]["tasks"]["arc_easy"]["sae_top_features"][0]["feature"]
    assert f"#{f}" in html


@pytest.mark.browser
def test_pdf_feature_mui_of_many_tasks_stays_on_the_page(sae_run, tmp_path):
    """A run with many tasks: MUI over SAE features gets a row per task (a column per model), so no task's value
    runs off the PDF page (it had a column per task)."""
    import shutil
    import subprocess

    from reporter.card.render import render

    root, res = sae_run
    run = tmp_path / "run"
    shutil.copytree(root / "run", run)
    res = json.loads((run / "results.json").read_text())
    base = res["models"]["M"]["tasks"]["arc_easy"]
    tasks = [f"task_number_{i:02d}" for i in range(12)]
    for i, t in enumerate(tasks):
        res["models"]["M"]["tasks"][t] = {**base, "mui_sae": round(10.0 + i + 0.123, 3)}
    (run / "results.json").write_text(json.dumps(res))
    out = render(run, formats=("pdf",))
    text = subprocess.run(["pdftotext", "-layout", str(out["pdf"]), "-"], check=True, capture_output=True,
                          text=True).stdout
    section = text[text.index("MUI over sparse-autoencoder"):]
    section = section[:section.index("Utility Law on features")]
    assert [t for t in tasks if t not in section] == []
    assert all(f"{10.0 + i + 0.123:.3f}" in section for i in range(12))


def test_sae_config_errors_are_one_line(tmp_path):
    (tmp_path / "p.yaml").write_text("tasks: [arc_easy]\nmui: {unit: sae, sae: {path: missing-dir, layers: [1]}}\n")
    (tmp_path / "m.yaml").write_text("profile: p.yaml\nmodels:\n  - {name: M, source: random:llama}\n")
    r = CliRunner().invoke(main, ["validate", str(tmp_path / "m.yaml")])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "mui.sae.path: SAE file" in r.stderr and "missing-dir' does not exist" in r.stderr
    (tmp_path / "p.yaml").write_text("tasks: [arc_easy]\nmui: {unit: sae}\n")
    r = CliRunner().invoke(main, ["validate", str(tmp_path / "m.yaml")])
    assert r.exit_code == 2 and "models[0].sae: is required when the profile's mui.unit is sae" in r.stderr


def test_wrong_width_sae_fails_the_run_in_one_line(tmp_path):
    model = tiny_model("llama")
    w = _train_sae(model, 0, steps=5)
    narrow = {k: (v[:32] if k in ("W_enc", "b_dec") else v[:, :32] if k == "W_dec" else v) for k, v in w.items()}
    _save_saelens(tmp_path / "narrow", narrow, 0)
    (tmp_path / "p.yaml").write_text("tasks: [{name: arc_easy, limit: 2, max_new_tokens: 2}]\nlpp: {enabled: false}\n"
                                     "mui: {unit: sae, sae: {path: narrow}}\n")
    (tmp_path / "m.yaml").write_text(small_random("profile: p.yaml\nmodels:\n  - {name: M, source: random:llama, "
                                                  "random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}}\n"))
    r = CliRunner().invoke(main, ["run", str(tmp_path / "m.yaml"), "-o", str(tmp_path / "run"), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 2
    assert "d_in 32 does not match the model's hidden size 64" in r.stderr and "Traceback" not in r.output


def test_features_only_run_feeds_the_diversity_analysis(sae_run):
    root, _ = sae_run
    (root / "profile-sae.yaml").write_text(PROFILE.format(sae="sae").replace("unit: both", "unit: sae"))
    (root / "models-sae.yaml").write_text("profile: profile-sae.yaml\nseed: 3\nmodels:\n  - {name: M, source: ./m}\n")
    r = CliRunner().invoke(main, ["run", str(root / "models-sae.yaml"), "-o", str(root / "run-sae"), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 0, r.output
    res = json.loads((root / "run-sae" / "results.json").read_text())
    t = res["models"]["M"]["tasks"]["arc_easy"]
    assert "mui" not in t and t["mui_sae"] > 0  # features only: no neuron pass work, no neurons.npz
    assert not (root / "run-sae" / "models" / "M" / "tasks" / "arc_easy" / "neurons.npz").exists()
    div = res["analysis"]["diversity"]["M"]
    assert div and "arc_easy" in json.dumps(div)


def test_hub_release_without_sae_lens_is_one_clear_line(monkeypatch):
    import sys

    from reporter.config import SAEConfig
    from reporter.errors import UserError
    from reporter.models.sae import load_saes

    monkeypatch.setitem(sys.modules, "sae_lens", None)  # as on a machine without sae-lens: import fails
    with pytest.raises(UserError, match="needs the sae-lens package .* offline, give sae.path"):
        load_saes(SAEConfig(release="gemma-scope-2b-pt-res-canonical", id="layer_{layer}/width_16k/canonical",
                            layers=(12,)))
