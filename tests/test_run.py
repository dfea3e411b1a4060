"""`reporter run` end to end on tiny models: artifacts, manifest, results.json, resume."""
import json
import os

import pytest
from click.testing import CliRunner

from reporter.cli import main

from .conftest import copy_run, small_random

YAML = """
seed: 11
models:
  - name: Tiny Llama
    source: random:llama
    random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}
  - name: tiny-neox
    source: random:gpt_neox
    random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}
"""


PROFILE = ("lpp: {n_texts: 4, context: 40, min_tokens: 40}\ncontamination: {untrained: true}\n"
           "tasks:\n  - {name: arc_easy, limit: 3, max_new_tokens: 4}\n")


def _yaml(tiny_yaml, text=YAML, name="models.yaml"):
    prof = tiny_yaml(PROFILE, "profile.yaml")
    return tiny_yaml(f"profile: {prof}\n" + small_random(text), name)


@pytest.mark.slow
def test_run_writes_manifest_and_results_then_resumes(tiny_yaml, tmp_path):
    p = _yaml(tiny_yaml)
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["run", str(p), "-o", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    res = json.loads((out / "results.json").read_text())
    man = json.loads((out / "manifest.json").read_text())
    assert res["schema_version"] == 1
    assert list(res["models"]) == ["Tiny Llama", "tiny-neox"]
    for m in res["models"].values():
        assert m["status"] == "complete"
        assert m["meta"]["n_layers"] == 2 and m["meta"]["d_ff"] == 96
        # an untrained model is close to uniform over its vocabulary
        assert 0.5 * m["meta"]["vocab_size"] < m["smoke"]["perplexity"] < 2 * m["meta"]["vocab_size"]
    assert res["models"]["Tiny Llama"]["slug"] == "Tiny-Llama"
    t = res["models"]["Tiny Llama"]["tasks"]["arc_easy"]
    assert t["n"] == 3 and 0 <= t["ci_low"] <= t["score"] <= t["ci_high"] <= 1 and t["shots"] == 1
    assert 0 < t["mui"] <= 100 and len(t["mui_per_layer"]) == 2
    assert t["mui_settings"] == {"definition": "paper", "mode": "score", "top_ratio": 0.001, "rho": 0.9, "n_samples": 3, "n_layers": 2, "d_ff": 96}
    # an untrained model writes no option letter: its answer is the letter it gives most probability
    samples = [json.loads(l) for l in (out / "models" / "Tiny-Llama" / "tasks" / "arc_easy" / "samples.jsonl").open()]
    for smp in samples:
        if smp["answer_source"] == "logprob":
            best = max(range(len(smp["option_probs"])), key=smp["option_probs"].__getitem__)
            assert smp["extracted"] == "ABCDE"[best] and smp["score"] == float(smp["extracted"] == smp["gold"])
    assert t["answer_from_logprob_share"] == sum(s_["answer_source"] == "logprob" for s_ in samples) / 3
    cal = t["calibration"]
    assert cal["n"] == 3 and 0 <= cal["ece"] <= 1 and 0 <= cal["brier"] <= 2
    lpp = res["models"]["Tiny Llama"]["lpp"]
    assert lpp["n_texts"] == 4 and lpp["context"] == 40 and 0 < lpp["entropy_floor"] <= 1
    assert 0 < lpp["participation_ratio"] <= 1 and len(lpp["per_prefix"]) == 10
    assert {c["metric"] for c in res["lpp_correlations"]} == {"entropy_floor", "participation_ratio", "effective_rank"}
    assert all(c["pearson_r"] is None for c in res["lpp_correlations"])  # two random models: no correlation
    assert (out / "card.html").stat().st_size > 100_000 and (out / "card.pdf").read_bytes()[:4] == b"%PDF"
    assert not (out / "model-index").exists()  # random: models are untrained references, published by nobody
    tdir = out / "models" / "Tiny-Llama" / "tasks" / "arc_easy"
    for f in ("samples.jsonl", "neurons.npz", "logprobs.npz", "verbatim.json", "option_order.json", "summary.json"):
        assert (tdir / f).is_file(), f
    assert (out / "models" / "Tiny-Llama" / "reference_logprobs.npz").is_file()
    an = res["analysis"]  # two untrained models: reference rows only, never points of the law
    assert "slope" not in an["law"]["pooled"] and an["law"]["pooled"]["reason"]
    assert an["fairness"]["available"] is False and "no fair adjustment is possible" in an["fairness"]["reason"]
    assert [(c["model_a"], c["model_b"], c["task"]) for c in res["comparisons"]] == [("Tiny Llama", "tiny-neox", "arc_easy")]
    assert man["seed"] == 11 and man["torch"] and man["transformers"] and len(man["config_hash"]) == 16
    assert man["resolved"]["config"]["models"][0]["name"] == "Tiny Llama"
    before = (out / "models" / "Tiny-Llama" / "smoke.json").stat().st_mtime_ns
    r2 = CliRunner().invoke(main, ["run", str(p), "-o", str(out), "--no-progress"])
    assert r2.exit_code == 0 and "already complete" in r2.output
    assert (out / "models" / "Tiny-Llama" / "smoke.json").stat().st_mtime_ns == before
    assert json.loads((out / "results.json").read_text())["models"] == res["models"]
    # the analyse stage re-runs on the artifacts alone
    r3 = CliRunner().invoke(main, ["analyse", str(out)])
    assert r3.exit_code == 0, r3.output
    assert json.loads((out / "results.json").read_text())["analysis"]["law"] == res["analysis"]["law"]


@pytest.mark.slow
def test_a_failing_model_does_not_lose_the_others(tiny_yaml, tmp_path):
    p = _yaml(tiny_yaml, YAML + "  - name: hub-model\n    source: Qwen/Qwen2.5-0.5B-Instruct\n")
    out = tmp_path / "run"
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # tests/conftest.py, before huggingface_hub reads it
    r = CliRunner().invoke(main, ["run", str(p), "-o", str(out), "--no-progress",
                                  "--no-render"])  # the card of a failed model: tests/test_robustness.py (NaN weights)
    assert r.exit_code == 2
    assert "error: model 'hub-model': cannot load hub model 'Qwen/Qwen2.5-0.5B-Instruct'" in r.stderr
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit)  # an exit, not a crash
    res = json.loads((out / "results.json").read_text())
    assert res["models"]["Tiny Llama"]["status"] == "complete"
    assert res["models"]["hub-model"]["status"] == "failed"


