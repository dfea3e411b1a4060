"""``reporter list``: what an installation can run, read from the registries the run looks names up in."""
from __future__ import annotations

import json

from click.testing import CliRunner

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


def test_text_rows_line_up_and_sources_say_what_is_installed():
    r = CliRunner().invoke(main, ["list", "sources", "tasks"])
    assert r.exit_code == 0, r.output
    blocks = r.output.strip().split("\n\n")
    assert [b.splitlines()[0].split(" (")[0] for b in blocks] == ["tasks", "sources"]  # the kinds' order, not argv's
    rows = [line for line in blocks[1].splitlines()[1:]]
    starts = {line.index(line.split()[1], len(line.split()[0]) + 2) for line in rows}
    assert len(starts) == 1, rows  # one column for the descriptions
    packaged = next(line for line in rows if "packaged:smollm2-135m-instruct" in line)
    assert packaged.endswith("offline (installed)")  # the suite's own setup installs it
    assert blocks[0].splitlines()[-1].endswith("reporter lm-eval ls tasks")


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
    from reporter.tasks import TASKS, register_task

    @register_scorer("listed_scorer")
    def listed_scorer(response, item):
        """Always right."""
        return response, 1.0

    @register_task("listed_broken")
    def listed_broken():
        raise RuntimeError("its data file is gone")

    @dataclass(frozen=True)
    class Derived:
        window: int = 4
        doubled: int = field(init=False, default=0)

    @register_collector
    class Listed(CollectorPlugin):
        """A collector with a derived setting."""
        name, settings = "listed_collector", Derived

    try:
        r = CliRunner().invoke(main, ["list", "--json", "plugins", "tasks", "collectors"])
        assert r.exit_code == 0, r.output
        listed = json.loads(r.output)
        kinds = {row["name"]: row["kind"] for row in listed["plugins"]}
        assert kinds == {"listed_scorer": "scorer", "listed_broken": "task", "listed_collector": "collector"}
        broken = next(row for row in listed["tasks"] if row["name"] == "listed_broken")
        assert broken["description"] == "cannot be built (RuntimeError: its data file is gone)"
        assert next(row for row in listed["collectors"] if row["name"] == "listed_collector")["settings"] == ["window=4"]
    finally:
        SCORERS.remove("listed_scorer"), TASKS.remove("listed_broken"), COLLECTORS.remove("listed_collector")
    r = CliRunner().invoke(main, ["list", "plugins"])
    assert r.output.splitlines()[1] == "  none (no installed package or --plugin module registered one)", r.output
