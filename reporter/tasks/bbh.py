"""BIG-Bench Hard (27 subtasks): hub only, no offline copy.

>>> from reporter.tasks import get_task
>>> get_task("bbh").hub.path
'lukaemon/bbh'
"""
from __future__ import annotations

from ..errors import UserError
from .base import HubDataset, Item, Task, register_task

BBH = HubDataset("BIG-Bench Hard", "lukaemon/bbh")

BBH_SUBTASKS = (
    "boolean_expressions causal_judgement date_understanding disambiguation_qa dyck_languages "
    "formal_fallacies geometric_shapes hyperbaton logical_deduction_five_objects "
    "logical_deduction_seven_objects logical_deduction_three_objects movie_recommendation "
    "multistep_arithmetic_two navigate object_counting penguins_in_a_table "
    "reasoning_about_colored_objects ruin_names salient_translation_error_detection snarks "
    "sports_understanding temporal_sequences tracking_shuffled_objects_five_objects "
    "tracking_shuffled_objects_seven_objects tracking_shuffled_objects_three_objects web_of_lies "
    "word_sorting"
).split()


@register_task("bbh")
def bbh() -> Task:
    """BIG-Bench Hard, exact-match scoring of the final answer."""

    def load() -> list[Item]:
        from datasets import load_dataset

        out = []
        try:
            for sub in BBH_SUBTASKS:
                for i, r in enumerate(load_dataset(BBH.path, sub, split="test")):
                    out.append(Item(id=f"bbh-{sub}-{i}", question=r["input"], answer=r["target"]))
        except Exception as e:
            raise UserError("bbh: BIG-Bench Hard has no offline copy and the Hugging Face hub cannot be reached "
                            f"({type(e).__name__}); run where the hub is reachable, or drop bbh from the profile"
                            ) from None
        return out

    return Task(name="bbh", scorer="exact", load=load, max_new_tokens=256,
                instruction="Answer the question. Think step by step, then finish with 'So the answer is X.'",
                answer_prefix="A:", base_stop=("\n\nQ:",), description="BIG-Bench Hard, 27 subtasks (hub only)",
                source="hub: lukaemon/bbh", hub=BBH, split="test")
