"""Collector plugins: measurements that ride the collect stage, registered by name.

A plugin is a subclass of :class:`CollectorPlugin` registered with :func:`register_collector`.
It says whether a profile enables it and takes part in two scopes, each optional:

* **task scope** (every batch of every task): :meth:`~CollectorPlugin.for_batch` builds a
  :class:`~reporter.instrument.hooked_pass.Collector` that rides the batch's one teacher-forced
  hooked pass; :meth:`~CollectorPlugin.save_batch` writes its per-batch artifact (or annotates
  the batch's sample records); :meth:`~CollectorPlugin.finish_task` merges the batches and
  returns summary fields, which land in ``summary.json`` and so in ``results.json``;
  :meth:`~CollectorPlugin.batch_done` / :meth:`~CollectorPlugin.task_done` answer "am I done"
  for resume.
* **the option passes of a log-likelihood task** (lm-eval's ``multiple_choice`` and ``loglikelihood``):
  when every plugin :meth:`~CollectorPlugin.rides_options`, there is no teacher-forced pass; the
  collector of :meth:`~CollectorPlugin.for_options` rides the passes that score the options (each
  option one sample) and :meth:`~CollectorPlugin.save_options` keeps the model's answer's, with the
  token log-probs those passes give (:class:`OptionPasses`).
* **model scope** (once per model, on inputs of its own such as a corpus):
  :meth:`~CollectorPlugin.run_model` writes its artifacts into the model directory, and
  :meth:`~CollectorPlugin.model_done` answers for resume. A ``<name>.json`` it writes there
  becomes the key ``<name>`` of the model's results.json entry.

The task runner, the resume logic and results assembly need no edit for a new plugin: they
loop over :data:`COLLECTORS`, and results assembly reads what the plugins wrote.

>>> [c for c in COLLECTORS]
['mui', 'logprobs', 'calibration', 'lpp', 'sae']
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ...config import Profile, TaskConfig
from ...instrument.decode import StepCollector
from ...instrument.hooked_pass import Collector
from ...models.generation import Generation
from ...registry import ClassPlugins, Registry
from ...store.layout import PARTS

if TYPE_CHECKING:  # pragma: no cover
    from ..plan import TaskPlan


@dataclass
class TaskContext:
    """One task of one model, as the plugins see it."""

    lm: Any  # reporter.models.loading.LoadedModel
    profile: Profile
    config: TaskConfig
    plan: "TaskPlan"
    task_dir: Path
    seed: int

    @property
    def parts_dir(self) -> Path:
        """Where per-batch artifacts live while the task runs (deleted when it finishes)."""
        return self.task_dir / PARTS

    def part_path(self, plugin: str, batch: int, suffix: str = ".npz") -> Path:
        """The per-batch artifact of ``plugin`` for batch number ``batch``."""
        return self.parts_dir / f"{plugin}-{batch:05d}{suffix}"

    def parts(self, plugin: str, suffix: str = ".npz") -> list[Path]:
        """Every per-batch artifact of ``plugin``, in batch order."""
        return sorted(self.parts_dir.glob(f"{plugin}-*{suffix}"))


@dataclass
class BatchContext:
    """One batch of a task: its items, their generations and their sample records."""

    task: TaskContext
    index: int  # batch number within the task
    positions: list[int]  # indices into task.plan.items
    generations: list[Generation]
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def items(self) -> list[Any]:
        """The batch's items, in batch order."""
        return [self.task.plan.items[i] for i in self.positions]

    @property
    def item_ids(self) -> list[str]:
        """The batch's item ids, in batch order."""
        return [it.id for it in self.items]


@dataclass
class OptionPasses:
    """What the option passes of one log-likelihood batch give the plugins (:meth:`CollectorPlugin.save_options`).

    ``picks[k]``: for item k of the batch (batch order), the index of its answer (the option the model
    ranks first) among the samples the option collectors saw (empty when no plugin's collector rode); ``prompt_logprobs[k]`` /
    ``answer_logprobs[k]``: the token log-probs of its prompt (after the first token, NaN before its
    question; None when no plugin asked for them) and of its answer.
    """

    picks: list[int]
    answer_logprobs: list[Any]
    prompt_logprobs: list[Any] | None = None