@pytest.mark.parametrize("formats,fragment", [("html,docx", "use a comma-separated subset of html, pdf, md"),
                                                ("hf", "reporter render RUN_DIR --format hf --model NAME"),
                                                (",", "use a comma-separated subset")])
def test_run_refuses_an_unknown_card_format_before_anything_runs(tiny_yaml, tmp_path, formats, fragment):
    r = CliRunner().invoke(main, ["run", str(_yaml(tiny_yaml)), "-o", str(tmp_path / "run"), "--format", formats])
    assert r.exit_code == 2 and fragment in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "run").exists()


def test_a_run_made_by_other_reporter_code_is_not_resumed(finished_run, tmp_path):
    """Resuming mixes the run's artifacts with this code's: a run directory made by other reporter code (the
    manifest's ``code_version``, or none recorded) is refused with one line, and the same code resumes it."""
    from reporter.collect.model_cache import code_version
    from reporter.plugin_code import plugin_sources

    out = copy_run(finished_run, tmp_path / "run")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["code_version"] == code_version(*plugin_sources())
    args = ["run", str(finished_run.parent / "models.yaml"), "-o", str(out), "--no-progress", "--no-render"]
    for old, says in (("0" * 64, "(code 000000000000, this is "), (None, "before runs recorded their code version")):
        (out / "manifest.json").write_text(json.dumps({**manifest, "code_version": old, "reporter_code": old} if old
                                                      else {k: v for k, v in manifest.items() if k != "code_version"}))
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
        assert "holds a run made by another version of reporter's code" in r.output and says in r.output
        assert "choose another -o/--output or pass --force" in r.output
        assert ("; reporter's own code)" in r.output) is bool(old)  # which code changed: here reporter's
    (out / "manifest.json").write_text(json.dumps(manifest))
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0 and "already complete" in r.output, r.output


