"""The pipeline: collect every model (through an executor), then analyse; the card is rendered by the CLI.

>>> from reporter.config import parse_config
>>> cfg = parse_config([{"name": "tiny", "source": "random:llama",
...                      "random": {"layers": 2, "hidden": 64, "intermediate": 128, "heads": 4}}])
>>> default_output(cfg).parent.as_posix()
'reports'
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from ..analyse import write_analysis, write_results
from ..config import Profile, RunConfig
from ..errors import UserError
from ..store.atomic import read_json, write_json
from ..store.layout import RunDir, slugify
from .executors import get_executor
from .manifest import build_manifest


def default_output(cfg: RunConfig) -> Path:
    """``reports/<file stem>-<date>`` (``default-<date>`` for the embedded model list)."""
    stem = Path(cfg.path).stem if not cfg.path.startswith("<") else "default"
    return Path("reports") / f"{slugify(stem)}-{_dt.date.today().isoformat()}"


def run(cfg: RunConfig, output: str | Path | None = None, *, profile: Profile | None = None,
        force: bool = False, progress: bool = True, command: list[str] | None = None,
        executor: str | None = None, address: str | None = None) -> dict[str, Any]:
    """Run every model of ``cfg`` and return the results dict (also written to results.json).

    ``executor`` ``local`` (default) runs the models one after another here; ``ray`` makes
    each model a Ray task (see :mod:`reporter.run.executors`). Then the analyse stage runs on
    the artifacts. A run directory holding a run of another configuration is refused unless
    ``force``.
    """
    profile = profile or Profile(name=None)
    rd = RunDir(output or cfg.output or default_output(cfg))
    rd.root.mkdir(parents=True, exist_ok=True)
    old = read_json(rd.manifest)
    manifest = build_manifest(cfg, profile, command)
    if old and old.get("config_hash") != manifest["config_hash"] and not force:
        raise UserError(f"{rd.root}: holds a run with a different configuration (config hash "
                        f"{old.get('config_hash')} vs {manifest['config_hash']}); choose another -o/--output or "
                        "pass --force")
    write_json(rd.manifest, manifest)
    run_jobs = get_executor(executor or cfg.executor, address or cfg.address)
    failures = run_jobs(cfg, str(rd.root.resolve()), profile, force=force, progress=progress)
    write_results(rd.root)
    write_analysis(rd.root)
    res: dict[str, Any] = read_json(rd.results)
    if failures:
        raise UserError(failures + [f"{rd.root}: the other models' results are saved; fix the above and rerun to "
                                    "resume"])
    return res
