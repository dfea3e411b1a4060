"""Prompt construction: chat template for instruct models, plain few-shot text for base models.

>>> t = Task("t", "choice", "Pick one.", "Answer:", load=list)
>>> print(plain_prompt(t, Item("1", "Q?\\nA. x\\nB. y", "B"), [Item("0", "R?\\nA. u\\nB. v", "A")]))
R?
A. u
B. v
Answer: A
<BLANKLINE>
Q?
A. x
B. y
Answer:
"""
from __future__ import annotations

from typing import Any

from .base import Item, Task


def demo_text(item: Item) -> str:
    """What a few-shot example shows as its answer."""
    return item.demo_answer if item.demo_answer is not None else item.answer


def plain_prompt(task: Task, item: Item, shots: list[Item]) -> str:
    """Few-shot text prompt for a base model (or an instruct model with ``chat_template: none``)."""
    if task.answer_prefix == "":  # code completion: the question is itself the start of the answer
        demos = [f"{s.question}{demo_text(s)}" for s in shots]
        return "\n\n".join(demos + [item.question])
    demos = [f"{s.question}\n{task.answer_prefix} {demo_text(s)}" for s in shots]
    return "\n\n".join(demos + [f"{item.question}\n{task.answer_prefix}"])


def chat_messages(task: Task, item: Item, shots: list[Item]) -> list[dict[str, str]]:
    """Chat messages: each few-shot example as a user/assistant exchange, then the question."""

    def user(i: Item) -> dict[str, str]:
        return {"role": "user", "content": f"{task.instruction}\n\n{i.question}".strip()}

    msgs: list[dict[str, str]] = []
    for s in shots:
        msgs += [user(s), {"role": "assistant", "content": demo_text(s)}]
    return msgs + [user(item)]


def build_prompt(lm: Any, task: Task, item: Item, shots: list[Item]) -> str:
    """The prompt text for ``item``; chat-formatted when the model uses its chat template."""
    if lm.use_chat_template:
        return lm.tokenizer.apply_chat_template(chat_messages(task, item, shots), tokenize=False,
                                                add_generation_prompt=True)
    return plain_prompt(task, item, shots)


def encode_prompt(lm: Any, prompt: str) -> list[int]:
    """Token ids of a prompt.

    Plain prompts follow the tokenizer's own special-token convention (BOS where it adds one);
    a chat-template prompt already carries whatever special tokens the template writes, so
    none are added again.
    """
    return lm.tokenizer(prompt, add_special_tokens=not lm.use_chat_template)["input_ids"]
