"""One leaderboard over many runs (``reporter board``): merge runs evaluated on the same items.

A run is one YAML and one card. A board reads many analysed run directories and merges every model
of every run that answered the same items:

- **Items.** Per task, each run's items are named by a content key: the sorted item ids with their
  gold answers, the task's data source and (lm-eval tasks) lm-eval's digest. The key most runs share
  is the board's; a run whose items differ is left out *on that task*, with the reason.
- **Rows.** A model is a row. The same model name in two runs with identical per-item outcomes on every
  merged task, prompted and scored alike (the same ``task_sha256`` and shots where both runs recorded them), is one
  row (a note names both runs); otherwise two rows, one per run.
- **Versions.** Rows of one ``release`` (the models YAML's ``release:``, default the model's name)
  are versions of one another, ordered by ``version:`` when every row has one, else by the run's
  creation time. Consecutive versions are compared with the paired tests of ``reporter compare``
  (:func:`reporter.analyse.compare.compare_runs`); a significant change is marked.
- **Statistics over all rows.** Rank intervals and tiers by the paired item bootstrap over the items
  every ranked row answered (:func:`reporter.analyse.leaderboard.leaderboard`); chance and untrained
  reference rows; the Utility Law fit and the law-adjusted ranking over every trained row
  (:func:`reporter.analyse.law_points.law_and_fairness`), so the law is available once three trained
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

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from ..errors import UserError
from ..store.layout import slugify
from ..tasks import is_probe
from .board_history import histories, natural_key
from .board_runs import BOARD_VERSION, MUI_KEYS, BoardCache, BoardRun, expand_runs, load_runs
from .law_points import law_and_fairness
from .leaderboard import constant_answer_caution, leaderboard, not_above_constant
from .task_weights import groups_of

__all__ = ["BOARD_VERSION", "BoardCache", "BoardRun", "build_board", "expand_runs", "load_runs", "natural_key",
           "ranking_tasks"]


def _merged_tasks(e: dict[str, Any], chosen: dict[str, str]) -> dict[str, Any]:
    """The tasks of a run's model entry that the board merges (evaluated on the board's items)."""
    return {t: s for t, s in e["tasks"].items() if s["items_key"] == chosen.get(t)}


def _same_settings(a: dict[str, Any], b: dict[str, Any], chosen: dict[str, str]) -> bool:
    """Whether two entries of a model were prompted and scored alike on every merged task they share: no task whose
    ``task_sha256`` (reporter's tasks) or shot count both recorded and that differs (a run made before one was
    recorded is not compared on it; an lm-eval task's digest is part of its items key).

    >>> e = lambda digest: {"tasks": {"arc": {"items_key": "k", "task_sha256": digest}}}
    >>> _same_settings(e("sha256:1"), e("sha256:1"), {"arc": "k"})
    True
    >>> _same_settings(e("sha256:1"), e("sha256:2"), {"arc": "k"})
    False
    >>> _same_settings(e("sha256:1"), e(None), {"arc": "k"})
    True
    >>> shots = lambda n: {"tasks": {"arc": {"items_key": "k", "shots": n}}}
    >>> _same_settings(shots(0), shots(5), {"arc": "k"}), _same_settings(shots(5), shots(5), {"arc": "k"})
    (False, True)
    """
    ta, tb = _merged_tasks(a, chosen), _merged_tasks(b, chosen)

    def settings(s: dict[str, Any]) -> tuple[Any, ...]:  # (lm-eval's digest is in the items key already)
        return (s.get("task_sha256"), s.get("shots"))

    return not any(x is not None and y is not None and x != y for t in ta.keys() & tb.keys()
                   for x, y in zip(settings(ta[t]), settings(tb[t])))


def _settle_units(rows: dict[str, dict[str, Any]], tasks: list[str]) -> None:
    """One lm-eval group (``lm_eval_unit``) and one weighting (``lm_eval_group_by_size``) per task, written into
    every row's copy of the task: the ranking, the law (over some of the rows) and the page's Mean column see the
    rows in other orders and subsets, and each took the first row's. Rows are read in name order; a task some run
    ran inside a group lm-eval aggregated is in that group for every row (:func:`groups_of`).

    >>> rows = {"b": {"tasks": {"anatomy": {"lm_eval_unit": None}}},
    ...         "a": {"tasks": {"anatomy": {"lm_eval_unit": "mmlu", "lm_eval_group_by_size": False}}}}
    >>> _settle_units(rows, ["anatomy"]); rows["b"]["tasks"]["anatomy"]
    {'lm_eval_unit': 'mmlu', 'lm_eval_group_by_size': False}
    """
    placed = groups_of({name: rows[name] for name in sorted(rows)}, tasks)
    for row in rows.values():
        for t in tasks:
            if (s := row["tasks"].get(t)) is not None:
                g = placed.get(t)
                s["lm_eval_unit"] = str(g) if g is not None else None
                s["lm_eval_group_by_size"] = (g.by_size if g.recorded else None) if g is not None else None


def _row_names(runs: list[BoardRun], chosen: dict[str, str]) -> dict[tuple[str, str], str]:
    """(run label, model) -> the row it becomes: identical results on the merged tasks in several runs are one
    row, unless a task was prompted or scored otherwise in them (their ``task_sha256`` or shots differ: two
    measurements that happen to agree, not one); a model with no merged task becomes none.
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
                if key == fp and _same_settings(r.models[m], group[0][0].models[group[0][1]], chosen):
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


def _reworded(runs: Sequence[BoardRun], chosen: dict[str, str]) -> list[dict[str, Any]]:
    """Runs on a task's chosen items (the same ids and gold answers) whose items' content differs: the same id under
    another question or other options (the task's data reworded). Where runs recorded each item's digest, the
    digests most model entries give, as one set (the earliest run's on a tie), are the board's; a run whose
    entry gives another for any item is left out on that task (its entries' items key is changed, so nothing
    merges them), and the reason is returned. A vote per item could leave out every run (three runs each
    reworded on another item).
    """
    out: list[dict[str, Any]] = []
    for t, key in chosen.items():
        members = [(r, e["tasks"][t]) for r in runs for e in r.models.values()
                   if t in e["tasks"] and e["tasks"][t]["items_key"] == key]
        votes = Counter(json.dumps(s["digests"], sort_keys=True) for _, s in members if s.get("digests"))
        if not votes:  # runs made before samples recorded digests
            continue
        board: dict[str, str] = json.loads(max(votes, key=lambda v: votes[v]))  # first seen wins a tie: runs by time
        for r, s in members:
            other = sorted(i for i, d in (s.get("digests") or {}).items() if board.get(i, d) != d)
            if not other:
                continue
            s["items_key"] = f"{key}:reworded"
            if not any(x["run"] == r.label and x["task"] == t for x in out):
                out.append({"run": r.label, "task": t,
                            "reason": f"evaluated {t} on {len(other)} item(s) whose question or options are not the "
                                      f"other runs' under the same id and gold answer (e.g. {other[0][:40]!r}; the "
                                      "task's data changed): not merged on this task"})
    return out


def _prompted_otherwise(benchmarks: list[str], merged: dict[str, dict[str, Any]],
                        rows: dict[str, dict[str, Any]]) -> list[str]:
    """A note per task whose trained rows were prompted or scored otherwise on the same items: their ``task_sha256``
    (the task's instruction, answer prefix, scorer, token limit and stop sequences) differ, as between runs of profiles
    with another ``max_new_tokens`` or of another reporter. Rows of runs that did not record it are not compared.

    >>> m = lambda digest: {"tasks": {"arc": {"task_sha256": digest}}}
    >>> rows = {n: {"untrained": False} for n in "abc"}
    >>> _prompted_otherwise(["arc"], {"b": m("sha256:2"), "c": m("sha256:1"), "a": m("sha256:1")}, rows)
    ["task arc: its rows were prompted or scored otherwise (their instruction, answer prefix, scorer, token limit or stop sequences differ: a, c; b); a difference between them is partly the task's, not only the model's"]
    >>> _prompted_otherwise(["arc"], {"a": m("sha256:1"), "b": {"tasks": {"arc": {}}}}, rows)
    []
    """
    notes = []
    for t in benchmarks:
        ways: dict[str, list[str]] = {}
        for name, e in merged.items():
            digest = (e["tasks"].get(t) or {}).get("task_sha256")
            if not rows[name]["untrained"] and isinstance(digest, str):
                ways.setdefault(digest, []).append(name)
        if len(ways) > 1:
            notes.append(f"task {t}: its rows were prompted or scored otherwise (their instruction, answer prefix, "
                         f"scorer, token limit or stop sequences differ: "
                         f"{'; '.join(', '.join(n) for n in sorted(sorted(ms) for ms in ways.values()))}"
                         "); a difference between them is partly the task's, not only the model's")
    return notes


def _shots_differ(benchmarks: list[str], merged: dict[str, dict[str, Any]],
                  rows: dict[str, dict[str, Any]]) -> list[str]:
    """A note per task whose trained rows of one kind were prompted with different shot counts (runs of different
    profiles merged on the same items): instruct models zero-shot and base models 1-shot is the defaults' split of
    reporter's own tasks, not a difference; an lm-eval task's default is one count for every model, so all its
    rows count as one kind.

    >>> m = lambda kind, shots: {"meta": {"kind": kind}, "tasks": {"arc": {"shots": shots}}}
    >>> rows = {n: {"untrained": False} for n in "abc"}
    >>> _shots_differ(["arc"], {"a": m("instruct", 0), "b": m("instruct", 3), "c": m("base", 1)}, rows)
    ["task arc: its instruct rows were prompted with different shots (zero-shot: a; 3-shot: b); a difference between them is partly the prompt's, not only the model's"]
    >>> _shots_differ(["arc"], {"a": m("instruct", 0), "c": m("base", 1)}, rows)
    []
    >>> lm = lambda kind, shots: {"meta": {"kind": kind}, "tasks": {"arc": {"shots": shots, "scorer": "lm_eval"}}}
    >>> _shots_differ(["arc"], {"a": lm("instruct", 0), "c": lm("base", 1)}, rows)[0].split(";")[0]
    'task arc: its rows were prompted with different shots (zero-shot: a'
    """
    notes = []
    for t in benchmarks:
        by_kind: dict[str, dict[int, list[str]]] = {}
        for name, e in merged.items():
            s = e["tasks"].get(t) or {}
            if rows[name]["untrained"] or not isinstance(s.get("shots"), int):
                continue
            kind = ("" if s.get("scorer") == "lm_eval" else
                    "instruct " if (e.get("meta") or {}).get("kind") == "instruct" else "base ")
            by_kind.setdefault(kind, {}).setdefault(s["shots"], []).append(name)
        for kind, counts in sorted(by_kind.items()):
            if len(counts) > 1:
                said = "; ".join(f"{'zero-shot' if n == 0 else f'{n}-shot'}: {', '.join(ms)}"
                                 for n, ms in sorted(counts.items()))
                notes.append(f"task {t}: its {kind}rows were prompted with different shots ({said}); a difference "
                             "between them is partly the prompt's, not only the model's")
    return notes


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
    left_out: list[dict[str, Any]] = _reworded(runs, chosen)
    row_of = _row_names(runs, chosen)
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
                summary = {k: v for k, v in s.items() if k not in ("items", "items_key", "mui_key", "digests")}
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
                         "runs": [r.label], "run": r.label, "run_dir": r.dir,
                         "created": e["meta"].get("first_measured") or r.created,  # a model added later: its date
                         "slug": slugify(row), "model_slug": e["slug"], "untrained": e["untrained"],
                         "source": e.get("source"), "n_params": e["meta"].get("n_params"), "lpp": e.get("lpp"),
                         "identity": e["meta"].get("identity"),
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
            notes.append(f"{name}: evaluated in {len(same)} runs that do not give one identical set of results (other "
                         "tasks, items, outcomes, or prompts or scoring): one row per run "
                         f"({', '.join(entry['model'] for entry in same)})")
    benchmarks = sorted({t for row in rows.values() for t in row["tasks"] if not is_probe(t)})
    _settle_units(rows, benchmarks)
    notes += _shots_differ(benchmarks, merged, rows) + _prompted_otherwise(benchmarks, merged, rows)
    rank_tasks = ranking_tasks([set(row["tasks"]) for row in rows.values() if not row["untrained"]], benchmarks)
    if rank_tasks != benchmarks:
        notes.append(f"the ranking uses {', '.join(rank_tasks) or 'no task'}, the tasks every ranked model "
                     f"answered; {', '.join(t for t in benchmarks if t not in rank_tasks)} "
                     "are shown but not ranked (not every model answered them)")
    ranked_like = {"models": {m: {**e, "tasks": {t: s for t, s in e["tasks"].items() if t in rank_tasks}}
                              for m, e in merged.items()}}
    board = leaderboard(ranked_like, per_item, seed=seed, n_resamples=n_resamples)
    cautions: list[str] = []
    means = {r["model"]: r["score"] for r in (board["ranking"] or {}).get("models", [])}
    if (low := not_above_constant(board["references"], means)) is not None:
        cautions.append(constant_answer_caution(low[0], ", ".join(f"{m} ({100 * means[m]:.1f}%)" for m in low[1]),
                                                "On the items the rows answered"))
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
        "warnings": warnings, "cautions": cautions, "left_out": left_out, "tasks": benchmarks, "probes": sorted(
            {t for row in rows.values() for t in row["tasks"] if is_probe(t)}),
        "groups": groups, "ranking_tasks": rank_tasks, "mui_settings": mui_columns, "rows": [rows[k] for k in sorted(rows)],
        "leaderboard": board, "law": law.law, "fairness": law.fairness,
        "notes": notes + list(law.law.get("notes") or []) + law.notes,  # the law's own (copies of one model's weights)
        "history": histories(rows, runs, cache),
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
