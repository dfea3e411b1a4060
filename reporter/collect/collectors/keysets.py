"""The shared plumbing of plugins that store one set of unit ids per item (key neurons, key SAE features).

A subclass names its ``artifact`` (``neurons.npz``, ``features.npz``) and its ``_meta``; each
batch's sets go to a part file, and :meth:`KeySetPlugin.merged_sets` merges the parts into the
artifact once the task is done and returns the sets in item order.
"""
from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...store.neurons import load_neuron_sets, merge_neuron_sets, save_neuron_sets
from ...store.ragged import ragged_ok
from .base import BatchContext, CollectorPlugin, OptionPasses, TaskContext

__all__ = ["KeySetPlugin"]


class KeySetPlugin(CollectorPlugin):
    """A collector plugin whose collector's ``results()`` are one int64 id array per item."""

    #: the task artifact the merged sets are written to
    artifact: ClassVar[str] = ""

    @abstractmethod
    def _meta(self, task: TaskContext) -> dict[str, Any]:
        """What makes two files of sets comparable (checked when parts are merged)."""

    def save_batch(self, collector: Any, batch: BatchContext) -> None:
        """The batch's sets, with the settings that make them comparable."""
        save_neuron_sets(batch.task.part_path(self.name, batch.index), batch.item_ids, collector.results(),
                         self._meta(batch.task))

    def rides_options(self, task: TaskContext) -> bool:
        """Yes: an option's pass holds every position a teacher-forced pass over context + option scores (those
        predicting the option's tokens, and the option's own tokens for MUI's ``mui-eval`` definition).
        """
        return True

    def for_options(self, batch: BatchContext) -> Any:
        """The teacher-forced collector (:meth:`for_batch`): each option's pass is one of its samples."""
        return self.for_batch(batch)

    def save_options(self, collector: Any, batch: BatchContext, passes: OptionPasses) -> None:
        """The sets of each item's answer, of those the collector found for every option."""
        sets = collector.results()
        save_neuron_sets(batch.task.part_path(self.name, batch.index), batch.item_ids,
                         [sets[p] for p in passes.picks], self._meta(batch.task))

    def batch_done(self, task: TaskContext, batch: int) -> bool:
        """Whether the batch's part exists."""
        return task.part_path(self.name, batch).is_file()

    def merged_sets(self, task: TaskContext) -> list[np.ndarray]:
        """Merge the parts into the artifact; the sets in the order of the task's items."""
        path = task.task_dir / self.artifact
        merge_neuron_sets(path, task.parts(self.name))
        ids, sets, _ = load_neuron_sets(path)
        by_id = dict(zip(ids, sets))
        return [by_id[it.id] for it in task.plan.items]

    def task_done(self, task_dir: Path, n_items: int) -> bool:
        """Whether the artifact reads back whole with one set per item."""
        return ragged_ok(task_dir / self.artifact, n_items)
