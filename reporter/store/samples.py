"""``samples.jsonl``: one JSON line per answered item, appended batch by batch.

A kill can tear the last line; reading skips a line that is not valid JSON, so a rerun
recomputes that item.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "samples.jsonl"
>>> append_samples(p, [{"id": "a", "score": 1.0}]); p.open("a").write('{"id": "b", "sc')
15
>>> sorted(read_samples(p))
['a']
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable


def read_samples(path: Path) -> dict[str, dict[str, Any]]:
    """Finished samples by id (the first record of an id wins); a torn line is ignored."""
    out: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return out
    with open(path) as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            out.setdefault(rec["id"], rec)
    return out


def append_samples(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append records as JSON lines in one write, flushed and synced."""
    blob = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    with open(path, "a") as fh:
        fh.write(blob)
        fh.flush()
        os.fsync(fh.fileno())
