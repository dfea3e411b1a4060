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
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from ..analyse import fresh_results, write_analysis
from ..collect.failures import log
from ..config import Profile, RunConfig, check_sae
from ..errors import UserError
from ..installed import make_writable_dir
from ..store.atomic import read_json, write_json
from ..store.layout import (
    CARD_FILES,
    CARD_HTML,
    CARD_MD,
    CARD_PDF,
    HF_DIR,
    MODEL_INDEX_DIR,
    RESULTS,
    RunDir,
    legacy_slug,
    slugify,
)
from ..store.lock import run_lock
from .data_check import check_user_data
from .executors import get_executor
from .manifest import (
    build_manifest,
    code_changes,
    collection_record,
    config_changes,
    model_work_record,
    plugin_change,
    resume_keys,
)
from .reuse import merged_keys, recorded_keys, shared_changes, take_what_holds


def default_output(cfg: RunConfig) -> Path:
    """``reports/<file stem>-<date>`` (``default-<date>`` for the embedded model list)."""
    stem = Path(cfg.path).stem if not cfg.path.startswith("<") else "default"
    return Path("reports") / f"{slugify(stem)}-{_dt.date.today().isoformat()}"


def run(cfg: RunConfig, output: str | Path | None = None, *, profile: Profile | None = None,
        force: bool = False, progress: bool = True, command: list[str] | None = None,
        executor: str | None = None, address: str | None = None,
        jobs: Any = None, began: Callable[[], None] | None = None,
        then: Callable[[], None] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Run every model of ``cfg``; return the results dict (also written to results.json) and the failures.

    A model or task that fails does not stop the others: its failure lines are returned (and
    recorded in results.json), everything else is saved, and a rerun resumes.

    ``executor`` ``local`` (default) runs the models one after another here; ``ray`` makes
    each model a Ray task (see :mod:`reporter.run.executors`); ``jobs`` is an executor of the caller's own
    (lm-eval's command line runs its one, already loaded model here). Then the analyse stage runs on
    the artifacts. A run directory holding a run of other shared settings (the seed, the run's device and dtype,
    the profile's settings but its task list), or one made by other reporter code (the manifest's
    ``code_version``), is refused unless ``force``: its artifacts would mix with this run's. Another list of models or
    tasks resumes: a model or task whose entry changed is measured again, one no longer listed keeps its artifacts
    off the card (:mod:`reporter.run.reuse`).
    ``began`` is called once this run's manifest is written and, with ``force``, the old models' artifacts are gone:
    from then on a rerun without ``force`` resumes this run, not the old one. ``then`` runs after the analysis, still
    under the run directory's lock (``reporter run`` draws its card there: no other run may write between).
    """
    profile = profile or Profile(name=None)
    rd = RunDir(output or cfg.output or default_output(cfg))
    run_jobs = jobs or get_executor(executor or cfg.executor, address or cfg.address)
    check_user_data(profile, cfg.models)
    check_sae(cfg, profile)
    if (connect := getattr(run_jobs, "connect", None)) is not None:  # a cluster: reachable before anything is written
        connect()
    create_run_dir(rd.root)
    if (recorded := sys.modules.get("reporter.collect.failures")) is not None:  # this run's failures only
        recorded.RECORDED.clear()
    with run_lock(rd.root):
        try:
            old = read_json(rd.manifest)
        except UserError as e:  # what made the run cannot be read, so nothing in it can be trusted to resume
            if not force:
                raise UserError(f"{e}; it records how the run was made, so nothing in {rd.root} can be resumed: "
                                "rerun with --force to make the run again there, or choose another -o") from None
            old = None
        manifest = build_manifest(cfg, profile, command)
        keys = resume_keys(manifest["resolved"], manifest.get("task_code"))
        old_keys = recorded_keys(old)
        takes_entries = old_keys is not None and old_keys["shared"] == keys["shared"]
        if old and old.get("config_hash") != manifest["config_hash"] and not takes_entries and not force:
            changed = (shared_changes if old_keys is not None else config_changes)(old.get("resolved"),
                                                                                   manifest["resolved"])
            raise UserError(f"{rd.root}: holds a run with a different configuration (config hash "
                            f"{old.get('config_hash')} vs {manifest['config_hash']}"
                            + (f"; changed: {'; '.join(changed)}" if changed else "")
                            + "); choose another -o/--output or pass --force")
        # plugin code may change only where the keys say which tasks to measure again (a run without whole keys: no)
        taken, why = plugin_change(old, manifest) if old and takes_entries else (None, None)
        if old and old.get("code_version") != manifest["code_version"] and not force and taken is not None:
            log(f"{rd.root}: resuming {taken}: they register only tasks, scorers or card sections, so only tasks "
                "that plugins define are measured again, where their code changed")
        elif old and old.get("code_version") != manifest["code_version"] and not force:
            made = (f"code {str(old['code_version'])[:12]}, this is {manifest['code_version'][:12]}"
                    + (f"; {what}" if (what := code_changes(old, manifest)) else "")
                    + (f"; not taken as plugins that only add tasks: {why}" if why else "")
                    if old.get("code_version") else "before runs recorded their code version")
            raise UserError(f"{rd.root}: holds a run made by another version of reporter's code or of its plugins' "
                            f"({made}); resuming "
                            "would mix its results with this version's: choose another -o/--output or pass --force "
                            "to recompute")
        if old and not force and old_keys is not None and takes_entries:  # another list of models or tasks
            take_what_holds(rd, old, old_keys, keys, cfg, profile, manifest["resolved"], manifest.get("task_code"))
        manifest = {**manifest, "resume_keys": merged_keys(old_keys if old and not force and takes_entries else None,
                                                           keys)}
        if old and not force and old.get("created"):  # a resume: the run keeps the time it was made (a board orders
            manifest = {**manifest, "created": old["created"], "updated": manifest["created"]}  # versions by it)
        write_json(rd.manifest, manifest)
        rd.sweep_temporaries()  # a killed process's half-written files (SIGKILL: no cleanup ran)
        if force:
            _clear_models(rd, cfg)
        if began is not None:
            began()
        failures = run_jobs(cfg, str(rd.root.resolve()), profile, force=force, progress=progress)
        listed = ([s.slug for s in cfg.models], [t.name for t in profile.tasks])
        write_json(rd.manifest, {**manifest, "collection": collection_record(rd, *listed),
                                 "model_work": model_work_record(rd, *listed)})
        write_analysis(rd.root, results=fresh_results(rd.root))  # one write: never a results.json without analysis
        res: dict[str, Any] = read_json(rd.results)
        if then is not None:
            then()
    if failures:
        saved = "the other models' results are" if len(cfg.models) > 1 else "the finished work is"
        failures = failures + [f"{rd.root}: {saved} saved; fix the above and rerun to resume"]
    return res, failures


def _clear_models(rd: RunDir, cfg: RunConfig) -> None:
    """``--force``: every model's artifacts go before any is recomputed. Cleared one model at a time as each was
    reached, an interrupted forced run left the others' old artifacts under the new manifest, and the next run
    took them as this configuration's. A directory that cannot be removed is left to its model's job, whose own
    attempt makes it that model's failure. The old results.json and cards go too: an interrupted forced run left
    them, and ``reporter render`` drew the old results again without a word; this run writes its own.
    """
    for spec in cfg.models:
        for slug in dict.fromkeys((spec.slug, legacy_slug(spec.name))):  # a run made before non-ASCII names' hash
            with contextlib.suppress(OSError):
                shutil.rmtree(rd.model_dir(slug))
    for name in (RESULTS, CARD_HTML, CARD_PDF, CARD_MD, CARD_FILES, HF_DIR, MODEL_INDEX_DIR):
        path = rd.root / name
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)


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
