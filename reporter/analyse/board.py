"""One leaderboard over many runs (``reporter board``): merge runs evaluated on the same items.

A run is one YAML and one card. A board reads many analysed run directories and merges every model
of every run that answered the same items:

- **Items.** Per task, each run's items are named by a content key: the sorted item ids with their
  gold answers, the task's data source and (lm-eval tasks) lm-eval's digest. The key most runs share
  is the board's; a run whose items differ is left out *on that task*, with the reason.
- **Rows.** A model is a row. The same model name in two runs with identical per-item outcomes on every
  merged task is one row (a note names both runs); with different outcomes, two rows, one per run.
- **Versions.** Rows of one ``release`` (the models YAML's ``release:``, default the model's name)
  are versions of one another, ordered by ``version:`` when every row has one, else by the run's
  creation time. Consecutive versions are compared with the paired tests of ``reporter compare``
  (:func:`reporter.analyse.compare.compare_runs`); a significant change is marked.
- **Statistics over all rows.** Rank intervals and tiers by the paired item bootstrap over the items
  every ranked row answered (:func:`reporter.analyse.leaderboard.leaderboard`); chance and untrained
  reference rows; the Utility Law fit and the law-adjusted ranking over every trained row
  (:func:`reporter.analyse.analysis.law_and_fairness`), so the law is available once three trained
  models exist across runs.
- **MUI** is compared only at equal settings and sample count: per task, the settings most rows share
  give the task's MUI column and the law's points; a row measured otherwise shows no MUI there, with the
  reason.

Damaged or foreign directories are warned about in one line each and left out. Everything read from a
run is keyed by the content of its results.json and samples files, so a rebuild after adding one run
reads and compares only what is new (:class:`BoardCache`).

>>> import shutil, tempfile, pathlib
>>> again = shutil.copytree(run_dir, pathlib.Path(tempfile.mkdtemp()) / "again")
>>> doc = build_board([run_dir, again], n_resamples=200)  # the same results twice: one row per model
>>> {len(r["runs"]) for r in doc["rows"]}
{2}
>>> sum("identical results" in n for n in doc["notes"]) == len(doc["rows"])
True
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import UserError
from ..schema import is_untrained
from ..store.atomic import read_json, write_json
from ..store.gate import open_run
from ..store.layout import CARD_HTML, CARD_MD, CARD_PDF, MODEL_INDEX_DIR, SAMPLES, RunDir, slugify
from ..store.samples import read_samples
from ..tasks import is_probe
from .analysis import law_and_fairness
from .leaderboard import leaderboard

__all__ = ["BOARD_VERSION", "BoardCache", "BoardRun", "build_board", "expand_runs", "load_runs", "natural_key",
           "ranking_tasks"]

BOARD_VERSION = 1
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
    """What a board read and compared before, by content: ``runs/<digest>.json`` and ``compare/<key>.json``.

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
        got = read_json(self.root / kind / f"{key}.json")
        (self.hits if got is not None else self.misses)[kind] += 1
        return got

    def put(self, kind: str, key: str, value: Any) -> None:
        """Store an entry; a cache that cannot be written is skipped."""
        if self.root is None:
            return
        try:
            write_json(self.root / kind / f"{key}.json", value)
        except (OSError, UserError):
            pass


def expand_runs(args: Iterable[str | Path]) -> list[Path]:
    """Run directories from the command line: paths or glob patterns (their directories), in order, each once.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "a").mkdir(); (d / "b").mkdir(); _ = (d / "a.yaml").write_text("")
    >>> [p.name for p in expand_runs([d / "*", d / "a"])]
    ['a', 'b']
    """
    out: list[Path] = []
    for a in args:
        text = str(a)
        # a pattern's matches that are files (a models YAML beside its run) are not runs; a named path is checked
        hits = sorted(h for h in glob.glob(text) if Path(h).is_dir()) if glob.has_magic(text) else [text]
        for h in hits:
            p = Path(h)
            if p.resolve() not in {q.resolve() for q in out}:
                out.append(p)
    return out