def test_the_code_version_is_the_code_that_measures(tmp_path):
    """A change to what judges and shows (``analyse/``, ``card/``, the catalogue) keeps a run resumable and the
    caches warm; a change anywhere else makes a new version. Nothing that measures imports the parts left out: a
    fresh process that imports every collect module and the executors holds none of them.
    """
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import reporter
    from reporter.collect.model_cache import NOT_MEASURING, code_version, source_digest

    root = Path(reporter.__file__).resolve().parent
    assert code_version() == source_digest(root, exclude=NOT_MEASURING) != source_digest(root)
    copy = tmp_path / "reporter"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    before = source_digest(copy, exclude=NOT_MEASURING)
    for name, measures in (("card/render.py", False), ("analyse/law.py", False), ("catalogue.py", False),
                           ("collect/option_order.py", True), ("metrics/min_k.py", True), ("cli.py", True),
                           ("run/pipeline.py", True), ("tasks/base.py", True)):
        f = copy / name
        text = f.read_text()
        f.write_text(text + "\n# changed\n")
        assert (source_digest(copy, exclude=NOT_MEASURING) != before) is measures, name
        f.write_text(text)
    left_out = tuple("reporter." + n.removesuffix(".py") for n in NOT_MEASURING)
    # a fresh process: what measuring loads; and the key of reporter's own LPP pass before and after the card, the
    # board and the pipeline are imported (it counted whatever reporter module the process had loaded)
    code = ("import importlib, json, pkgutil, sys, reporter.collect as c\n"
            "from reporter.collect.model_cache import code_version\n"
            "from reporter.plugin_code import module_files\n"
            "key = lambda: code_version(*module_files('reporter.collect.collectors.lpp'))\n"
            "for m in pkgutil.walk_packages(c.__path__, 'reporter.collect.'): importlib.import_module(m.name)\n"
            "import reporter.run.executors\n"
            "loaded, before = sorted(m for m in sys.modules if m.startswith('reporter.')), key()\n"
            "import reporter.card.render, reporter.analyse.board, reporter.run.pipeline\n"
            "print(json.dumps([loaded, before == key() == code_version()]))")
    loaded, same_key = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                 check=True).stdout)
    assert same_key
    assert {"reporter.collect.job", "reporter.collect.option_order", "reporter.run.executors"} <= set(loaded)
    assert [m for m in loaded if m in left_out or m.startswith(tuple(f"{x}." for x in left_out))] == []


