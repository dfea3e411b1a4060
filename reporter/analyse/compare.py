"""Before/after: what changed between two runs (``reporter compare BASE NEW``).

Models are paired by name (or explicitly, ``pairs=[("old", "new")]``), tasks by name and items by
id. Per paired model and task, on the items both runs answered:

- the score delta ``new − base`` with the paired test of the run's pairwise table and the 95 % CI that
  agrees with it (exact McNemar for 0/1 scores, the sign-flip test otherwise), Holm-adjusted
  over every test of the comparison; ``status`` is ``regression`` / ``improvement`` only when
  the adjusted p-value is below :data:`~reporter.metrics.stats.ALPHA`;
- the MUI delta, only when both runs recorded the same MUI settings and sample count;
- the contamination status change (``new``, ``cleared``, ``changed`` or ``unchanged``);

and per paired model the LPP signature deltas (descriptive: LPP is one measurement on a fixed
corpus, so it has no test). Comparisons that cannot be paired are refused with one line
(:class:`~reporter.errors.UserError`, exit code 2): different item sets (unless
``shared_only``), or MUI recorded under different settings (unless ``mui=False``).

>>> doc = compare_runs(run_dir, run_dir)  # a run against itself: nothing changed
>>> sorted({r["status"] for r in doc["rows"]}), doc["family"]
(['no significant change'], 6)
>>> doc["lpp"][0]["compared"], doc["lpp"][0]["metrics"]["entropy_floor"]["delta"]
(True, 0.0)
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Literal, NamedTuple, Sequence, TypedDict, cast

import numpy as np
from scipy import stats

from ..errors import UserError
from ..metrics.mui import LEGACY_DEFINITION
from ..metrics.stats import ALPHA, holm, paired_comparison
from ..schema import CompareDocument, ComparisonRow, LPPDelta, MetricDelta, RunSide, Unpaired, is_untrained
from ..store.gate import open_run
from ..store.layout import SAMPLES, RunDir, slugify
from ..store.samples import holds_task, read_samples
from .compare_notes import cleared_note, evaluation_changes, left_out_notes, mui_notes, unfinished
from .contamination import Severity
from .numbers import tested_p
from .task_weights import groups_of

__all__ = ["COMPARE_VERSION", "LPP_KEYS", "compare_runs", "parse_pairs", "CompareDocument", "ComparisonRow", "LPPDelta"]

COMPARE_VERSION = 1
#: the LPP signature's numbers that a comparison reports, with their card names
LPP_KEYS = {"entropy_floor": "entropy floor", "participation_ratio": "participation ratio",
            "effective_rank": "effective rank"}
_FIRES = ("weak", "strong")
#: how a task's contamination verdict moved between the runs
SeverityMove = Literal["new", "cleared", "changed", "unchanged", "not measured"]

class _Run(TypedDict):
    """An analysed run directory as loaded by :func:`_load`."""

    dir: Path
    rd: RunDir
    results: dict[str, Any]
    manifest: dict[str, Any]


class _Work(NamedTuple):
    """One paired model and task to compare: the names, both task entries and both runs' item scores."""

    old: str
    nw: str
    task: str
    b_entry: dict[str, Any]
    n_entry: dict[str, Any]
    bi: dict[str, float]
    ni: dict[str, float]


def parse_pairs(specs: Iterable[str]) -> list[tuple[str, str]]:
    """``--pair OLD=NEW`` options as (base model, new model) pairs.

    >>> parse_pairs(["SmolLM2 v1=SmolLM2 v2"])
    [('SmolLM2 v1', 'SmolLM2 v2')]
    >>> parse_pairs(["a=b", "a = b"])
    Traceback (most recent call last):
    reporter.errors.UserError: --pair 'a = b': given twice; give each pair once
    """
    out: list[tuple[str, str]] = []
    for spec in specs:
        old, sep, new = spec.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise UserError(f"--pair '{spec}': expected OLD=NEW, a model name of the base run, '=', one of the new run")
        if (old.strip(), new.strip()) in out:  # its tests would count twice in the Holm family
            raise UserError(f"--pair '{spec}': given twice; give each pair once")
        out.append((old.strip(), new.strip()))
    return out


