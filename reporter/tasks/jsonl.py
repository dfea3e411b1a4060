"""A user's own data: a JSON-lines file with a question, an answer and (optionally) options per line.

>>> import json, tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "faq.jsonl"
>>> _ = p.write_text(json.dumps({"q": "2+2?", "a": "4"}) + "\\n")
>>> t = jsonl_task("faq", str(p), "q", "a", "numeric"); t.items()[0].answer
'4'
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import UserError
from .base import LETTERS, MC_INSTRUCTION, Item, Task, mc_question

#: the scorers a jsonl task may name
JSONL_SCORERS = ("exact", "numeric", "choice", "f1", "code")


def jsonl_task(name: str, path: str, prompt_field: str, answer_field: str, scorer: str,
               choices_field: str | None = None, max_new_tokens: int = 64, instruction: str = "") -> Task:
    """A task over a user's own JSON-lines file."""
    p = Path(path).expanduser()

    def load() -> list[Item]:
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
                    raise UserError(f"{p}: line {ln}: not valid JSON ({e.msg})") from None
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
