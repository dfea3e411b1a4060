"""The plan of one task for one model: the task, its evaluated items, prompts and settings.

Built once per model and task (:func:`plan_task`) and shared by generation, the collectors,
the verbatim-completion evidence and the ablation check.

>>> from reporter.config import TaskConfig
>>> plan = plan_task(lm, TaskConfig(name="arc_easy", limit=2), seed=0)
>>> len(plan.items), plan.shots, len(plan.prompt_ids) == len(plan.prompts) == 2
(2, 1, True)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import TaskConfig
from ..errors import UserError
from ..tasks import DEFAULT_SHOTS, Item, Task, get_task, items_sha256, jsonl_task, pick_shots, select_items
from ..tasks.prompts import build_prompt, encode_prompt
from ..tasks.sources import offline_only


@dataclass
class TaskPlan:
    """What to evaluate and how."""

    task: Task
    items: list[Item]
    prompts: list[str]
    prompt_ids: list[list[int]]
    shots: int
    stop: tuple[str, ...]
    #: each item's content digest, parallel to ``items`` (:meth:`~reporter.tasks.Item.sha256`; an lm-eval leaf's:
    #: its document's); computed from the items when not given
    item_digests: list[str] = field(default_factory=list)
    #: the few-shot examples' digests, in the order the prompts show them
    shot_digests: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.item_digests) != len(self.items):  # not given, or given for other items (a plan cut with replace)
            self.item_digests = [it.sha256() for it in self.items]

    @property
    def items_sha256(self) -> str:
        """The task's data by content: its evaluated items and few-shot examples (:func:`~reporter.tasks.items_sha256`)."""
        return items_sha256(self.item_digests, self.shot_digests)


def build_task(config: TaskConfig) -> Task:
    """A :class:`Task` from a profile entry (built-in name or ``type: jsonl``), with its overrides applied."""
    if config.lm_eval is not None:
        raise AssertionError(f"task '{config.name}' is an lm-eval task: reporter.collect.lm_eval_run plans it")
    if config.type == "jsonl":
        if config.path is None or config.prompt_field is None or config.answer_field is None or config.scorer is None:
            raise AssertionError(f"task '{config.name}': a jsonl task reached the collect stage unvalidated")
        task = jsonl_task(config.name, config.path, config.prompt_field, config.answer_field, config.scorer,
                          choices_field=config.choices_field, instruction=config.instruction or "")
    else:
        task = get_task(config.name)
        if config.instruction:
            task.instruction = config.instruction
    if config.other_split:
        task.use_other_split_file(config.other_split)
    if config.max_new_tokens:
        task.max_new_tokens = config.max_new_tokens
    if config.stop is not None:
        task.stop = task.base_stop = tuple(config.stop)
    return task


def chosen_items(config: TaskConfig, seed: int, shots: int,
                 task: Task | None = None) -> tuple[Task, list[Item], list[Item], list[Item]]:
    """The task (``task``, or one built from ``config``), its evaluated items, its few-shot pool and the examples
    picked from it: the data alone, no model.
    """
    task = build_task(config) if task is None else task
    items, pool = select_items(task, config.limit, seed, shots, only=config.items)
    return task, items, pool, pick_shots(pool, shots, seed)


def changed_items(config: TaskConfig, recorded: dict[str, Any], seed: int) -> bool:
    """Whether the data of a task that a ``summary.json`` (``recorded``) was written for is no longer the data the
    task reads now (a new copy of a packaged dataset, an edited file): its ``items_sha256`` against the items and
    few-shot examples chosen again, without a model; or the task prompts or scores them otherwise now (its
    ``task_sha256``: :meth:`~reporter.tasks.Task.settings_sha256`). False where it cannot be told: a summary without
    the digest, data that cannot be read now (a run then fails on it, not here), a built-in task with no offline
    copy (its hub dataset is not reached for a finished task: a rerun of finished work needs no network), or an
    lm-eval task (its documents are in the run's configuration hash: changed, the run is refused as another
    configuration).
    """
    digest, shots = recorded.get("items_sha256"), recorded.get("shots")
    if config.lm_eval is not None or not isinstance(digest, str) or not isinstance(shots, int):
        return False
    if isinstance(settings := recorded.get("task_sha256"), str) and (now := _settings_digest(config)) is not None \
            and settings != now:
        return True  # prompted or scored otherwise now (a plugin task's instruction read from a file of its own)
    if str(recorded.get("source", "")).startswith("hub:"):  # measured on the hub's copy: not reached for finished work
        return False
    key = (config, seed, shots)
    if key not in DATA_DIGESTS:
        DATA_DIGESTS[key] = _data_digest(config, seed, shots)
    now = DATA_DIGESTS[key]
    return now is not None and now != digest


