"""Evidence passes as plugins: the job drives every registered pass, names a failing one in one line, runs the
passes after it, and on a rerun measures again only what is missing.

A pass registered here (in-process) that raises a UserError, and one after it that writes an artifact through
the shared skeleton (``measured``), both ride a real ``reporter run`` of a tiny random Llama.
"""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from reporter.cli import main
from reporter.collect.evidence import EVIDENCE, EvidencePass, measured, register_evidence
from reporter.errors import UserError

from .conftest import small_random

CALLS: list[str] = []


class Failing(EvidencePass):
    name = "test_failing"
    label = "failing pass"
    contamination = False
    order = 70
    artifact = "test_failing.json"

    def run(self, ctx):
        CALLS.append(self.name)
        raise UserError("it broke on purpose")


class Counting(EvidencePass):
    name = "test_counting"
    label = "counting pass"
    contamination = False
    order = 80
    artifact = "test_counting.json"

    def run(self, ctx):
        CALLS.append(self.name)
        measured(ctx.directory / self.artifact, lambda bs: {"n_items": len(ctx.items)}, ctx.lm)


@pytest.fixture
def passes():
    register_evidence(Failing)
    register_evidence(Counting)
    CALLS.clear()
    yield
    EVIDENCE.remove("test_failing")
    EVIDENCE.remove("test_counting")


def test_a_failing_pass_is_one_line_naming_it_and_the_next_pass_still_runs(passes, tmp_path):
    (tmp_path / "p.yaml").write_text("mui: {enabled: false}\nlpp: {enabled: false}\nsmoke_texts: 1\n"
                                     "tasks:\n  - {name: arc_easy, limit: 2, max_new_tokens: 2}\n")
    (tmp_path / "m.yaml").write_text(small_random(f"profile: {tmp_path / 'p.yaml'}\nmodels:\n  - {{name: tiny, "
                                                  "source: random:llama, random: {layers: 1, hidden: 32, intermediate: 48, "
                                                  "heads: 2}}\n"))
    args = ["run", str(tmp_path / "m.yaml"), "-o", str(tmp_path / "run"), "--no-progress", "--no-render"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2
    assert "error: model 'tiny', task 'arc_easy', failing pass: it broke on purpose" in r.output
    task_dir = tmp_path / "run" / "models" / "tiny" / "tasks" / "arc_easy"
    assert CALLS == ["test_failing", "test_counting"]  # in their order, the second despite the first
    assert json.loads((task_dir / "test_counting.json").read_text())["n_items"] == 2
    assert (task_dir / "summary.json").is_file() and (tmp_path / "run" / "results.json").is_file()
    CALLS.clear()
    r = CliRunner().invoke(main, args)  # resume: only the pass that is not done runs again
    assert r.exit_code == 2 and CALLS == ["test_failing"]


def test_a_pass_the_job_could_not_drive_is_refused_when_registered():
    class NoArtifact(EvidencePass):
        name = "test_no_artifact"

        def run(self, ctx):
            pass

    class NoRun(EvidencePass):
        name = "test_no_run"
        artifact = "x.json"

    class BadScope(EvidencePass):
        name = "test_bad_scope"
        artifact = "x.json"
        scope = "run"  # type: ignore[assignment]

        def run(self, ctx):
            pass

    for cls, why in ((NoArtifact, "names its artifact or says when it is done"), (NoRun, "needs a run()"),
                     (BadScope, "scope must be 'model' or 'task'")):
        with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")):
            register_evidence(cls)
        assert cls.name not in EVIDENCE