def test_changed_config_in_the_same_directory_is_refused(finished_run, tmp_path):
    out = copy_run(finished_run, tmp_path / "run")  # the suite's shared run, made by finished_run.parent/models.yaml
    made_by = (finished_run.parent / "models.yaml").read_text()
    assert "seed: 3\n" in made_by
    (tmp_path / "other.yaml").write_text(made_by.replace("seed: 3\n", "seed: 4\n"))  # only the seed differs
    r = CliRunner().invoke(main, ["run", str(tmp_path / "other.yaml"), "-o", str(out), "--no-progress"])
    assert r.exit_code == 2 and "holds a run with a different configuration" in r.output
    # the unchanged configuration resumes the copy: the refusal above was the seed's doing
    r = CliRunner().invoke(main, ["run", str(finished_run.parent / "models.yaml"), "-o", str(out), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 0 and "already complete" in r.output, r.output


@pytest.mark.slow
def test_cli_overrides_for_seed_and_device(tiny_yaml, tmp_path):
    p = _yaml(tiny_yaml, YAML.replace("seed: 11", "seed: 11\ndevice: auto"))
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["run", str(p), "-o", str(out), "--no-progress", "--format", "md",
                                  "--seed", "3", "--device", "cpu", "--tasks", "arc_easy", "--limit", "2"])
    assert r.exit_code == 0, r.output
    assert (out / "card.md").is_file() and not (out / "card.html").exists() and not (out / "card.pdf").exists()
    assert f"model card: {out / 'card.md'}\n" in r.output
    man = json.loads((out / "manifest.json").read_text())
    assert man["seed"] == 3 and man["resolved"]["config"]["device"] == "cpu"
    assert [(t["name"], t["limit"]) for t in man["resolved"]["profile"]["tasks"]] == [("arc_easy", 2)]  # --limit
    assert man["resolved"]["profile"]["name"] == "profile (2 items each)"  # what the card calls the profile
    res = json.loads((out / "results.json").read_text())
    assert {t["n"] for m in res["models"].values() for t in m["tasks"].values()} == {2}
    assert {m["meta"]["device"] for m in res["models"].values()} == {"cpu"}
    for model, m in res["models"].items():  # each task's progress line says how long the task took
        assert m["tasks"]
        for task, t in m["tasks"].items():
            line = next(x for x in r.output.splitlines() if x.startswith(f"{model} / {task}: "))
            assert line.endswith(f"({t['seconds']:.1f} s)"), line
    assert {m["meta"]["random_seed"] for m in res["models"].values()} == {3}


def test_an_other_split_file_counts_by_its_content_not_its_place(tmp_path):
    """Moving the other-split file keeps a run resumable; changing what is in it does not."""
    from reporter.run.manifest import config_hash

    def h(path):
        return config_hash({"config": {"seed": 1, "output": "x"},
                            "profile": {"tasks": [{"name": "gsm8k", "limit": 5, "other_split": str(path)}]}})

    a, b = tmp_path / "a" / "train.jsonl", tmp_path / "b" / "moved.jsonl"
    for p in (a, b):
        p.parent.mkdir()
        p.write_text('{"question": "q?", "answer": "#### 1"}\n')
    assert h(a) == h(b)
    b.write_text('{"question": "another q?", "answer": "#### 2"}\n')
    assert h(a) != h(b)


def test_editing_a_jsonl_tasks_data_after_a_run_measures_it_again_not_resumed(tiny_yaml, tmp_path):
    """A jsonl task's data file counts by its content: a finished run whose questions changed underneath it
    is not resumed with the old answers (it was, when the hash counted the path); the task is measured again on the
    new questions (it was refused as another configuration, before a task's entry had its own key)."""
    data = tmp_path / "qa.jsonl"
    rows = [{"id": f"q{i}", "question": f"What is {i} plus 1?", "answer": str(i + 1)} for i in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prof = tiny_yaml("lpp: {enabled: false}\nmui: {enabled: false}\nsmoke_texts: 1\n"
                     "contamination: {verbatim_items: 0, reference_texts: 2}\n"
                     f"tasks:\n  - {{name: qa, type: jsonl, path: {data}, prompt_field: question, answer_field: answer,\n"
                     "     scorer: numeric, max_new_tokens: 2}\n",
                     "profile.yaml")
    models = tiny_yaml(small_random(f"profile: {prof}\nmodels:\n  - {{name: t, source: random:llama, "
                                    "random: {layers: 1, hidden: 32, intermediate: 48, heads: 2}}\n"))
    args = ["run", str(models), "-o", str(tmp_path / "run"), "--no-progress", "--no-render"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    data.write_text(data.read_text().replace("What is 2 plus 1?", "What is 2 plus 2?").replace('"3"', '"4"'))
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "task 'qa': its entry is not the one it was measured with (the content of a file it names): measuring " \
        "it again for every model" in r.output
    samples = (tmp_path / "run" / "models" / "t" / "tasks" / "qa" / "samples.jsonl").read_text()
    assert "What is 2 plus 2?" in samples and "What is 2 plus 1?" not in samples


@pytest.mark.slow
def test_each_models_weights_are_freed_when_its_measurement_ends_without_a_collection(tiny_yaml, tmp_path, monkeypatch):
    """Nothing of a model's measurement (evidence, collectors, tasks) keeps its weights alive once it is done, so the
    next model loads into freed memory by reference counting alone; the full garbage collection that would
    otherwise be needed cost 0.4 s per model in a large process."""
    import gc
    import types
    import weakref

    from transformers import GPTNeoXForCausalLM, LlamaForCausalLM  # noqa: F401

    from reporter.collect import job

    # (the model classes are imported above: the frames of a class's first import, whose locals include the
    # model being built, can stay referenced by the import machinery's caches)
    real, seen = job.load_model, []

    def load_model(*args, **kw):
        lm = real(*args, **kw)
        seen.append(weakref.ref(lm.model))
        return lm

    def measured(*args, **kw):
        gc.disable()  # only reference counting frees anything from here on
        try:
            out = real_collect(*args, **kw)
            assert all(ref() is None for ref in seen), "a model outlived its measurement"
            return out
        finally:
            gc.enable()

    real_collect, collections = job._collect_model, []
    monkeypatch.setattr(job, "gc", types.SimpleNamespace(collect=lambda *a: collections.append(a)))
    monkeypatch.setattr(job, "load_model", load_model)
    monkeypatch.setattr(job, "_collect_model", measured)
    r = CliRunner().invoke(main, ["run", str(_yaml(tiny_yaml)), "-o", str(tmp_path / "run"), "--no-progress",
                                  "--no-render"])
    assert r.exit_code == 0, r.output
    assert len(seen) == 2 and collections == []  # freed without the collection


def test_a_run_that_passes_midnight_renders_the_directory_it_wrote(tiny_yaml, tmp_path, monkeypatch):
    """The default output directory (reports/<stem>-<date>) is named once per command: a run that started on one day
    and finished on the next rendered reports/<stem>-<next day>, which did not exist (make demo, 23:58 to 00:03)."""
    import datetime

    import reporter.run.pipeline as pipeline

    calls = []

    class _Date(datetime.date):
        @classmethod
        def today(cls):  # the first call on 2026-12-04, every later one the next day
            calls.append(1)
            return datetime.date(2026, 12, 4 if len(calls) == 1 else 5)

    monkeypatch.setattr(pipeline, "_dt", type("dt", (), {"date": _Date}))
    monkeypatch.chdir(tmp_path)
    prof = tiny_yaml("lpp: {enabled: false}\nmui: {enabled: false}\nsmoke_texts: 1\n"
                     "contamination: {verbatim_items: 0, reference_texts: 0, order_items: 0, split_items: 0}\n"
                     "tasks:\n  - {name: arc_easy, limit: 2, max_new_tokens: 2}\n", "profile.yaml")
    models = tiny_yaml(small_random(f"profile: {prof}\nmodels:\n  - {{name: t, source: random:llama, "
                                    "random: {layers: 1, hidden: 32, intermediate: 48, heads: 2}}\n"), "late.yaml")
    r = CliRunner().invoke(main, ["run", str(models), "--no-progress", "--format", "md"])
    assert r.exit_code == 0, r.output
    assert "run directory: reports/late-2026-12-04" in r.output
    assert (tmp_path / "reports" / "late-2026-12-04" / "card.md").is_file()
    assert not (tmp_path / "reports" / "late-2026-12-05").exists()


def test_the_most_common_answer_is_scored_on_the_evaluated_items_too(finished_run):
    """summary.json's ``majority.evaluated``: the share of the very items the model answered whose gold is the
    split's most common answer, counted here from samples.jsonl's gold by a plain loop."""
    for summary_path in sorted(finished_run.glob("models/*/tasks/arc_easy/summary.json")):
        summary = json.loads(summary_path.read_text())
        gold = [json.loads(x)["gold"] for x in (summary_path.parent / "samples.jsonl").read_text().splitlines()]
        answer = summary["majority"]["answer"]
        letters = [str(g).strip().strip("()").upper() if not isinstance(g, int) else "ABCDEFGHIJ"[g] for g in gold]
        assert summary["majority"]["evaluated"] == pytest.approx(sum(x == answer for x in letters) / len(gold))
        assert summary["majority"]["over"] > len(gold)  # the split's share is over more items than were evaluated
