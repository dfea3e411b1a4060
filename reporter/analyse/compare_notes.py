"""The notes of a comparison of two runs (``reporter compare``) that need no run: what a cleared contamination
warning rests on, why MUI was not compared, and what was left out.

>>> mui_notes(False, True, [])
['MUI was not compared (--no-mui).']
"""
from __future__ import annotations

from typing import Any, Sequence

from ..schema import ComparisonRow, Unpaired
from .contamination import SIGNAL_NAMES
from .control_power import POWER_TESTS, power_at_size, why_not

__all__ = ["cleared_note", "evaluation_changes", "left_out_notes", "mui_notes", "power_text", "unfinished"]


def power_text(test: str, s: dict[str, Any], task: str | None = None) -> str:
    """A test's size in a run, and its positive-control power there (from the current table) where it holds the test.

    Both runs are read against the same, current table, so a difference in the note is a difference in size.
    """
    n = s.get("n")
    orders = s.get("orders")
    size = {"option_order": f"{n} items" + (f" × {orders} other orders" if orders is not None else ""),
            "split_min_k": f"{n} pairs", "verbatim": f"{n} questions",
            "law_residual": f"a law of {s.get('n_points')} trained models"}.get(test, f"n = {n}")
    if test not in POWER_TESTS or n is None:
        return size
    k = int(s.get("n_tests") or 0)
    at = power_at_size(test, items=int(n), n_tests=k, orders=orders, task=task) if k else None
    if at is None:
        why = why_not(test, items=int(n), n_tests=k, orders=orders, task=task) if k else "no run-wide test count recorded"
        return f"{size}, power not stated ({why})"
    read = at["table_items"] != at["items"] or at.get("table_orders") != at.get("orders")
    where = (f", read at the table's {at['table_items']}"
             + (f" items × {at['table_orders']} orders" if "table_orders" in at else " pairs") if read else "")
    return (f"{size}, power {'≥ ' if read else ''}{100 * float(at['power']):.0f}% against the positive control"
            f"{where}")


def cleared_note(base_row: dict[str, Any], new_row: dict[str, Any], *, own_control: bool = True) -> str:
    """What a cleared warning rests on: each test that fired in the base run, at its size and power in both runs.

    A warning can clear because the model changed, or because the new run's test scored fewer items and could
    not see what the base run's did. The note puts the two side by side; the power of both comes from the
    current table (:func:`reporter.analyse.control_power.power_at_size`), whatever table each run was
    analysed with. ``own_control``: the task is the benchmark its name says, so its own control's rows apply (a
    user's ``type: jsonl`` file named like one reads the general table, as the run's analysis did).

    >>> fired = {"measured": True, "test": True, "fires": True, "n": 32, "orders": 8, "n_tests": 3}
    >>> quiet = {"measured": True, "test": True, "fires": False, "n": 8, "orders": 3, "n_tests": 3}
    >>> note = cleared_note({"signals": {"option_order": fired}}, {"signals": {"option_order": quiet}})
    >>> note.startswith("option order fired in the base run at 32 items × 8 other orders, power ")
    True
    >>> note.split("; ")[1].startswith("the new run tested 8 items × 3 other orders, power ")
    True
    """
    parts = []
    task = base_row.get("task") if own_control else None
    for k, s in (base_row.get("signals") or {}).items():
        if not isinstance(s, dict) or not s.get("fires"):
            continue
        t = (new_row.get("signals") or {}).get(k)
        if not isinstance(t, dict):
            now = "the new run's analysis has no record of this test"
        elif not t.get("measured"):
            now = f"the new run did not measure it ({t.get('reason') or 'no reason recorded'})"
        elif t.get("in_correction") is False:
            now = f"in the new run it {t.get('reason') or 'could not fire at its size'}"
        elif t.get("confounded"):
            now = f"it fired in the new run too but was discounted ({t.get('reason') or 'negative control'})"
        else:
            now = f"the new run tested {power_text(k, t, task)}"
        was = f" at {power_text(k, s, task)}" if "n" in s or "n_points" in s else ""
        parts.append(f"{SIGNAL_NAMES.get(k, k)} fired in the base run{was}; {now}")
    return "; ".join(parts)


def mui_notes(mui: bool, mui_compared: bool, rows: Sequence[ComparisonRow]) -> list[str]:
    """Why MUI was not compared: --no-mui, different item sets (MUI grows with the items), or not measured in both."""
    if not mui:
        return ["MUI was not compared (--no-mui)."]
    if not mui_compared:
        return ["MUI was not compared: the item sets differ, and MUI grows with the items it is measured on."]
    if not any(r["mui"] is not None for r in rows):
        return ["MUI was not compared: it was not measured in both runs."]
    return []


