"""The pipeline: collect every model (through an executor), then analyse; the card is rendered by the CLI.

>>> from reporter.config import parse_config
>>> cfg = parse_config([{"name": "tiny", "source": "random:llama",
...                      "random": {"layers": 2, "hidden": 64, "intermediate": 128, "heads": 4}}])
>>> default_output(cfg).parent.as_posix()
'reports'
"""
from __future__ import annotations

import contextlib
import datetime as _dt
from pathlib import Path
from typing import Any

from ..analyse import write_analysis, write_results
from ..collect.plan import build_task
from ..config import Profile, RunConfig, check_sae
from ..errors import UserError
from ..installed import make_writable_dir
from ..store.atomic import read_json, write_json
from ..store.layout import RunDir, slugify
from ..store.lock import run_lock
from .executors import get_executor
from .manifest import build_manifest, collection_record, model_work_record


def default_output(cfg: RunConfig) -> Path:
    """``reports/<file stem>-<date>`` (``default-<date>`` for the embedded model list)."""
    stem = Path(cfg.path).stem if not cfg.path.startswith("<") else "default"
    return Path("reports") / f"{slugify(stem)}-{_dt.date.today().isoformat()}"


def run(cfg: RunConfig, output: str | Path | None = None, *, profile: Profile | None = None,
        force: bool = False, progress: bool = True, command: list[str] | None = None,
        executor: str | None = None, address: str | None = None,
        jobs: Any = None) -> tuple[dict[str, Any], list[str]]:
    """Run every model of ``cfg``; return the results dict (also written to results.json) and the failures.

    A model or task that fails does not stop the others: its failure lines are returned (and
    recorded in results.json), everything else is saved, and a rerun resumes.

    ``executor`` ``local`` (default) runs the models one after another here; ``ray`` makes
    each model a Ray task (see :mod:`reporter.run.executors`); ``jobs`` is an executor of the caller's own
    (lm-eval's command line runs its one, already loaded model here). Then the analyse stage runs on
    the artifacts. A run directory holding a run of another configuration is refused unless
    ``force``.
    """
    profile = profile or Profile(name=None)
    rd = RunDir(output or cfg.output or default_output(cfg))
    run_jobs = jobs or get_executor(executor or cfg.executor, address or cfg.address)
    check_user_data(profile)
    check_sae(cfg, profile)
    if (connect := getattr(run_jobs, "connect", None)) is not None:  # a cluster: reachable before anything is written
        connect()
    create_run_dir(rd.root)
    with run_lock(rd.root):
        old = read_json(rd.manifest)
        manifest = build_manifest(cfg, profile, command)
        if old and old.get("config_hash") != manifest["config_hash"] and not force:
            raise UserError(f"{rd.root}: holds a run with a different configuration (config hash "
                            f"{old.get('config_hash')} vs {manifest['config_hash']}); choose another -o/--output or "
                            "pass --force")
        write_json(rd.manifest, manifest)
        failures = run_jobs(cfg, str(rd.root.resolve()), profile, force=force, progress=progress)
        write_json(rd.manifest, {**manifest, "collection": collection_record(rd), "model_work": model_work_record(rd)})
        write_results(rd.root)
        write_analysis(rd.root)
        res: dict[str, Any] = read_json(rd.results)
    if failures:
        saved = "the other models' results are" if len(cfg.models) > 1 else "the finished work is"
        failures = failures + [f"{rd.root}: {saved} saved; fix the above and rerun to resume"]
    return res, failures


def check_user_data(profile: Profile) -> None:
    """Read every ``type: jsonl`` task's file and every ``other_split:`` file, and check every ``items:``
    core set against its task, now, so that their problems stop the run before a model loads.
    """
    for i, t in enumerate(profile.tasks):
        if t.lm_eval is not None:
            if t.items is not None:  # document ids: lm-eval's task is loaded (once per process) to check them
                from ..tasks.lm_eval_source import include_dirs, resolve, select_docs

                task = resolve(t.lm_eval_group or t.lm_eval, include_dirs(profile.lm_eval_include)).task(t.lm_eval)
                select_docs(len(task.eval_docs), t.name, limit=None, seed=0, only=t.items)
            continue
        if not (t.type == "jsonl" or t.items is not None or t.other_split):
            continue
        task = build_task(t)
        if t.type == "jsonl" or t.items is not None:
            try:
                known = {it.id for it in task.items()}
            except UserError as e:
                if t.type != "jsonl":
                    raise
                own = f"task '{t.name}': "
                raise UserError([f"tasks[{i}].path ({t.name}): {line.removeprefix(own)}" for line in e.lines]) from None
            if t.type == "jsonl" and t.shots is not None and len(known) <= t.shots:
                raise UserError(f"tasks[{i}] ({t.name}): its {len(known)} item(s) would all be taken as few-shot "
                                f"examples (shots: {t.shots}), leaving none to evaluate; add items or lower shots")
            if t.items is not None and not set(t.items) <= known:
                missing = sorted(set(t.items) - known)
                raise UserError(f"task '{t.name}': items: {len(missing)} of its {len(t.items)} item ids are not items "
                                f"of the task (first: {missing[0]!r}); was {t.items_from or 'the list'} written for "
                                "this task?")
        if t.other_split and task.other_split is not None:
            try:
                task.other_split()
            except UserError as e:
                raise UserError(f"tasks[{i}].other_split ({t.name}): {e}") from None


def create_run_dir(root: Path) -> None:
    """Create the run directory (and its parents) and check that it is writable.

    On failure nothing is left behind: the directories this call made are removed again.
    """
    if root.exists() and not root.is_dir():
        raise UserError(f"{root}: exists and is not a directory; choose another -o/--output")
    made, parent = [], root
    while not parent.exists():
        made.append(parent)
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{root}: cannot be created because {parent} is a file; choose another -o/--output")
    try:
        make_writable_dir(root)
    except OSError as e:
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()
        raise UserError(f"{root}: the run directory cannot be written ({e.strerror}); choose another "
                        "-o/--output") from None
