"""Tasks: items, prompts and settings of every benchmark and probe, registered by name.

Importing this package registers every built-in task (one module per family) and the probe
scorers. Nothing here imports torch.

>>> sorted(TASKS)[:3]
['ar', 'arc_challenge', 'arc_easy']
"""
from . import bbh, code, math_problems, multiple_choice, probes  # noqa: F401  (register the built-in tasks)
from .base import (
                   DEFAULT_SHOTS,
                   LETTERS,
                   TASKS,
                   HubDataset,
                   Item,
                   Task,
                   content_sha256,
                   get_task,
                   is_probe,
                   items_sha256,
                   mc_question,
                   pick_shots,
                   register_task,
                   select_items,
)
from .jsonl import JSONL_SCORERS, jsonl_task

__all__ = ["DEFAULT_SHOTS", "LETTERS", "TASKS", "HubDataset", "Item", "Task", "content_sha256", "get_task", "is_probe",
           "items_sha256", "mc_question",
           "pick_shots", "register_task", "select_items", "JSONL_SCORERS", "jsonl_task"]