def left_out_notes(tasks_only: dict[str, dict[str, set[str]]], unpaired: Unpaired,
                    models: tuple[Sequence[str], Sequence[str]] = ((), ())) -> list[str]:
    """Tasks (per run, by model pair), then models, that are in one run only, then models that are in both runs but
    in no pair (``--pair`` chose others): named in a note each, not compared.

    >>> left_out_notes({"base": {"a": {"gsm8k", "boolq"}, "b": {"boolq"}}}, {})
    ['Only in the base run, not compared: boolq, gsm8k of a; boolq of b.']
    >>> left_out_notes({}, {"base": ["a", "b"], "new": ["b", "c"]}, (["a", "b", "x"], ["b", "c", "y"]))
    ['Models only in the base run, not compared: a.', 'Models only in the new run, not compared: c.', 'In both runs but in no pair, not compared: b.']
    """
    notes = [f"Only in the {role} run, not compared: "
             + "; ".join(f"{', '.join(sorted(ts))} of {who}" for who, ts in by_pair.items()) + "."
             for role, by_pair in tasks_only.items() if by_pair]
    in_base, in_new = set(models[0]), set(models[1])
    both = [m for m in unpaired.get("base") or [] if m in in_new and m in (unpaired.get("new") or [])]
    notes += [f"Models only in the {role} run, not compared: {', '.join(only)}."
              for role, names, other in (("base", unpaired.get("base") or [], in_new),
                                         ("new", unpaired.get("new") or [], in_base))
              if (only := [m for m in names if m not in other])]
    if both:
        notes.append(f"In both runs but in no pair, not compared: {', '.join(both)}.")
    return notes


#: what a model's ``meta`` records of how it was evaluated, as the notes name it
_HOW = {"kind": "kind", "chat_template": "chat template", "dtype": "dtype", "device": "device"}


def evaluation_changes(base_meta: dict[str, Any], new_meta: dict[str, Any],
                       shots: dict[tuple[Any, Any], list[str]]) -> list[str]:
    """How one model's evaluation differs between two runs: its recorded kind, chat template, dtype and device kind
    (``cuda:0`` and ``cuda:1`` compute alike), and ``shots`` ({(base, new): [task …]} where a task's shots differ).

    >>> evaluation_changes({"kind": "instruct", "chat_template": True, "device": "cuda:0"},
    ...                    {"kind": "base", "chat_template": False, "device": "cuda:1"}, {(0, 1): ["arc"]})
    ['kind instruct → base', 'chat template on → off', 'shots 0 → 1 on arc']
    """
    def setting(key: str, v: Any) -> Any:
        return str(v).split(":")[0] if key == "device" and v is not None else v

    def plain(v: Any) -> str:
        return "on" if v is True else "off" if v is False else "unrecorded" if v is None else str(v)

    changed = [f"{label} {plain(base_meta.get(k))} → {plain(new_meta.get(k))}" for k, label in _HOW.items()
               if setting(k, base_meta.get(k)) != setting(k, new_meta.get(k))]
    return changed + [f"shots {plain(b)} → {plain(n)} on {', '.join(ts)}" for (b, n), ts in shots.items()]


def unfinished(name: str, role: str, entry: dict[str, Any]) -> str | None:
    """The line for a model that did not finish in the ``role`` run (status pending or partial), or None: only what it
    finished is compared.

    >>> unfinished("m", "new", {"status": "partial", "tasks": {"arc": {}}, "smoke": {}})
    'm did not finish in the new run (partial: arc finished); only the tasks it finished are compared, so rerun `reporter run` on that run directory to compare the rest'
    >>> unfinished("m", "base", {"status": "complete"}) is None
    True
    >>> unfinished("m", "new", {"status": "partial", "tasks": {"arc": {}}, "smoke": {}}).split("; ")[0]
    'm did not finish in the new run (partial: arc finished)'
    >>> unfinished("m", "new", {"status": "partial", "tasks": {"arc": {}}}).split("; ")[0]
    'm did not finish in the new run (partial: arc finished, its smoke test did not)'
    """
    status, done = entry.get("status"), sorted(entry.get("tasks") or {})
    if status not in ("pending", "partial"):
        return None
    if status == "pending":
        what = f"only {', '.join(done)} finished" if done else "no task finished"
    else:
        what = f"{', '.join(done) or 'no task'} finished" + ("" if "smoke" in entry else ", its smoke test did not")
    return (f"{name} did not finish in the {role} run ({status}: {what}); only the tasks it finished are compared, so "
            "rerun `reporter run` on that run directory to compare the rest")
