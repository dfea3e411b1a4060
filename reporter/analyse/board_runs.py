"""Reading run directories for a board (:mod:`reporter.analyse.board`): each through the shared gate, into what the
board needs, keyed by the content of its results.json and samples (:class:`BoardCache`).

>>> import tempfile, pathlib
>>> runs, warnings = load_runs([pathlib.Path(tempfile.mkdtemp()) / "nope"])
>>> runs, warnings[0].endswith("no such run directory; board reads the output directory of `reporter run`")
([], True)
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import UserError
from ..installed import reporter_digest
from ..schema import is_untrained
from ..store.atomic import read_json, write_json
from ..store.gate import open_run
from ..store.layout import CARD_HTML, CARD_MD, CARD_PDF, MODEL_INDEX_DIR, SAMPLES, RunDir, slugify
from ..store.samples import check_score, holds_task, read_samples
from .task_weights import aggregated_groups

__all__ = ["BOARD_VERSION", "LPP_KEYS", "MUI_KEYS", "BoardCache", "BoardRun", "contamination_state", "expand_runs",
           "load_runs"]

BOARD_VERSION = 9  # 9: a group weighs its tasks by the flag of the metric they report (weighs_by_size)
#: the LPP numbers a history page follows over versions
LPP_KEYS = ("entropy_floor", "participation_ratio", "effective_rank")
#: what identifies MUI settings: a MUI value compares only with one measured the same way on as many items
MUI_KEYS = ("definition", "mode", "unit", "top_ratio", "rho", "n_samples")


@dataclass
class BoardRun:
    """One run directory that passed the gate, read into what a board needs (JSON-ready, cached by ``digest``)."""

    dir: str
    label: str
    digest: str
    created: str
    seed: int
    models: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The run as stored in the board's cache."""
        return {"dir": self.dir, "label": self.label, "digest": self.digest, "created": self.created,
                "seed": self.seed, "models": self.models}


class BoardCache:
    """What a board read and compared before, by content: ``runs/<digest>.json`` and ``compare/<key>.json``, each
    key with reporter's code (:func:`~reporter.installed.reporter_digest`): a reporter that reads or compares
    differently reads and compares again.

    A missing, unreadable or unwritable cache only means reading again.
    """

    def __init__(self, root: Path | None):
        self.root = root
        self.hits = {"runs": 0, "compare": 0}
        self.misses = {"runs": 0, "compare": 0}

    def get(self, kind: str, key: str) -> Any:
        """The stored ``kind`` (``runs`` or ``compare``) entry ``key``, or None (counted as a miss)."""
        if self.root is None:
            self.misses[kind] += 1
            return None
        try:
            got = read_json(self.root / kind / f"{key}-{reporter_digest()[:12]}.json")
        except (OSError, UserError):  # damaged or unreadable: read the run again (and store it again)
            got = None
        (self.hits if got is not None else self.misses)[kind] += 1
        return got

    def put(self, kind: str, key: str, value: Any) -> None:
        """Store an entry; a cache that cannot be written is skipped."""
        if self.root is None:
            return
        try:
            write_json(self.root / kind / f"{key}-{reporter_digest()[:12]}.json", value)
        except (OSError, UserError):
            pass


def expand_runs(args: Iterable[str | Path]) -> list[Path]:
    """Run directories from the command line: paths or glob patterns (their directories), in order, each once.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "a").mkdir(); (d / "b").mkdir(); _ = (d / "a.yaml").write_text("")
    >>> [p.name for p in expand_runs([d / "*", d / "a"])]
    ['a', 'b']
    >>> [p.name for p in expand_runs(sorted(d.iterdir()))]  # an unquoted `d/*`, expanded by the shell
    ['a', 'b']
    >>> _ = (d / "b" / "results.json").write_text("{}"); [p.name for p in expand_runs([d / "b" / "results.json"])]
    ['b']
    >>> [p.name for p in expand_runs([d / "*" / "results.json"])]  # a quoted pattern of runs' results
    ['b']
    """
    out: list[Path] = []
    for a in args:
        text = str(a)
        # a pattern's matches that are files are not runs; nor are the YAML files among named paths (the models YAML
        # beside its run, which the shell names when it expands an unquoted `reports/*`); a run's results.json or
        # manifest.json stands for its directory; any other named path is checked (a file is then a warning)
        path = Path(text)
        run_file = ("results.json", "manifest.json")
        hits = (sorted(h if Path(h).is_dir() else str(Path(h).parent) for h in glob.glob(text)
                       if Path(h).is_dir() or Path(h).name in run_file) if glob.has_magic(text)
                else [] if path.is_file() and path.suffix in (".yaml", ".yml")
                else [str(path.parent)] if path.is_file() and path.name in run_file
                else [text])
        for h in hits:
            p = Path(h)
            if p.resolve() not in {q.resolve() for q in out}:
                out.append(p)
    return out


