"""The few-shot count a card states is the one the prompts held.

A built-in task drew at most its few-shot split (``min(shots, len(pool))``) while results.json and the card said
``shots``; and the card's methods always said "instruct models zero-shot, base models 1-shot", whatever the profile
set. Now ``plan_task`` refuses a count the task cannot draw and the card reads the recorded counts.
"""
import copy
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from reporter.card.data import build_card
from reporter.card.render import render
from reporter.card.shots import shots_phrase
from reporter.collect.plan import plan_task
from reporter.config.profile_tasks import TaskConfig
from reporter.errors import UserError

DATA = Path(__file__).parent / "data"
DEFAULTS = "instruct models zero-shot with their chat template, base models 1-shot"


def _run2():
    return (json.loads((DATA / "run2" / "results.json").read_text()),
            json.loads((DATA / "run2" / "manifest.json").read_text()))


def test_a_task_cannot_run_with_fewer_examples_than_its_shots():
    lm = SimpleNamespace(kind="base")  # the refusal comes before any prompt is built
    with pytest.raises(UserError, match=r"task 'gsm8k' has 8 few-shot example\(s\), fewer than shots: 9; use at most 8"):
        plan_task(lm, TaskConfig(name="gsm8k", limit=2, shots=9), seed=0)


def _differing(card):
    """The tasks whose recorded counts differ from the defaults, by a plain loop: task -> {(kind, shots)}."""
    default = {"instruct": 0, "base": 1}
    out = {}
    for t in card["benchmarks"]:
        pairs = {(m["meta"]["kind"], m["tasks"][t]["shots"]) for m in card["models"] if t in m["tasks"]}
        if any(s != default[k] for k, s in pairs):
            out[t] = pairs
    return out


def test_the_card_states_the_defaults_only_where_every_task_ran_with_them(tmp_path):
    results, manifest = _run2()
    card = build_card(copy.deepcopy(results), manifest)
    assert _differing(card) == {}
    assert card["own_shots"] == DEFAULTS  # negative control: the recorded counts are the defaults

    for rec in results["models"].values():  # the profile set gsm8k to 5 shots for every model
        rec["tasks"]["gsm8k"]["shots"] = 5
    results["models"]["tiny"]["tasks"]["boolq"]["shots"] = 3  # and boolq to 3 for the base model alone
    card = build_card(copy.deepcopy(results), manifest)
    assert _differing(card) == {"gsm8k": {("instruct", 5), ("base", 5)}, "boolq": {("instruct", 0), ("base", 3)}}
    assert card["own_shots"] == (DEFAULTS + ", except gsm8k: 5-shot for every model; "
                                 "boolq: zero-shot for instruct models, 3-shot for base models")

    run = tmp_path / "run"
    shutil.copytree(DATA / "run2", run)
    (run / "results.json").write_text(json.dumps(results))
    paths = render(run, formats=("html", "md"))
    for fmt in ("html", "md"):
        text = Path(paths[fmt]).read_text()
        assert "except gsm8k: 5-shot for every model" in text, fmt
        assert "base models 1-shot;" not in text, fmt  # the old sentence, whatever the profile set


def test_lm_eval_tasks_and_probes_are_described_apart():
    card = {"benchmarks": ["arc"], "models": [
        {"meta": {"kind": "base"}, "tasks": {"arc": {"shots": 1}, "hellaswag_lm": {"shots": 10, "scorer": "lm_eval"},
                                              "spc": {"shots": 7}}}]}
    assert shots_phrase(card) == DEFAULTS