def _load(run_dir: Path, role: str) -> _Run:
    view = open_run(run_dir, f"compare ({role})", analysed=True)  # the gate: lock, schema_version, shape
    assert view.results is not None  # asked for: the gate read and checked it
    return {"dir": run_dir, "rd": view.rd, "results": view.results, "manifest": view.manifest}


def _pairs(base: _Run, new: _Run, explicit: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    bm, nm = list(base["results"]["models"]), list(new["results"]["models"])
    if explicit:
        explicit = [_split_at_names(old, nw, bm, nm) for old, nw in explicit]
        for old, nw in explicit:
            if old not in bm:
                raise UserError(f"--pair {old}={nw}: '{old}' is not a model of the base run; it has: {', '.join(bm)}")
            if nw not in nm:
                raise UserError(f"--pair {old}={nw}: '{nw}' is not a model of the new run; it has: {', '.join(nm)}")
        return list(explicit)
    pairs = [(m, m) for m in bm if m in nm]
    if not pairs:
        raise UserError(f"no model name is in both runs (base: {', '.join(bm)}; new: {', '.join(nm)}); "
                        "pair them with --pair OLD=NEW")
    return pairs


def _split_at_names(old: str, new: str, base: Sequence[str], other: Sequence[str]) -> tuple[str, str]:
    """``--pair`` split at its first '=' (``old``, ``new``), or, where that names no models of the runs, at the one
    '=' that does: a model name may hold '=' itself (``m=1``).

    >>> _split_at_names("m", "1=m=2", ["m=1"], ["m=2"])
    ('m=1', 'm=2')
    >>> _split_at_names("a", "b", ["a"], ["c"])  # no split names both: the first, for the error to name
    ('a', 'b')
    """
    if old in base and new in other:
        return old, new
    spec = f"{old}={new}"
    found = [(spec[:i].strip(), spec[i + 1:].strip()) for i, c in enumerate(spec) if c == "="]
    found = [(a, b) for a, b in found if a in base and b in other]
    return found[0] if len(found) == 1 else (old, new)


def _items(run: _Run, model: str, task: str) -> tuple[dict[str, float], dict[str, tuple[str, str | None]]]:
    """A model's item scores on a task from its samples.jsonl, which must be there and hold numeric scores; and
    each item's gold answer (as JSON) and content digest (``item_sha256``; None in a run made before samples
    recorded it), by which the same id is the same item in both runs.
    """
    slug = run["results"]["models"][model].get("slug") or slugify(model)
    path = run["rd"].task_dir(slug, task) / SAMPLES
    if not path.is_file():
        raise UserError(f"{path}: missing, so {task} of {model} cannot be compared item by item; rerun `reporter run` "
                        f"on {run['dir']} to rebuild it")
    out, gold = {}, {}
    for r in read_samples(path).values():
        score = r.get("score")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise UserError(f"{path}: item {str(r.get('id'))[:60]!r} has score {json.dumps(score)[:40]}, not a "
                            f"number; rerun `reporter run` on {run['dir']} to rebuild it")
        out[str(r.get("id"))] = float(score)
        digest = r.get("item_sha256")
        gold[str(r.get("id"))] = (json.dumps(r.get("gold"), sort_keys=True), digest if isinstance(digest, str) else None)
    n = ((run["results"]["models"][model].get("tasks") or {}).get(task) or {}).get("n")
    if not holds_task(len(out), n):
        raise UserError(f"{path}: holds {len(out)} items where {task} of {model} has {n} (cut after the task "
                        f"finished); rerun `reporter run` on {run['dir']} to rebuild it")
    return out, gold


#: what must agree for two MUI values to be compared (not n_layers/d_ff: they describe the model, and a release
#: may change it)
MUI_COMPARABLE = ("definition", "mode", "top_ratio", "rho", "n_samples")


def _mui_settings(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The MUI settings that must agree (runs recorded before definitions were named used ``contribution``).

    >>> _mui_settings({"mui": 0.4, "mui_settings": {"mode": "score", "top_ratio": 0.001, "rho": 0.9,
    ...                                             "n_samples": 8, "n_layers": 30, "d_ff": 1536}})
    {'definition': 'contribution', 'mode': 'score', 'top_ratio': 0.001, 'rho': 0.9, 'n_samples': 8}
    """
    s = entry.get("mui_settings")
    if entry.get("mui") is None or not isinstance(s, dict):
        return None
    return {**{k: s.get(k) for k in MUI_COMPARABLE}, "definition": s.get("definition") or LEGACY_DEFINITION}


def _who(old: str, new: str) -> str:
    return old if old == new else f"{old} → {new}"


def _describe(s: dict[str, Any], keys: Iterable[str]) -> str:
    return ", ".join(f"{k} {s.get(k)}" for k in keys)


def _verdict(run: _Run, model: str, task: str) -> dict[str, Any]:
    for row in run["results"]["analysis"].get("contamination") or []:
        if row.get("model") == model and row.get("task") == task:
            return dict(row)
    return {}


def _severity(run: _Run, model: str, task: str) -> Severity | None:
    row = _verdict(run, model, task)
    return cast(Severity, row.get("severity")) if row and row.get("measured", True) else None


def _contamination_change(before: Severity | None, after: Severity | None) -> SeverityMove:
    """How a task's contamination verdict moved from the base run to the new one.

    >>> [_contamination_change(*p) for p in [("none", "weak"), ("strong", "none"), ("weak", "strong"),
    ...                                      ("weak", "weak"), (None, "weak")]]
    ['new', 'cleared', 'changed', 'unchanged', 'not measured']
    """
    if before is None or after is None:
        return "not measured"
    if before not in _FIRES and after in _FIRES:
        return "new"
    if before in _FIRES and after not in _FIRES:
        return "cleared"
    return "unchanged" if before == after else "changed"


_IGNORED_TASK_KEYS = ("name", "items", "items_from", "path")  # ids are compared item by item; paths move


def _task_settings(run: _Run, task: str) -> dict[str, Any]:
    tasks = ((run["manifest"].get("resolved") or {}).get("profile") or {}).get("tasks") or []
    entry = next((t for t in tasks if isinstance(t, dict) and t.get("name") == task), {})
    return {k: v for k, v in entry.items() if k not in _IGNORED_TASK_KEYS}


def _lpp(base: _Run, new: _Run, old: str, nw: str) -> LPPDelta:
    """LPP deltas only when both runs measured LPP with the same settings (descriptive: no test)."""
    row: LPPDelta = {"base_model": old, "new_model": nw, "compared": False}
    settings = [((r["manifest"].get("resolved") or {}).get("profile") or {}).get("lpp") for r in (base, new)]
    lpp = [r["results"]["models"][m].get("lpp") for r, m in ((base, old), (new, nw))]
    if not all(isinstance(x, dict) for x in lpp):
        return {**row, "compared": False, "reason": "LPP was not measured in " +
                ("either run" if lpp[0] is lpp[1] is None else "the base run" if lpp[0] is None else "the new run")}
    if settings[0] != settings[1]:
        b, n = settings[0] or {}, settings[1] or {}
        keys = [k for k in sorted(set(b) | set(n)) if b.get(k) != n.get(k)]
        return {**row, "compared": False, "reason": "the runs used different LPP settings (" + "; ".join(
            f"{k} {b.get(k, 'unset')} → {n.get(k, 'unset')}" for k in keys) + ")"}
    metrics: dict[str, MetricDelta] = {}
    for key in LPP_KEYS:
        b, n = lpp[0].get(key), lpp[1].get(key)
        if isinstance(b, (int, float)) and isinstance(n, (int, float)):
            metrics[key] = {"base": b, "new": n, "delta": n - b}
    return {**row, "compared": True, "metrics": metrics}


def _paired_work(base: _Run, new: _Run, paired: Sequence[tuple[str, str]],
                 shared_only: bool) -> tuple[list[_Work], dict[str, dict[str, set[str]]], list[str]]:
    """Tasks pair by name and items by id: both runs must have answered the same items (with ``shared_only``, at
    least one shared item), else the comparison is refused; tasks in one run only are counted, not compared. An id
    whose gold answer (or, where both runs recorded it, content digest) differs between the runs is another item
    under the same id (the task's data changed): refused too, or with ``shared_only`` left out like an unshared id,
    with a note. ``tasks_only``: per run, the tasks in that run only, by pair (:func:`_who`).
    """
    work, notes = [], []
    tasks_only: dict[str, dict[str, set[str]]] = {"base": {}, "new": {}}
    for old, nw in paired:
        b_tasks = base["results"]["models"][old].get("tasks") or {}
        n_tasks = new["results"]["models"][nw].get("tasks") or {}
        for role, only in (("base", set(b_tasks) - set(n_tasks)), ("new", set(n_tasks) - set(b_tasks))):
            if only:
                tasks_only[role][_who(old, nw)] = only
        for task in [t for t in b_tasks if t in n_tasks]:
            (bi, b_gold), (ni, n_gold) = _items(base, old, task), _items(new, nw, task)
            both = sorted(set(bi) & set(ni))
            if changed := [i for i in both if _other_item(b_gold[i], n_gold[i])]:
                example = _changed_example(changed[0], b_gold[changed[0]], n_gold[changed[0]])
                if shared_only and len(changed) == len(both):  # nothing unchanged: the task goes
                    notes.append(f"Task {task} of {_who(old, nw)}: every item both runs answered has another gold "
                                 f"answer or question in the new run (e.g. {example}); the task's data changed, so it "
                                 "is not compared (--shared-only).")
                    continue
                if not shared_only:
                    raise UserError(
                        f"{task} of {_who(old, nw)}: {len(changed)} of the items both runs answered have another gold "
                        f"answer or question in the new run ({example}): the task's data changed, so the same id is "
                        "not the same item and no paired test is possible; rerun both with the same data"
                        + (" or pass --shared-only to compare the unchanged items" if len(changed) < len(both) else ""))
                gone = set(changed)
                ni = {i: v for i, v in ni.items() if i not in gone}
                notes.append(f"Task {task} of {_who(old, nw)}: {len(changed)} item(s) have another gold answer or "
                             f"question in the new run (e.g. {example}), so the task's data changed; they are left out "
                             "(--shared-only).")
            shared = sorted(set(bi) & set(ni))
            if set(bi) != set(ni) and not (shared_only and shared):
                raise UserError(
                    f"{task} of {_who(old, nw)}: the runs answered different items ({len(bi)} in base, {len(ni)} "
                    f"in new, {len(shared)} shared), so no paired test is possible; rerun with the same task "
                    "settings (limit, seed)" + (" or pass --shared-only to compare the shared items" if shared else ""))
            if not shared:
                raise UserError(f"{task} of {_who(old, nw)}: no answered item in "
                                f"{'either run' if not bi and not ni else 'the base run' if not bi else 'the new run'} "
                                "(its samples.jsonl is missing or empty); rerun `reporter run` on that run directory")
            work.append(_Work(old, nw, task, b_tasks[task], n_tasks[task], bi, ni))
    return work, tasks_only, notes


def _other_item(base: tuple[str, str | None], new: tuple[str, str | None]) -> bool:
    """Whether one id is another item in the two runs: another gold answer, or (where both runs recorded it) another
    content digest: the same gold under another question or other options.

    >>> _other_item(('"A"', "d1"), ('"A"', "d1")), _other_item(('"A"', "d1"), ('"A"', "d2")), _other_item(('"A"', None), ('"A"', "d2"))
    (False, True, False)
    """
    return base[0] != new[0] or (base[1] is not None and new[1] is not None and base[1] != new[1])


def _changed_example(item: str, base: tuple[str, str | None], new: tuple[str, str | None]) -> str:
    """One changed item for a message: its gold answers, or that only its question or options changed."""
    if base[0] != new[0]:
        return f"{item[:40]!r}: {base[0][:30]} → {new[0][:30]}"
    return f"{item[:40]!r}: the same gold answer {base[0][:30]} to another question or options"


def _settings_notes(base: _Run, new: _Run, work: Sequence[_Work]) -> list[str]:
    """A task whose profile settings differ between the runs gets a note: its change may come from the settings."""
    notes = []
    for task in sorted({w.task for w in work}):
        b_set, n_set = _task_settings(base, task), _task_settings(new, task)
        if b_set != n_set:
            changed = [k for k in sorted(set(b_set) | set(n_set)) if b_set.get(k) != n_set.get(k)]
            notes.append(f"Task {task}: its settings differ between the runs ("
                         + "; ".join(f"{k} {b_set.get(k, 'default')} → {n_set.get(k, 'default')}" for k in changed)
                         + "): a score change on it may come from the settings, not only from the model.")
        elif any(isinstance(b := w.b_entry.get("task_sha256"), str)
                 and isinstance(n := w.n_entry.get("task_sha256"), str) and b != n for w in work if w.task == task):
            # the same profile settings, yet the task prompts or scores otherwise: a plugin task's prompt file, or
            # another reporter's built-in instruction (task_sha256, recorded in each task's summary)
            notes.append(f"Task {task}: it prompts or scores otherwise in the new run (its instruction, answer "
                         "prefix, scorer, token limit or stop sequences differ: task_sha256), with the same settings: "
                         "a score change on it may come from that, not only from the model.")
    return notes


def _prompting_notes(base: _Run, new: _Run, paired: Sequence[tuple[str, str]], work: Sequence[_Work]) -> list[str]:
    """A pair whose models were evaluated differently (kind, chat template, dtype, device; a compared task's shots)
    gets a note naming each difference (:func:`~reporter.analyse.compare_notes.evaluation_changes`): a score change
    may come from it, not only from the model. The profile's settings (:func:`_settings_notes`) do not show them: the
    kind decides the shots and the chat template, and the models YAML the dtype and device.
    """
    notes = []
    for old, nw in paired:
        bm = base["results"]["models"][old].get("meta") or {}
        nm = new["results"]["models"][nw].get("meta") or {}
        shots: dict[tuple[Any, Any], list[str]] = {}
        for w in work:
            if (w.old, w.nw) == (old, nw) and w.b_entry.get("shots") != w.n_entry.get("shots"):
                shots.setdefault((w.b_entry.get("shots"), w.n_entry.get("shots")), []).append(w.task)
        if bm and nm and (changed := evaluation_changes(bm, nm, shots)):
            notes.append(f"{_who(old, nw)} was evaluated differently in the two runs ({'; '.join(changed)}): a score "
                         "or MUI change may come from how it was prompted and run, not only from the model.")
    return notes


def _incomplete(base: _Run, new: _Run, paired: Sequence[tuple[str, str]]) -> list[str]:
    """A paired model whose run did not finish in either run (:func:`~reporter.analyse.compare_notes.unfinished`)."""
    return [line for o, n in paired for role, run, name in (("base", base, o), ("new", new, n))
            if (line := unfinished(name, role, run["results"]["models"][name])) is not None]


def _check_mui(w: _Work, mui_compared: bool) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """MUI is compared only under equal settings (MUI_COMPARABLE): different recorded settings refuse the comparison
    (unless MUI is not compared). Returns both runs' comparable settings.
    """
    ms = _mui_settings(w.b_entry), _mui_settings(w.n_entry)
    if mui_compared and ms[0] and ms[1] and ms[0] != ms[1]:
        keys = [k for k in sorted(set(ms[0]) | set(ms[1])) if ms[0].get(k) != ms[1].get(k)]
        raise UserError(f"{w.task} of {_who(w.old, w.nw)}: MUI is not comparable, the runs recorded different MUI "
                        f"settings (base: {_describe(ms[0], keys)}; new: {_describe(ms[1], keys)}); rerun with "
                        "the same mui settings and limit, or pass --no-mui to compare scores only")
    return ms


def _row(base: _Run, new: _Run, w: _Work, seed: int, mui_compared: bool) -> tuple[ComparisonRow, np.ndarray]:
    """One paired model and task on the shared items: the score delta with its paired CI and test, the MUI delta
    (when compared and measured in both runs) and the contamination change; and the per-item differences.
    """
    ms = _check_mui(w, mui_compared)
    old, nw, task, bi, ni = w.old, w.nw, w.task, w.bi, w.ni
    shared = sorted(set(bi) & set(ni))
    c = paired_comparison(nw, ni, old, bi, task=task, seed=seed)
    b_sev, n_sev = _severity(base, old, task), _severity(new, nw, task)
    # "status" comes with the run-wide Holm adjustment (_holm_status), once every row exists
    row = cast(ComparisonRow, {"base_model": old, "new_model": nw, "task": task, "n": c.n,
                       "base_score": sum(bi[i] for i in shared) / len(shared),
                       "new_score": sum(ni[i] for i in shared) / len(shared),
                       "delta": c.mean_diff, "ci_low": c.ci_low, "ci_high": c.ci_high, "ci_method": c.method,
                       "test": c.test, "p_value": tested_p(c.p_value), "n_regressed": c.n01, "n_improved": c.n10,
                       "reference": is_untrained(base["results"]["models"][old]), "mui": None,
                       "contamination": {"base": b_sev, "new": n_sev, "change": _contamination_change(b_sev, n_sev)}})
    # the lm-eval group the task counts in (a mean over tasks counts a group as one: release notes' mean change)
    if unit := groups_of({"new": new["results"]["models"][nw], "base": base["results"]["models"][old]}, [task]).get(task):
        row["lm_eval_unit"], row["lm_eval_group_by_size"] = str(unit), unit.by_size
    user_data = any(_task_settings(r, task).get("type") == "jsonl" for r in (base, new))  # not the benchmark's control
    if row["contamination"]["change"] == "cleared" and (note := cleared_note(_verdict(base, old, task),
                                                                             _verdict(new, nw, task),
                                                                             own_control=not user_data)):
        row["contamination"]["note"] = note
    if mui_compared and ms[0] and ms[1]:
        row["mui"] = {"base": w.b_entry["mui"], "new": w.n_entry["mui"], "delta": w.n_entry["mui"] - w.b_entry["mui"],
                      "definition": ms[1]["definition"], "n_samples": ms[1].get("n_samples")}
    return row, np.array([ni[i] - bi[i] for i in shared], dtype=np.float64)


def _failures(base: _Run, new: _Run, paired: Sequence[tuple[str, str]]) -> list[str]:
    """A paired model that failed in either run is named with the first 200 characters of its error."""
    return [f"{name} failed in the {role} run: {str(entry.get('error') or 'see its error.json')[:200]}"
            for o, n in paired for role, run, name in (("base", base, o), ("new", new, n))
            if (entry := run["results"]["models"][name]).get("status") == "failed"]


def _holm_status(rows: Sequence[ComparisonRow], diffs: Sequence[np.ndarray]) -> None:
    """Holm over every test of the comparison; a row is a regression or an improvement only when its adjusted p is
    below ALPHA and the paired test's direction (:func:`_direction`) agrees with the mean delta.
    """
    adjusted = holm([r["p_value"] for r in rows])
    for r, d, p in zip(rows, diffs, adjusted):
        direction = _direction(r, d)
        significant = p < ALPHA and direction != 0
        r.update({"p_holm": p, "significant": significant,
                  "status": ("regression" if direction < 0 else "improvement") if significant
                  else "no significant change"})


def _unpaired(base: _Run, new: _Run, paired: Sequence[tuple[str, str]]) -> Unpaired:
    """The models of each run that are in no pair (listed, not compared)."""
    paired_names = ({o for o, _ in paired}, {n for _, n in paired})
    return {"base": [m for m in base["results"]["models"] if m not in paired_names[0]],
            "new": [m for m in new["results"]["models"] if m not in paired_names[1]]}


def _same_weights_notes(base: _Run, new: _Run, paired: Sequence[tuple[str, str]]) -> list[str]:
    """A note for each pair whose two models are the same weights by content (``meta.identity``): what changed
    between them is how they were evaluated, not the model.
    """
    def identity(run: _Run, name: str) -> str | None:
        return ((run["results"]["models"].get(name) or {}).get("meta") or {}).get("identity")

    same = [f"{o} → {n}" if o != n else o for o, n in paired if identity(base, o) and identity(base, o) == identity(new, n)]
    if not same:
        return []
    return [f"The same weights in both runs (the same content hash): {', '.join(same)}. A change there comes from how "
            "the model was evaluated (settings, items, dtype or device), not from the model."]


def compare_runs(base_dir: str | Path, new_dir: str | Path, *, pairs: Sequence[tuple[str, str]] = (),
                 mui: bool = True, shared_only: bool = False) -> CompareDocument:
    """The comparison document (``compare.json``) of two analysed run directories; see the module doc."""
    base, new = _load(Path(base_dir), "BASE_RUN"), _load(Path(new_dir), "NEW_RUN")
    paired = _pairs(base, new, pairs)
    seed = int((base["results"].get("run") or {}).get("seed") or 0)
    work, tasks_only, notes = _paired_work(base, new, paired, shared_only)
    notes += _settings_notes(base, new, work) + _prompting_notes(base, new, paired, work)
    mui_compared = mui and all(set(w.bi) == set(w.ni) for w in work)
    rows_diffs = [_row(base, new, w, seed, mui_compared) for w in work]
    rows = [r for r, _ in rows_diffs]
    failures = _failures(base, new, paired)
    if not rows:
        raise UserError("the paired models share no task; nothing to compare"
                        + (f" ({'; '.join(failures)})" if failures else ""))
    _holm_status(rows, [d for _, d in rows_diffs])
    unpaired = _unpaired(base, new, paired)
    notes += mui_notes(mui, mui_compared, rows) + left_out_notes(
        tasks_only, unpaired, (list(base["results"]["models"]), list(new["results"]["models"])))
    if Path(base_dir).resolve() == Path(new_dir).resolve():
        notes.insert(0, "Base and new are the same run: this compares models within it, not one run with another.")
    else:
        notes += _same_weights_notes(base, new, paired)
    return {
        "version": COMPARE_VERSION,
        "alpha": ALPHA,
        "family": len(rows),
        "base": _run_info(base),
        "new": _run_info(new),
        "pairs": [{"base": o, "new": n} for o, n in paired],
        "unpaired": unpaired,
        "failures": failures,
        "incomplete": _incomplete(base, new, paired),
        "rows": _ordered(rows),
        "lpp": [_lpp(base, new, o, n) for o, n in paired],
        "notes": notes,
    }


def _direction(row: ComparisonRow, diffs: np.ndarray) -> int:
    """The sign of the change the paired test detected: the discordant counts for McNemar, the mean for the
    sign-flip test (which tests the mean), the signed-rank sums for Wilcoxon (recorded by older runs; rank-based, so
    it can disagree with the mean: then the row is not called a change).

    >>> _direction({"test": "wilcoxon", "delta": 0.031}, np.array([-0.05] * 12 + [1.0]))
    0
    >>> _direction({"test": "sign-flip", "delta": 0.031}, np.array([-0.05] * 12 + [1.0]))
    1
    >>> _direction({"test": "mcnemar-exact", "delta": -0.1, "n_regressed": 5, "n_improved": 1}, np.zeros(0))
    -1
    """
    if row["test"] == "mcnemar-exact":
        sign = int(np.sign((row["n_improved"] or 0) - (row["n_regressed"] or 0)))
    elif row["test"] == "sign-flip":
        sign = int(np.sign(row["delta"]))
    else:
        d = diffs[diffs != 0]
        ranks = stats.rankdata(np.abs(d))
        sign = int(np.sign(ranks[d > 0].sum() - ranks[d < 0].sum()))
    return sign if sign == int(np.sign(row["delta"])) else 0


def _run_info(run: _Run) -> RunSide:
    info = run["results"].get("run") or {}
    return {"dir": str(run["dir"]), "name": Path(run["dir"]).resolve().name, "created": info.get("created"), "config_hash": info.get("config_hash"),
            "profile": info.get("profile"), "reporter_version": info.get("reporter_version"),
            "seed": info.get("seed")}


def _ordered(rows: list[ComparisonRow]) -> list[ComparisonRow]:
    """Significant regressions first (largest drop first), then improvements (largest first), then the rest."""
    rank = {"regression": 0, "improvement": 1, "no significant change": 2}
    return sorted(rows, key=lambda r: (rank[r["status"]], r["delta"] if r["status"] == "regression"
                                       else -r["delta"] if r["status"] == "improvement" else 0,
                                       r["new_model"], r["task"]))