def _digest(rd: RunDir, results: dict[str, Any], manifest: dict[str, Any]) -> str:
    """The content hash of everything a board reads from a run: results.json, every task's samples, the models'
    ``release`` and ``version`` labels (the manifest's: a label added later changes no result) and the card files
    the run holds, by size and modification time (a card rendered later is linked, one rendered again is copied
    again).
    """
    h = hashlib.sha256(rd.results.read_bytes())
    models = results.get("models") or {}
    files = {n: _files(rd, e.get("slug", n)) for n, e in sorted(models.items())}
    stats = {}
    for rel in sorted({f for fs in files.values() for f in fs.values()}):
        with contextlib.suppress(OSError):
            st = (rd.root / rel).stat()
            stats[rel] = (st.st_size, st.st_mtime_ns)
    h.update(json.dumps([_labels(manifest), files, stats], sort_keys=True, default=str).encode())
    for name, e in sorted(models.items()):
        for task in sorted(e.get("tasks") or {}):
            path = rd.task_dir(e.get("slug", name), task) / SAMPLES
            h.update(f"\0{name}\0{task}\0".encode())
            if path.is_file():
                h.update(path.read_bytes())
    return h.hexdigest()[:20]


def _items_key(summary: dict[str, Any], samples: dict[str, dict[str, Any]]) -> str:
    """A task's items by content: ids with their gold answers, the data source, lm-eval's digest."""
    lm = summary.get("lm_eval") or {}
    blob = json.dumps({"items": sorted((str(i), str(r.get("gold"))) for i, r in samples.items()),
                       "source": summary.get("source"), "lm_eval": lm.get("digest"), "task": summary.get("task")},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _mui_key(summary: dict[str, Any]) -> str | None:
    s = summary.get("mui_settings")
    if not isinstance(summary.get("mui"), (int, float)) or not isinstance(s, dict):
        return None
    return json.dumps({k: s.get(k) for k in MUI_KEYS}, sort_keys=True)


def _labels(manifest: dict[str, Any]) -> dict[str, dict[str, str | None]]:
    models = ((manifest.get("resolved") or {}).get("config") or {}).get("models") or []
    return {str(m.get("name")): {"release": m.get("release"), "version": m.get("version")}
            for m in models if isinstance(m, dict)}


def _files(rd: RunDir, slug: str) -> dict[str, str]:
    """The run's card files and this model's model-index, where they exist (paths relative to the run)."""
    out = {k: n for k, n in (("html", CARD_HTML), ("pdf", CARD_PDF), ("md", CARD_MD)) if (rd.root / n).is_file()}
    mi = Path(MODEL_INDEX_DIR) / f"{slugify(slug)}.yaml"
    if (rd.root / mi).is_file():
        out["model_index"] = str(mi)
    return out


def contamination_state(row: dict[str, Any]) -> str:
    """A contamination row as the board shows it: its severity where a test could fire; else "too small to fire"
    where a test ran but could not reach significance at its size, "not measured" where none ran (never "none",
    which says the tests that could fire stayed quiet); the run's card draws the same line.

    >>> contamination_state({"severity": "none", "measured": True})
    'none'
    >>> contamination_state({"severity": "none", "measured": False, "signals": {
    ...     "verbatim": {"measured": True, "in_correction": False}, "option_order": {"measured": False}}})
    'too small to fire'
    >>> contamination_state({"severity": "none", "measured": False, "signals": {"option_order": {"measured": False}}})
    'not measured'
    """
    if row.get("measured", True):
        return str(row.get("severity"))
    ran = [s for s in (row.get("signals") or {}).values() if isinstance(s, dict) and s.get("measured")
           and s.get("test", True) is not False]
    return "too small to fire" if any(s.get("in_correction") is False for s in ran) else "not measured"


def _read_run(path: Path, cache: BoardCache, taken: set[str]) -> BoardRun:
    view = open_run(path, "board", analysed=True, scores=False)  # checked below, where a run's items are read anyway
    rd, results = view.rd, view.results or {}
    # a new board format reads every run again
    digest = f"{_digest(rd, results, view.manifest or {})}-v{BOARD_VERSION}"
    label = Path(os.path.abspath(path)).name  # a symlink keeps its own name
    n = 2
    while label in taken:
        label, n = f"{Path(os.path.abspath(path)).name}-{n}", n + 1
    taken.add(label)
    got = cache.get("runs", digest)
    if isinstance(got, dict) and got.get("digest") == digest:
        return BoardRun(**{**got, "dir": str(path), "label": label})
    run = results.get("run") or {}
    labels = _labels(view.manifest)
    verdicts: dict[tuple[str, str], str] = {}
    for v in (results.get("analysis") or {}).get("contamination") or []:
        verdicts[(str(v.get("model")), str(v.get("task")))] = contamination_state(v)
    models: dict[str, dict[str, Any]] = {}
    for name, e in (results.get("models") or {}).items():
        slug = e.get("slug", name)
        tasks: dict[str, Any] = {}
        placed = aggregated_groups(e)
        for task, s in (e.get("tasks") or {}).items():
            samples = read_samples(rd.task_dir(slug, task) / SAMPLES)
            if not samples or not holds_task(len(samples), s.get("n")):
                continue  # none, or a file cut after its task finished: not the task's items
            keep = {k: s.get(k) for k in ("score", "ci_low", "ci_high", "n", "shots", "scorer", "chance", "majority",
                                          "mui", "mui_settings", "source", "description", "lm_eval_group",
                                          "task_sha256") if k in s}
            if isinstance(s.get("lm_eval"), dict):
                keep["lm_eval"] = {k: s["lm_eval"].get(k) for k in ("task", "group", "metric", "digest", "version")}
                keep["lm_eval_group"] = s["lm_eval"].get("group") or s.get("lm_eval_group")
                # the group lm-eval aggregated the task in, and how it weighs its tasks (its model's lm_eval_groups):
                # what a mean over tasks counts as one task
                unit = placed.get(task)
                keep["lm_eval_unit"] = str(unit) if unit is not None else None
                if unit is not None:  # None: the run did not record it (lm-eval's default, by items, is assumed)
                    keep["lm_eval_group_by_size"] = unit.by_size if unit.recorded else None
            keep["items_key"] = _items_key(s, samples)
            keep["mui_key"] = _mui_key(s)
            keep["items"] = {str(i): float(r["score"]) for i, r in samples.items()}
            keep["digests"] = {str(i): r["item_sha256"] for i, r in samples.items()  # absent before runs kept them
                               if isinstance(r.get("item_sha256"), str)}
            check_score(f"{rd.results}: models.{name}.tasks.{task}", s, keep["items"],  # results.json edited by hand
                        f"`reporter analyse {rd.root}` rebuilds results.json from the task files")
            keep["contamination"] = verdicts.get((name, task))
            tasks[task] = keep
        meta = e.get("meta") or {}
        models[name] = {"status": e.get("status"), "source": e.get("source"), "slug": slug,
                        "untrained": is_untrained(e), "lpp": {k: (e.get("lpp") or {}).get(k) for k in LPP_KEYS}
                        if isinstance(e.get("lpp"), dict) else None,
                        "meta": {k: meta.get(k) for k in ("n_params", "model_type", "kind", "dtype", "source_type",
                                                          "identity", "first_measured")},
                        **labels.get(name, {"release": None, "version": None}),
                        "files": _files(rd, slug), "tasks": tasks}
    out = BoardRun(dir=str(path), label=label, digest=digest, created=str(run.get("created") or ""),
                   seed=int(run.get("seed") or 0), models=models)
    cache.put("runs", digest, {**out.to_json(), "label": label})
    return out


def load_runs(paths: Sequence[str | Path], cache: BoardCache | None = None,
              exclude: Sequence[str | Path] = ()) -> tuple[list[BoardRun], list[str]]:
    """Read every run directory; ``(runs, warnings)``: a damaged or foreign directory is one warning line.

    ``exclude``: directories that a glob may match but that are not runs (the board's own output).
    """
    cache = cache or BoardCache(None)
    runs: list[BoardRun] = []
    warnings: list[str] = []
    taken: set[str] = set()
    skip = {Path(x).resolve() for x in exclude}
    for p in expand_runs(paths):
        if Path(p).resolve() in skip:
            continue
        try:
            runs.append(_read_run(Path(p), cache, taken))
        except (UserError, OSError, ValueError, KeyError, TypeError) as e:
            first = (e.lines[0] if isinstance(e, UserError) and e.lines else str(e)).splitlines()[0]
            warnings.append(f"{p}: left out: {first}")
    return runs, warnings
