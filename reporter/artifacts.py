"""Run-directory layout and crash-safe file writing.

Artifacts are the source of truth: every stage reads what the previous one wrote, a
rerun resumes from them, and results.json can always be rebuilt from them.

Layout of a run directory::

    manifest.json                      versions, device, seed, resolved config + hash
    results.json                       the machine-readable result (see README, "results.json")
    models/<slug>/model.json           metadata of the loaded model
    models/<slug>/smoke.json           perplexity smoke measurement
    models/<slug>/tasks/<task>/...     per-task artifacts (samples.jsonl, summary.json, …)
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temporary file + rename): a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=_default)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _default(o: Any):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return default


class RunDir:
    """Paths inside one run directory."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def results(self) -> Path:
        return self.root / "results.json"

    def model_dir(self, slug: str) -> Path:
        return self.root / "models" / slug

    def task_dir(self, slug: str, task: str) -> Path:
        return self.model_dir(slug) / "tasks" / task