class CollectorPlugin:
    """Base class of collector plugins: override what applies (see the module docstring)."""

    #: the registry name (also the prefix of its per-batch artifacts)
    name: ClassVar[str] = ""
    #: how failures and progress name it
    label: ClassVar[str] = ""
    #: the dataclass of this plugin's profile settings (``plugins.<name>:`` in a profile; every field with a
    #: default), read with ``profile.plugin_settings(name)``; None: it takes none
    settings: ClassVar[type | None] = None
    #: in words, when it runs, read after "Runs:" (``reporter list`` shows it); empty: always
    switch: ClassVar[str] = ""

    def enabled(self, profile: Profile) -> bool:
        """Whether ``profile`` turns this collector on."""
        return True

    def check_model(self, lm: Any, profile: Profile) -> None:
        """Raise a one-line :class:`~reporter.errors.UserError` when this plugin cannot measure the loaded model."""

    # -- task scope
    def for_batch(self, batch: BatchContext) -> Collector | None:
        """The collector riding this batch's teacher-forced pass, or None when it needs none."""
        return None

    def fusable(self, profile: Profile) -> bool:
        """Whether this plugin's task-scope measurement can ride the generation's own passes
        (:meth:`for_generation`); a plugin without one (no :meth:`for_batch`) trivially can.
        """
        return type(self).for_batch is CollectorPlugin.for_batch

    def for_generation(self, batch: BatchContext) -> StepCollector | None:
        """The step collector riding this batch's generation (``batch.generations`` is still empty),
        or None when it needs none. Called only when :meth:`fusable`; its results must match what
        :meth:`for_batch`'s collector gives, since :meth:`save_batch` reads either.
        """
        return None

    def rides_options(self, task: TaskContext) -> bool:
        """Whether this plugin's task-scope measurement can come from the option passes of a log-likelihood task
        (:meth:`for_options`, :meth:`save_options`) instead of a teacher-forced pass over context + answer; a
        plugin without one (no :meth:`for_batch`) trivially can.
        """
        return type(self).for_batch is CollectorPlugin.for_batch

    def prompt_logprobs_from(self, batch: BatchContext) -> list[int] | None:
        """Per item of the batch, the first prompt token whose log-prob :meth:`save_options` needs (the option passes
        then run the LM head on the context from there on); None (the default): none.
        """
        return None

    def for_options(self, batch: BatchContext) -> Collector | None:
        """The collector riding the option passes of this batch, each option one sample whose response is the
        option's tokens (hooks only: its ``after_forward`` does not get [B, T, V] logits); None: it needs none.
        Called only when :meth:`rides_options`.
        """
        return None

    def save_options(self, collector: Collector | None, batch: BatchContext, passes: OptionPasses) -> None:
        """:meth:`save_batch` after the option passes: keep each item's answer (``passes.picks``) of what
        ``collector`` saw. The default saves the batch as it is (for plugins without a task-scope collector).
        """
        self.save_batch(collector, batch)

    def save_batch(self, collector: Collector | None, batch: BatchContext) -> None:
        """Write the batch's artifact (or annotate ``batch.records``) after the pass."""

    def batch_done(self, task: TaskContext, batch: int) -> bool:
        """Whether batch ``batch``'s artifact exists (a missing one makes the batch run again)."""
        return True

    def finish_task(self, task: TaskContext, samples: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Merge the batches' artifacts; return the fields this plugin adds to ``summary.json``."""
        return {}

    def task_done(self, task_dir: Path, n_items: int) -> bool:
        """Whether the task's final artifact of this plugin exists, whole, for ``n_items`` items."""
        return True

    # -- model scope
    def run_model(self, lm: Any, profile: Profile, model_dir: Path) -> None:
        """Measure once per model and write the artifacts into ``model_dir``."""

    def model_done(self, profile: Profile, model_dir: Path) -> bool:
        """Whether :meth:`run_model`'s artifacts exist."""
        return True

    def model_cache_key(self, profile: Profile) -> Any:
        """The settings :meth:`run_model`'s result depends on besides the model (plain JSON data, with a version
        to bump when the code changes), so that it is computed once per model and reused across runs
        (:mod:`reporter.collect.model_cache`). None (the default): always computed.
        """
        return None


_CLASSES: ClassPlugins[CollectorPlugin] = ClassPlugins(CollectorPlugin, "collector")

#: collector plugins by name, in the order they run (installed ones, entry-point group ``reporter.collectors``,
#: after the built-in ones)
COLLECTORS: Registry[CollectorPlugin] = Registry("collector", entry_point_group="reporter.collectors",
                                                 load=_CLASSES.load)

P = TypeVar("P", bound=type[CollectorPlugin])


def register_collector(cls: P) -> P:
    """Class decorator: register one instance of a :class:`CollectorPlugin` subclass under ``cls.name``."""
    return _CLASSES.register(COLLECTORS, cls)  # type: ignore[no-any-return]


def enabled_collectors(profile: Profile) -> list[CollectorPlugin]:
    """The plugins ``profile`` turns on, in registry order."""
    return [p for _, p in COLLECTORS.items() if p.enabled(profile)]