def natural_key(text: str) -> list[Any]:
    """Sort key that orders ``1.10`` after ``1.9`` and ``v2`` before ``v10``.

    >>> sorted(["1.10", "1.9", "1.2"], key=natural_key)
    ['1.2', '1.9', '1.10']
    """
    return [(0, int(t), "") if t.isdigit() else (1, 0, t.lower()) for t in re.findall(r"\d+|[^\d]+", text)]


def _digest(rd: RunDir, results: dict[str, Any]) -> str:
    """The content hash of everything a board reads from a run: results.json and every task's samples."""
    h = hashlib.sha256(rd.results.read_bytes())
    for name, e in sorted((results.get("models") or {}).items()):
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


def _read_run(path: Path, cache: BoardCache, taken: set[str]) -> BoardRun:
    view = open_run(path, "board", analysed=True)
    rd, results = view.rd, view.results or {}
    digest = f"{_digest(rd, results)}-v{BOARD_VERSION}"  # a new board format reads every run again
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
        verdicts[(str(v.get("model")), str(v.get("task")))] = str(v.get("severity"))
    models: dict[str, dict[str, Any]] = {}
    for name, e in (results.get("models") or {}).items():
        slug = e.get("slug", name)
        tasks: dict[str, Any] = {}
        for task, s in (e.get("tasks") or {}).items():
            samples = read_samples(rd.task_dir(slug, task) / SAMPLES)
            if not samples:
                continue
            keep = {k: s.get(k) for k in ("score", "ci_low", "ci_high", "n", "shots", "scorer", "chance", "mui",
                                          "mui_settings", "source", "description", "lm_eval_group") if k in s}
            if isinstance(s.get("lm_eval"), dict):
                keep["lm_eval"] = {k: s["lm_eval"].get(k) for k in ("task", "group", "metric", "digest", "version")}
                keep["lm_eval_group"] = s["lm_eval"].get("group") or s.get("lm_eval_group")
            keep["items_key"] = _items_key(s, samples)
            keep["mui_key"] = _mui_key(s)
            keep["items"] = {str(i): float(r["score"]) for i, r in samples.items()}
            keep["contamination"] = verdicts.get((name, task))
            tasks[task] = keep
        meta = e.get("meta") or {}
        models[name] = {"status": e.get("status"), "source": e.get("source"), "slug": slug,
                        "untrained": is_untrained(e), "lpp": {k: (e.get("lpp") or {}).get(k) for k in LPP_KEYS}
                        if isinstance(e.get("lpp"), dict) else None,
                        "meta": {k: meta.get(k) for k in ("n_params", "model_type", "kind", "dtype", "source_type")},
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


def _merged_tasks(e: dict[str, Any], chosen: dict[str, str]) -> dict[str, Any]:
    """The tasks of a run's model entry that the board merges (evaluated on the board's items)."""
    return {t: s for t, s in e["tasks"].items() if s["items_key"] == chosen.get(t)}


def _row_names(runs: list[BoardRun], chosen: dict[str, str]) -> dict[tuple[str, str], str]:
    """(run label, model) -> the row it becomes: identical results on the merged tasks in several runs are one
    row; a model with no merged task becomes none.
    """
    by_name: dict[str, list[tuple[BoardRun, str]]] = {}
    for r in runs:
        for m, e in r.models.items():
            if e.get("status") != "failed" and _merged_tasks(e, chosen):
                by_name.setdefault(m, []).append((r, m))
    rows: dict[tuple[str, str], str] = {}
    for name, members in by_name.items():
        distinct: list[tuple[str, list[tuple[BoardRun, str]]]] = []
        for r, m in members:
            fp = json.dumps({t: (s["items_key"], s["items"])
                             for t, s in sorted(_merged_tasks(r.models[m], chosen).items())},
                            sort_keys=True) + str(r.models[m].get("source"))
            for key, group in distinct:
                if key == fp:
                    group.append((r, m))
                    break
            else:
                distinct.append((fp, [(r, m)]))
        seen: set[str] = set()
        for _, group in distinct:
            r0, m0 = group[0]
            version = r0.models[m0].get("version")
            label = name if len(distinct) == 1 else f"{name} ({version or r0.label})"
            if label in seen:  # two result sets under one version label: the run tells them apart
                label = f"{name} ({version}, {r0.label})"
            seen.add(label)
            for r, m in group:
                rows[(r.label, m)] = label
    return rows


def build_board(paths: Sequence[str | Path], *, seed: int = 0, n_resamples: int = 2000,
                cache: BoardCache | None = None, title: str | None = None,
                exclude: Sequence[str | Path] = ()) -> dict[str, Any]:
    """The board document (``board.json``) over the run directories ``paths`` (globs allowed); see the module doc.

    Raises :class:`~reporter.errors.UserError` when no run is usable.
    """
    t0 = time.perf_counter()
    cache = cache or BoardCache(None)
    runs, warnings = load_runs(paths, cache, exclude)
    if not runs:
        raise UserError("no run directory could be read" + (f" ({'; '.join(warnings)})" if warnings else
                        "; give the output directories of `reporter run` (globs allowed)"))
    runs.sort(key=lambda r: (r.created, r.label))
    # the items each task is evaluated on: the key most runs share, then most models, then most items (then the
    # earliest run's)
    task_keys: dict[str, dict[str, list[str]]] = {}
    weight: dict[tuple[str, str], list[int]] = {}
    for r in runs:
        for m, e in r.models.items():
            for t, s in e["tasks"].items():
                lst = task_keys.setdefault(t, {}).setdefault(s["items_key"], [])
                if r.label not in lst:
                    lst.append(r.label)
                w = weight.setdefault((t, s["items_key"]), [0, len(s["items"])])
                w[0] += 1
    chosen = {t: max(keys, key=lambda k: (len(keys[k]), *weight[(t, k)])) for t, keys in task_keys.items()}
    row_of = _row_names(runs, chosen)
    left_out: list[dict[str, Any]] = []
    for t, keys in sorted(task_keys.items()):
        for k, labels in keys.items():
            if k != chosen[t]:
                ns = sorted({len(r.models[m]["tasks"][t]["items"]) for r in runs if r.label in labels
                             for m in r.models if t in r.models[m]["tasks"]})
                n_board = next(len(r.models[m]["tasks"][t]["items"]) for r in runs
                               for m in r.models if t in r.models[m]["tasks"]
                               and r.models[m]["tasks"][t]["items_key"] == chosen[t])
                for lab in labels:
                    left_out.append({"run": lab, "task": t,
                                     "reason": f"evaluated {t} on other items ({'/'.join(map(str, ns))} items, not "
                                               f"the {n_board} items of {', '.join(keys[chosen[t]])}): not merged on "
                                               "this task"})
    # MUI: per task, the settings most rows share
    mui_counts: dict[str, dict[str, int]] = {}
    for r in runs:
        for m, e in r.models.items():
            for t, s in e["tasks"].items():
                if s["items_key"] == chosen[t] and s.get("mui_key") and not e["untrained"]:
                    mui_counts.setdefault(t, {}).setdefault(s["mui_key"], 0)
                    mui_counts[t][s["mui_key"]] += 1
    mui_chosen = {t: max(sorted(c), key=lambda k: c[k]) for t, c in mui_counts.items()}
    merged: dict[str, dict[str, Any]] = {}
    per_item: dict[str, dict[str, dict[str, float]]] = {}
    rows: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for r in runs:
        for m, e in r.models.items():
            if e.get("status") == "failed":
                left_out.append({"run": r.label, "task": None, "model": m, "reason": "failed to evaluate in this run"})
                continue
            if (r.label, m) not in row_of:
                left_out.append({"run": r.label, "task": None, "model": m,
                                 "reason": "none of its tasks is merged (see the tasks above): no row"})
                continue
            row = row_of[(r.label, m)]
            if row in rows:
                rows[row]["runs"].append(r.label)
                continue
            tasks: dict[str, Any] = {}
            for t, s in e["tasks"].items():
                if s["items_key"] != chosen[t]:
                    continue
                summary = {k: v for k, v in s.items() if k not in ("items", "items_key", "mui_key")}
                if s.get("mui_key") and s["mui_key"] != mui_chosen.get(t):
                    summary["mui_not_comparable"] = ("MUI measured with other settings or on another number of "
                                                     f"items ({_settings_text(s.get('mui_settings'))}) than the "
                                                     f"board's ({_settings_text(json.loads(mui_chosen[t]))})"
                                                     if t in mui_chosen else "untrained reference")
                    summary.pop("mui", None)
                tasks[t] = summary
                per_item.setdefault(row, {})[t] = s["items"]
            merged[row] = {"status": e.get("status"), "source": e.get("source"),
                           "meta": {**e["meta"], "source_type": e["meta"].get("source_type")}, "tasks": tasks}
            rows[row] = {"model": row, "name": m, "release": e.get("release") or m, "version": e.get("version"),
                         "runs": [r.label], "run": r.label, "run_dir": r.dir, "created": r.created,
                         "slug": slugify(row), "model_slug": e["slug"], "untrained": e["untrained"],
                         "source": e.get("source"), "n_params": e["meta"].get("n_params"), "lpp": e.get("lpp"),
                         "files": e["files"], "tasks": tasks}
    slugs: set[str] = set()
    for entry in rows.values():
        stem, extra = entry["slug"], 2
        while entry["slug"] in slugs:  # two rows whose names slugify alike ("a b", "a-b") get two pages
            entry["slug"], extra = f"{stem}-{extra}", extra + 1
        slugs.add(entry["slug"])
        if len(entry["runs"]) > 1:
            notes.append(f"{entry['model']}: evaluated in {len(entry['runs'])} runs ({', '.join(entry['runs'])}) "
                         "with identical results: one row")
    for name in sorted({entry["name"] for entry in rows.values()}):
        same = [entry for entry in rows.values() if entry["name"] == name]
        if len(same) > 1:
            notes.append(f"{name}: evaluated in {len(same)} runs with different results: one row per run "
                         f"({', '.join(entry['model'] for entry in same)})")
    benchmarks = sorted({t for row in rows.values() for t in row["tasks"] if not is_probe(t)})
    rank_tasks = ranking_tasks([set(row["tasks"]) for row in rows.values() if not row["untrained"]], benchmarks)
    if rank_tasks != benchmarks:
        notes.append(f"the ranking uses {', '.join(rank_tasks) or 'no task'}, the tasks every ranked model "
                     f"answered; {', '.join(t for t in benchmarks if t not in rank_tasks)} "
                     "are shown but not ranked (not every model answered them)")
    ranked_like = {"models": {m: {**e, "tasks": {t: s for t, s in e["tasks"].items() if t in rank_tasks}}
                              for m, e in merged.items()}}
    board = leaderboard(ranked_like, per_item, seed=seed, n_resamples=n_resamples)
    for x in board.get("not_ranked") or []:  # on a board, a missing task means: not evaluated on the board's items
        x["reason"] = x["reason"].replace("did not finish ", "no result on the board's items of ")
    # the law over the rows that have the ranked tasks (per-model averages need the same tasks for every model)
    with_all = {m: e for m, e in ranked_like["models"].items() if all(t in e["tasks"] for t in rank_tasks)}
    law = law_and_fairness({"models": with_all}, per_item, seed=seed, n_resamples=n_resamples)
    if len(with_all) < len(merged):
        left = sorted(m for m in merged if m not in with_all and not rows[m]["untrained"])
        if left:
            notes.append(f"the Utility Law and the law-adjusted ranking leave out {', '.join(left)}: no result on "
                         f"every ranked task ({', '.join(rank_tasks)})")
    mui_columns = {t: json.loads(k) for t, k in mui_chosen.items() if t in benchmarks}
    groups: dict[str, list[str]] = {}
    for t in benchmarks:
        g = next((row["tasks"][t].get("lm_eval_group") for row in rows.values() if t in row["tasks"]
                  and row["tasks"][t].get("lm_eval_group")), None)
        groups.setdefault(str(g or "reporter"), []).append(t)
    doc: dict[str, Any] = {
        "version": BOARD_VERSION, "title": title or "Model leaderboard", "seed": seed, "n_resamples": n_resamples,
        "runs": [{"label": r.label, "dir": r.dir, "created": r.created, "digest": r.digest,
                  "models": sorted(r.models)} for r in runs],
        "warnings": warnings, "left_out": left_out, "tasks": benchmarks, "probes": sorted(
            {t for row in rows.values() for t in row["tasks"] if is_probe(t)}),
        "groups": groups, "ranking_tasks": rank_tasks, "mui_settings": mui_columns, "rows": [rows[k] for k in sorted(rows)],
        "leaderboard": board, "law": law.law, "fairness": law.fairness, "notes": notes + law.notes,
        "history": _history(rows, runs, cache),
    }
    doc["seconds"] = round(time.perf_counter() - t0, 3)
    doc["cache"] = {"runs_read": cache.misses["runs"], "runs_cached": cache.hits["runs"],
                    "compared": cache.misses["compare"], "comparisons_cached": cache.hits["compare"]}
    return doc


def ranking_tasks(task_sets: Sequence[set[str]], benchmarks: Sequence[str]) -> list[str]:
    """The tasks a merged ranking uses: those every trained row answered; when no task is shared by all, the tasks
    shared by the rows of the most-answered task (the other rows are then not ranked, saying which task they lack).

    >>> ranking_tasks([{"a", "b"}, {"a", "b", "c"}], ["a", "b", "c"])
    ['a', 'b']
    >>> ranking_tasks([{"a"}, {"b"}, {"b", "c"}], ["a", "b", "c"])
    ['b']
    """
    shared = [t for t in benchmarks if all(t in ts for ts in task_sets)]
    if shared or not task_sets or not benchmarks:
        return shared
    top = max(benchmarks, key=lambda t: (sum(t in ts for ts in task_sets), -list(benchmarks).index(t)))
    having = [ts for ts in task_sets if top in ts]
    return [t for t in benchmarks if all(t in ts for ts in having)]


def _settings_text(s: Any) -> str:
    if not isinstance(s, dict):
        return "none recorded"
    return ", ".join(f"{k} {s.get(k)}" for k in MUI_KEYS if s.get(k) is not None)


def _history(rows: dict[str, dict[str, Any]], runs: list[BoardRun], cache: BoardCache) -> list[dict[str, Any]]:
    """Per release with two or more rows: its versions in order, and the paired tests between consecutive ones."""
    from .compare import compare_runs

    by_release: dict[str, list[dict[str, Any]]] = {}
    for row in rows.values():
        if not row["untrained"]:
            by_release.setdefault(row["release"], []).append(row)
    digest = {r.label: r.digest for r in runs}
    out = []
    for release, members in sorted(by_release.items()):
        if len(members) < 2:
            continue
        if all(m.get("version") for m in members):
            members.sort(key=lambda m: natural_key(str(m["version"])))
            order = "by version"
        else:
            members.sort(key=lambda m: (m["created"], m["run"]))
            order = "by run date (not every version has a version: label)"
        steps = []
        for a, b in zip(members, members[1:]):
            key = hashlib.sha256(json.dumps([digest[a["run"]], digest[b["run"]], a["name"], b["name"], BOARD_VERSION])
                                 .encode()).hexdigest()[:20]
            got = cache.get("compare", key)
            if got is None:
                got = _compare(compare_runs, a, b)
                cache.put("compare", key, got)
            steps.append({"from": a["model"], "to": b["model"], **got})
        out.append({"release": release, "slug": slugify(release), "order": order,
                    "versions": [{"model": m["model"], "version": m.get("version") or m["run"], "run": m["run"],
                                  "created": m["created"],
                                  "tasks": {t: {k: s.get(k) for k in ("score", "ci_low", "ci_high", "n", "mui")}
                                            for t, s in m["tasks"].items() if not is_probe(t)},
                                  "lpp": m.get("lpp")} for m in members],
                    "steps": steps})
    return out


def _compare(compare_runs: Any, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The paired tests of ``reporter compare`` between two versions, per task (MUI compared where it can be)."""
    doc = None
    why = None
    for kw in ({}, {"mui": False}, {"mui": False, "shared_only": True}):
        try:
            doc = compare_runs(a["run_dir"], b["run_dir"], pairs=[(a["name"], b["name"])], **kw)
            break
        except UserError as e:
            why = e.lines[0] if e.lines else str(e)
    if doc is None:
        return {"compared": False, "reason": why, "rows": []}
    keep = ("task", "status", "significant", "delta", "ci_low", "ci_high", "p_holm", "n", "n_regressed", "n_improved",
            "base_score", "new_score")
    return {"compared": True, "reason": None, "family": doc.get("family"),
            "rows": [{k: r.get(k) for k in keep} | {"mui": r.get("mui")} for r in doc["rows"] if not is_probe(r["task"])]}
