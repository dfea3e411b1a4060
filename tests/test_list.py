"""``reporter list``: what an installation can run, read from the registries the run looks names up in."""
from __future__ import annotations

import json

from click.testing import CliRunner

from reporter.catalogue import render_text
from reporter.cli import main


def test_every_listed_name_is_one_the_run_accepts():
    from reporter.config.profile import load_profile
    from reporter.scoring import get_scorer
    from reporter.tasks import get_task

    r = CliRunner().invoke(main, ["list", "--json", "tasks", "profiles", "scorers"])
    assert r.exit_code == 0, r.output
    listed = json.loads(r.output)
    assert {row["name"] for row in listed["tasks"]} >= {"arc_challenge", "mmlu", "gsm8k", "ar", "spc"}
    for row in listed["tasks"]:
        task = get_task(row["name"])
        assert (row["type"], row["scorer"], row["data"]) == ("probe" if task.probe else "benchmark", task.scorer,
                                                              task.source)
    for row in listed["profiles"]:
        assert [t.name for t in load_profile(row["name"]).tasks] == row["tasks"]
    assert [get_scorer(row["name"]) is not None for row in listed["scorers"]] == [True] * len(listed["scorers"])


def test_text_fits_the_terminal_each_text_in_one_column_and_sources_say_what_is_installed():
    r = CliRunner().invoke(main, ["list"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80  # 52 of 94 lines were wider (the longest 205)
    blocks = {b.splitlines()[0].split(" (")[0]: b for b in r.output.strip().split("\n\n")}
    assert list(blocks) == ["tasks", "profiles", "sources", "architectures", "collectors", "evidence", "sections",
                            "scorers"]  # the kinds' order
    rows = [line for line in blocks["profiles"].splitlines() if line.startswith("  ") and not line.startswith("  works")]
    starts = {len(line) - len(line.lstrip()) if line.startswith("   ") else line.index(line.split()[1]) for line in rows}
    assert len(starts) == 1, rows  # first lines and wrapped lines: one column for the text
    quick = next(line for line in rows if line.startswith("  quick "))
    assert quick.split(None, 1)[1].startswith("11 tasks, without a models file, the default models.")
    packaged = " ".join(blocks["sources"].split())  # unwrapped
    assert "packaged:smollm2-135m-instruct HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF), instruct, offline " \
           "(installed)" in packaged  # the suite's own setup installs it
    assert "Your own data needs no plugin: a profile task of type: jsonl" in " ".join(blocks["tasks"].split())
    assert not [line for line in r.output.splitlines() if line.endswith("-")]  # "lm-" / "eval": no break at a hyphen
    assert " ".join(blocks["collectors"].split()).count("Runs: ") == 5
    wide = CliRunner().invoke(main, ["list", "sources"], env={"COLUMNS": "300"})
    assert max(len(line) for line in wide.output.splitlines()) > 80  # the terminal's width, not a fixed one


def test_an_in_process_plugin_is_named_by_its_module_and_listed_under_plugins():
    from reporter.tasks import TASKS, Item, Task, register_task

    @register_task("listed_here")
    def listed_here():
        return Task("listed_here", "exact", "", "", load=lambda: [Item("1", "q", "a")])

    try:
        r = CliRunner().invoke(main, ["list", "--json", "plugins"])
        assert r.exit_code == 0, r.output
        assert {"name": "listed_here", "kind": "task",
                "origin": f"registered in-process by module {__name__}"} in json.loads(r.output)["plugins"]
        assert TASKS.builtin("arc_easy") and not TASKS.builtin("listed_here")
    finally:
        TASKS.remove("listed_here")


def test_wide_names_keep_the_text_in_one_column_on_screen():
    """A plugin task named in CJK characters (two terminal columns each) pushed the text column of its row left of
    the others' and its lines past the terminal's width: the columns are now padded by what the screen shows."""
    from reporter.catalogue import _columns, render_text

    rows = [{"name": name, "type": "task", "scorer": "exact", "description": "Questions about things, long enough to "
             "wrap onto a second line of the listing.", "origin": "built-in"} for name in ("知识问答", "trivia")]
    text = render_text({"tasks": rows}, width=60)
    assert max(_columns(line) for line in text.splitlines()) <= 60
    body = text.split("  Your own data")[0].splitlines()  # the rows, before the closing note
    lines = [line for line in body[1:] if line.startswith("  ")]
    first = [line for line in lines if line.lstrip().startswith(("知识问答", "trivia"))]
    assert len(first) == 2
    starts = {_columns(line[:line.index("Questions")]) for line in first}
    wrapped = {_columns(line) - _columns(line.lstrip()) for line in lines if line.startswith("   ")}  # not the header's
    assert len(starts) == 1 and wrapped == starts, text  # first lines and wrapped lines: one column on screen


def test_an_unknown_kind_is_one_line_and_exit_2():
    r = CliRunner().invoke(main, ["list", "task"])
    assert r.exit_code == 2
    assert r.output == ("error: unknown kind 'task' (did you mean 'tasks'?); available: architectures, collectors, "
                        "evidence, plugins, profiles, scorers, sections, sources, tasks\n")


def test_what_a_plugin_module_adds_anywhere_is_listed_and_a_broken_one_is_a_row_not_a_traceback():
    """A scorer or an architecture a module registers is a plugin too; a task factory that raises, or a settings
    class with a derived field, is listed as what it is (the first version crashed ``reporter list``)."""
    from dataclasses import dataclass, field

    from reporter.collect.collectors import COLLECTORS, CollectorPlugin, register_collector
    from reporter.scoring.scorers import SCORERS, register_scorer
    from reporter.tasks import TASKS, Task, register_task

    @register_scorer("listed_scorer")
    def listed_scorer(response, item):
        """Always right."""
        return response, 1.0

    @register_task("listed_broken")
    def listed_broken():
        raise RuntimeError("its data file is gone")

    @register_task("listed_misspelt")
    def listed_misspelt():
        return Task("listed_misspelt", "exakt", "", "", load=list)

    @dataclass(frozen=True)
    class Derived:
        window: int = 4
        doubled: int = field(init=False, default=0)

    @register_collector
    class Listed(CollectorPlugin):
        """A collector with a derived setting."""
        name, settings = "listed_collector", Derived

        def enabled(self, profile):
            return profile.lpp.enabled  # its own rule: "always" would not be true

    try:
        r = CliRunner().invoke(main, ["list", "--json", "plugins", "tasks", "collectors"])
        assert r.exit_code == 0, r.output
        listed = json.loads(r.output)
        kinds = {row["name"]: row["kind"] for row in listed["plugins"] if row["name"].startswith("listed_")}
        assert kinds == {"listed_scorer": "scorer", "listed_broken": "task", "listed_misspelt": "task",
                         "listed_collector": "collector"}  # (another test may have swapped a built-in chart in)
        problems = {row["name"]: row.get("problem") for row in listed["tasks"]}
        assert problems["listed_broken"] == ("task 'listed_broken' could not be built: its factory raised "
                                             "RuntimeError: its data file is gone")
        assert problems["listed_misspelt"].startswith("task 'listed_misspelt' has an unknown scorer 'exakt' (did you "
                                                      "mean 'exact'?)")  # what validate says, before a model loads
        assert problems["arc_easy"] is None
        # "is my plugin seen?": seen, and said not to work, in the plugins view too
        assert {row["name"]: row.get("problem") for row in listed["plugins"]}["listed_broken"] == problems["listed_broken"]
        row = next(row for row in listed["collectors"] if row["name"] == "listed_collector")
        assert row["settings"] == ["window=4"]
        assert row["switch"] == "as its enabled() decides; settings: plugins.listed_collector"
        assert next(row for row in listed["collectors"] if row["name"] == "logprobs")["switch"] == "always"
    finally:
        SCORERS.remove("listed_scorer"), COLLECTORS.remove("listed_collector")
        TASKS.remove("listed_broken"), TASKS.remove("listed_misspelt")
    r = CliRunner().invoke(main, ["list", "--json", "plugins"])
    assert not [row for row in json.loads(r.output)["plugins"] if row["name"].startswith("listed_")]  # removed
    assert render_text({"plugins": []}).splitlines()[-1] == (
        "  none (no installed package or --plugin module registered one)")