#: :func:`changed_items`' digests of the data as it is now, by (task, seed, shots), and the other split's
#: (:func:`reporter.collect.split_reference.stale_other_split`), by ("other split", task): read once per run, not
#: once per model and check (parsing MMLU's copy takes 0.5 s); kept for one run (:func:`data_checks_for`)
DATA_DIGESTS: dict[tuple[Any, ...], str | None] = {}
_DIGESTS_RUN: list[Any] = [None]
#: the tasks those checks read, by profile entry, for the same run: a task's items are parsed once for both of its
#: checks (MMLU's offline copy: 0.7-1.2 s each time)
_CHECKED: dict[TaskConfig, Task] = {}


def data_checks_for(run: Any) -> None:
    """Keep :data:`DATA_DIGESTS` for the run ``run`` names (None: for no run, so emptied), emptying it when another
    run begins: a second run in the same process (or Ray worker) reads the data as it is then.

    >>> DATA_DIGESTS[("t", 0, 0)] = "sha256:x"; data_checks_for(("run", 1)); DATA_DIGESTS
    {}
    """
    if run is None or _DIGESTS_RUN[0] != run:
        DATA_DIGESTS.clear()
        _CHECKED.clear()
        _DIGESTS_RUN[0] = run


def checked_data(config: TaskConfig) -> Task:
    """The task the finished-work checks of this run read for ``config`` (built once per run, :func:`data_checks_for`).

    >>> checked_data(TaskConfig(name="arc_easy")) is checked_data(TaskConfig(name="arc_easy"))
    True
    """
    if config not in _CHECKED:
        _CHECKED[config] = build_task(config)
    return _CHECKED[config]


def _settings_digest(config: TaskConfig) -> str | None:
    """The task's :meth:`~reporter.tasks.Task.settings_sha256` as it is built now; None where it cannot be built."""
    try:
        return checked_data(config).settings_sha256()
    except Exception:  # noqa: BLE001 - cannot be built now: the task's own run says why
        return None


def _data_digest(config: TaskConfig, seed: int, shots: int) -> str | None:
    """The digest of the task's data as its offline copy gives it now; None where that cannot be read without the
    network (no offline copy, or one that is missing: a finished task never reaches for the hub) or at all.
    """
    try:
        task = checked_data(config)
        if task.source.startswith("hub:"):  # no offline copy: its loader would reach the hub
            return None
        with offline_only():
            _, items, _, demos = chosen_items(config, seed, shots, task)  # the selection plan_task makes
        return items_sha256([it.sha256() for it in items], [d.sha256(as_shot=True) for d in demos])
    except Exception:  # noqa: BLE001 - unreadable now: the task's own run says why
        return None


def plan_task(lm: Any, config: TaskConfig, seed: int) -> TaskPlan:
    """The evaluated items, their prompts and token ids, the shot count and the stop sequences.

    Instruct models are prompted zero-shot with their chat template, base models 1-shot (the
    Utility Law paper's settings), unless the profile sets ``shots``.
    """
    shots = config.shots
    if shots is None:
        shots = DEFAULT_SHOTS["instruct" if lm.kind == "instruct" else "base"]
    task, items, pool, demos = chosen_items(config, seed, shots)
    if not items:
        raise UserError(f"no item is left to evaluate: the {len(pool)} item(s) of the task "
                        f"are all taken as few-shot examples ({shots} shot{'s' * (shots != 1)} for this "
                        f"{lm.kind} model); add items or set shots: 0")
    if len(demos) < shots:  # the card and results.json would state more shots than the prompts hold
        raise UserError(f"task '{task.name}' has {len(demos)} few-shot example(s), fewer than shots: {shots}; "
                        f"use at most {len(demos)}")
    prompts = [build_prompt(lm, task, it, demos) for it in items]
    ids = [encode_prompt(lm, p) for p in prompts]
    stop = task.stop if lm.use_chat_template else task.base_stop
    return TaskPlan(task, items, prompts, ids, shots, stop, shot_digests=[d.sha256(as_shot=True) for d in demos])
