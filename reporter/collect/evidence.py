"""Evidence passes: the measurements of a model that do not ride a task's hooked pass, as plugins.

Collectors (:mod:`reporter.collect.collectors`) ride the pass that scores a task. The evidence
that needs passes of its own — the held-out reference text, the option-order test, verbatim
completion, the task's other split (contamination) and the ablation check of the key neurons —
are :class:`EvidencePass` plugins registered with :func:`register_evidence`, in run order. The
per-model job (:mod:`reporter.collect.job`) loops over them; it knows none of them by name.

Every pass has the resume contract of a collector: :meth:`EvidencePass.done` says whether its
artifact is there, whole (a rerun then skips it), and :meth:`EvidencePass.run` writes it
atomically, through :func:`measured`: skip if done → choose the batch size → run → write. A
pass has a scope: ``"model"`` (once per model, into the model directory) or ``"task"`` (once per
task, into the task directory, after the task run). Contamination evidence
(:attr:`EvidencePass.contamination`) is for published benchmarks only: not for generated probes,
and not for untrained (``random:``) baselines unless ``contamination.untrained`` asks for it
(:func:`wants_evidence`).

Passes of one task can share work through :attr:`EvidenceContext.shared`: every enabled pass's
:meth:`~EvidencePass.prepare` runs before any pass runs (the verbatim check says which tokens
it needs there, and so does the other split's test; the option-order pass, which runs first over the same
tokens, leaves the answers).

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> measured(d / "x.json", lambda bs: {"batch_size": bs}, None)["batch_size"]   # no model spec: batches of 8
8
>>> measured(d / "x.json", lambda bs: 1 / 0, None)["batch_size"]               # done: not run again
8
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal, Sequence, TypeVar

from ..config import ModelSpec, Profile, TaskConfig
from ..registry import ClassPlugins, Registry
from ..store.atomic import json_ok, read_json, write_json
from ..tasks import is_probe

if TYPE_CHECKING:  # pragma: no cover
    from ..tasks import Item, Task
    from .plan import TaskPlan

__all__ = ["EVIDENCE", "EvidenceContext", "EvidencePass", "batch_size_for", "evidence_key", "evidence_order", "evidence_passes",
           "measured", "register_evidence", "wants_evidence"]

#: batches of this many sequences when neither the caller nor the model's spec says
DEFAULT_BATCH_SIZE = 8


def batch_size_for(lm: Any, batch_size: int | None = None) -> int:
    """``batch_size`` when given, else the model spec's ``max_batch_size``, else :data:`DEFAULT_BATCH_SIZE`.

    >>> batch_size_for(None), batch_size_for(None, 3)
    (8, 3)
    """
    return batch_size or getattr(getattr(lm, "spec", None), "max_batch_size", None) or DEFAULT_BATCH_SIZE


def evidence_order(items: Sequence[Any], seed: int) -> list[Any]:
    """The items in the order the per-item contamination tests take them: sorted by a seeded hash of each item's id.

    The option-order test, the other split's test and the verbatim check take the first usable items of this order,
    so they test the same items (the option-order pass then gives the other split's test its evaluated texts and the
    verbatim check its answers). Those items are a random sample of the run's, whatever order the run lists them in
    (a built-in task's seeded shuffle, or an lm-eval task's documents by id). An item keeps its place when the run has more items, so runs of one task and
    seed at different sizes test nested samples.

    >>> from types import SimpleNamespace as I
    >>> [i.id for i in evidence_order([I(id=k) for k in "abcdef"], 0)] == [i.id for i in evidence_order(
    ...     [I(id=k) for k in "fedcba"], 0)]
    True
    """
    return sorted(items, key=lambda it: evidence_key(seed, it.id))


def evidence_key(seed: int, item_id: Any) -> bytes:
    """The sort key of :func:`evidence_order`: a seeded hash of the item's id (for records that are not Items).

    >>> evidence_key(0, "a") == evidence_key(0, "a") != evidence_key(1, "a")
    True
    """
    import hashlib

    return hashlib.sha256(f"evidence:{seed}:{item_id}".encode()).digest()


def measured(path: Path, compute: Callable[[int], dict[str, Any]], lm: Any, *, batch_size: int | None = None,
             done: Callable[[], bool] | None = None, transient: Sequence[str] = ()) -> dict[str, Any]:
    """The one skeleton of every evidence artifact: skip if done → choose the batch size → run → write atomically.

    ``done`` (default: ``path`` reads back as JSON) decides whether the artifact is already there;
    then it is read back and returned, and ``compute`` is not called. Otherwise ``compute(batch_size)``
    gives the record; its ``seconds`` (the wall time of ``compute``, unless it set its own) is added
    and the record is written to ``path`` with the atomic writer. Keys named in ``transient`` are
    returned but not stored (answers one pass hands the next, whose record is elsewhere).
    """
    path = Path(path)
    if done() if done is not None else json_ok(path):
        return read_json(path)  # type: ignore[no-any-return]
    t0 = time.perf_counter()
    res = compute(batch_size_for(lm, batch_size))
    res.setdefault("seconds", time.perf_counter() - t0)
    kept = {k: res.pop(k) for k in transient if k in res}
    write_json(path, res)
    return {**res, **kept}


def wants_evidence(spec: ModelSpec, profile: Profile) -> bool:
    """Whether a model gets contamination evidence: not an untrained (``random:``) baseline,
    unless ``contamination.untrained`` asks for it.

    An untrained model cannot have seen any data, and with no knowledge of language its option
    orders and continuations are chance by construction: evidence on it would only cost time.
    """
    return spec.source_type != "random" or profile.contamination.untrained


@dataclass
class EvidenceContext:
    """What an evidence pass measures: a loaded model and, for a task-scope pass, one planned task."""

    lm: Any  # reporter.models.loading.LoadedModel
    profile: Profile
    seed: int
    directory: Path  # the model directory (model scope) or the task directory (task scope)
    plan: "TaskPlan | None" = None
    #: what one pass of this task leaves for a later one (see the module docstring)
    shared: dict[str, Any] = field(default_factory=dict)
    #: how the passes use :mod:`reporter.collect.score_cache`: ``reporter run`` sets ``use`` (``refresh`` under
    #: ``--force``); ``off`` by default, so that a direct call always computes and stores nothing
    score_cache: str = "off"
    #: per pass that used the score cache: ``cached`` or ``computed`` (recorded in ``model_work.json``)
    scores: dict[str, str] = field(default_factory=dict)

    @property
    def task(self) -> "Task":
        """The planned task (task scope only)."""
        if self.plan is None:
            raise ValueError("a model-scope evidence pass has no task")
        return self.plan.task

    @property
    def items(self) -> "Sequence[Item]":
        """The task's evaluated items, in the run's order (task scope only)."""
        if self.plan is None:
            raise ValueError("a model-scope evidence pass has no task")
        return self.plan.items


class EvidencePass:
    """Base class of evidence passes: override what applies (see the module docstring)."""

    #: the registry name
    name: ClassVar[str] = ""
    #: how failure lines name it ("model 'm', <label>: ..." or "model 'm', task 't', <label>: ...")
    label: ClassVar[str] = ""
    #: once per model or once per task
    scope: ClassVar[Literal["model", "task"]] = "task"
    #: contamination evidence: published benchmarks only, trained models only (:func:`wants_evidence`)
    contamination: ClassVar[bool] = True
    #: passes run by this number, then by registration (the built-ins: 10 reference, 20 option order,
    #: 30 verbatim, 40 other split, 50 ablation)
    order: ClassVar[int] = 100
    #: a dataclass of the pass's profile settings (``plugins.<name>`` in a profile), or None
    settings: ClassVar[type | None] = None
    #: the file a pass writes into its directory, when it is one JSON document (the default :meth:`done` reads it)
    artifact: ClassVar[str | None] = None
    #: in words, when it runs, read after "Runs:" (``reporter list`` shows it); empty: always
    switch: ClassVar[str] = ""

    def enabled(self, profile: Profile) -> bool:
        """Whether ``profile`` turns this pass on."""
        return True

    def applies(self, task: TaskConfig) -> bool:
        """Whether a task-scope pass measures ``task`` (contamination evidence: not a generated probe)."""
        return not (self.contamination and is_probe(task.name))

    def done(self, directory: Path) -> bool:
        """Whether the pass's artifacts in ``directory`` are there, whole (resume): by default, whether
        :attr:`artifact` reads back as JSON.
        """
        if self.artifact is None:
            raise NotImplementedError(f"{type(self).__name__}: an evidence pass needs an artifact or a done()")
        return json_ok(directory / self.artifact)

    def stale(self, task: TaskConfig, directory: Path, seed: int) -> str | None:
        """Why the pass's artifacts in ``directory``, though done, were measured on other inputs than ``task``'s as
        they are now (a task-scope pass of a finished task, at resume), or None (the default: nothing to check beyond
        the task's own items, which :func:`reporter.collect.plan.changed_items` checks). A stale pass is measured
        again: its artifact is removed first (:meth:`forget`).
        """
        return None

    def forget(self, directory: Path) -> None:
        """Remove the pass's artifacts from ``directory`` (a :meth:`stale` pass, before it runs again): by default
        :attr:`artifact`. A pass that says when it is stale and has no :attr:`artifact` overrides it (checked when
        it is registered).
        """
        if self.artifact is not None:
            (Path(directory) / self.artifact).unlink(missing_ok=True)

    def model_cache_key(self, profile: Profile, seed: int) -> Any:
        """For a model-scope pass whose result depends on nothing but the model: the settings it depends on
        (plain JSON data, with a version to bump when its code changes), so that it is computed once per model
        and reused across runs (:mod:`reporter.collect.model_cache`). None (the default): always computed.
        """
        return None

    def prepare(self, ctx: EvidenceContext) -> None:
        """Before any pass of the task runs: leave in ``ctx.shared`` what an earlier pass could compute on its way."""

    def run(self, ctx: EvidenceContext) -> None:
        """Measure and write the artifacts into ``ctx.directory`` (through :func:`measured`)."""
        raise NotImplementedError


def _check_pass(cls: type[EvidencePass]) -> None:
    """Refuse, when it is registered or loaded, a pass the job could not drive."""
    if cls.scope not in ("model", "task"):
        raise ValueError(f"{cls.__name__}.scope must be 'model' or 'task', got {cls.scope!r}")
    if cls.artifact is None and cls.done is EvidencePass.done:
        raise ValueError(f"{cls.__name__}: an evidence pass names its artifact or says when it is done (done())")
    if cls.run is EvidencePass.run:
        raise ValueError(f"{cls.__name__}: an evidence pass needs a run()")
    if cls.artifact is None and cls.stale is not EvidencePass.stale and cls.forget is EvidencePass.forget:
        raise ValueError(f"{cls.__name__}: an evidence pass that says when it is stale() and names no artifact "
                         "says how to forget() it")


_CLASSES: ClassPlugins[EvidencePass] = ClassPlugins(EvidencePass, "evidence pass", _check_pass)

#: evidence passes by name (installed ones, entry-point group ``reporter.evidence``, after the built-in ones);
#: they run by :attr:`EvidencePass.order`
EVIDENCE: Registry[EvidencePass] = Registry("evidence pass", entry_point_group="reporter.evidence",
                                            load=_CLASSES.load)

P = TypeVar("P", bound=type[EvidencePass])


def register_evidence(cls: P) -> P:
    """Class decorator: register one instance of an :class:`EvidencePass` subclass under ``cls.name``."""
    return _CLASSES.register(EVIDENCE, cls)  # type: ignore[no-any-return]


def evidence_passes(profile: Profile, spec: ModelSpec, scope: str,
                    task: TaskConfig | None = None) -> list[EvidencePass]:
    """The passes of ``scope`` that ``profile`` turns on for the model ``spec`` (and ``task``), in run order."""
    evidence = wants_evidence(spec, profile)
    passes = [p for _, p in EVIDENCE.items()
              if p.scope == scope and p.enabled(profile) and (evidence or not p.contamination)
              and (task is None or p.applies(task))]
    return sorted(passes, key=lambda p: p.order)  # stable: registration order within one number
