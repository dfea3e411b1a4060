"""Replies that measure the generation settings more than the model: :func:`response_checks`.

A task's score is only the model's where its replies had room to answer. Two cases, read from each finished task's
``samples.jsonl`` (its generated replies: ``stopped_by`` ``eos``, ``stop`` or ``length``; lm-eval's log-likelihood
requests are no replies), are stated on the card:

* **empty**: at least half of the replies hold no text and were scored as such. The model ended its reply at once
  (its first tokens were the end of text, or matched the task's stop sequence, a newline for base models), so the
  score is of an empty reply, whatever the model knows. A reply that ran to the token limit is not empty but cut
  (its tokens decode to whitespace); a multiple-choice reply whose answer was read from the option log-probs
  (``answer_source: logprob``) was scored by the model's preference, not as empty.
* **cut**: at least half of the replies stopped at the task's new-token limit *and* scored 0, on a task whose scorer
  reads the answer from the end of the reply or the whole of it (:data:`ANSWER_LAST`: the final number, the last
  boxed expression, the program). A reply cut before its answer scores 0 whatever the model knows; a longer limit
  tells. On an lm-eval ``generate_until`` task, where lm-eval's filters read the answer, a cut reply counts where
  its filter found no answer in it (the record's ``unread``: its ``extracted`` is the fallback the task's filters are
  built with, ``[invalid]`` unless its YAML sets another, or empty): at least half of the replies so, and the limit
  is again what decided them. Other scorers read the first
  words (multiple-choice letters, yes/no, short answers, the probes' formats), or are a plugin's that did not say
  it reads the answer last (``register_scorer(name, answer_last=True)``, recorded as the summary's
  ``answer_last``), whose reading is not known here: not checked, rather than told wrongly.

Untrained reference models are not checked: an empty or endless reply is what they are there to show.

>>> sorted(ANSWER_LAST)
['code', 'math', 'numeric']
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

from ..schema import is_untrained
from ..store.layout import SAMPLES, RunDir
from ..store.samples import holds_task, read_samples

__all__ = ["ANSWER_LAST", "RESPONSE_RULE", "ResponseCheck", "check_replies", "response_checks"]

#: reporter's scorers that read the answer from the end of the reply or the whole of it: a reply cut at the token
#: limit may have been cut before its answer (a plugin's scorer that does says so when it registers, and its task's
#: summary records ``answer_last``)
ANSWER_LAST = frozenset({"numeric", "math", "code"})
#: what lm-eval's filters give for a reply in which they found no answer, for a run made before each record said so
#: (``unread``, from the task's own filters): the regex filter's default fallback, or nothing
NO_ANSWER = frozenset({"[invalid]", ""})
#: the stop reasons of generated replies (:class:`reporter.models.outputs.Generation`)
_REPLIES = ("eos", "stop", "length")

RESPONSE_RULE = ("A trained model's task is flagged 'empty' when at least half of its generated replies hold no text "
                 "and were scored as such (ended at once, not cut at the limit, no answer read from the option "
                 "log-probs), and 'cut' when at least half of them stopped at the task's new-token limit and scored "
                 "0, on a task whose scorer reads the answer from the end of the reply or the whole of it (numeric, "
                 "math, code), or, on an lm-eval generate_until task, in which lm-eval's filter found no answer; the "
                 "score then measures the reply's room, not the model.")


class ResponseCheck(TypedDict):
    """One model's replies to one task that measure the settings (:func:`response_checks`)."""

    model: str
    task: str
    kind: Literal["empty", "cut"]
    n: int  # the generated replies
    empty: int  # replies with no text (whitespace only) that ended at once and were scored as empty
    empty_stopped: dict[str, int]  # those by stop reason ("eos", "stop")
    cut: int  # replies that stopped at the new-token limit
    cut_wrong: int  # of those, the ones that scored 0
    cut_unread: NotRequired[int]  # lm-eval generate_until tasks: of those, the ones its filter found no answer in
    limit: NotRequired[int]  # the new-token limit the cut replies reached (their length); absent where none was cut
    stopped: dict[str, int]  # replies by stop reason


def check_replies(records: list[dict[str, Any]], scorer: str | None,
                  answer_last: bool = False) -> dict[str, Any] | None:
    """The counts of one task's records and the check they fail (``kind``), or None when they pass (or hold no
    generated reply).

    >>> rec = lambda text, why, score=0.0, n=3: {"response": text, "stopped_by": why, "score": score,
    ...                                          "response_tokens": n}
    >>> check_replies([rec("", "stop", n=0)] * 3 + [rec("42", "eos", 1.0)], "numeric")["kind"]
    'empty'
    >>> check_replies([rec("Let x", "length", n=96)] * 2 + [rec("5", "eos", 1.0)], "numeric")["limit"]
    96
    >>> check_replies([rec("A. ok", "length", n=4)] * 3, "choice") is None  # its answer came first
    True
    >>> check_replies([{**rec("Tom has 3", "length", n=8), "extracted": "[invalid]"}] * 2, "lm_eval")["cut_unread"]
    2
    """
    replies = [r for r in records if r.get("stopped_by") in _REPLIES]
    if not replies:
        return None
    n = len(replies)
    empty = [r for r in replies if not str(r.get("response") or "").strip() and r["stopped_by"] != "length"
             and r.get("answer_source") != "logprob"]
    cut = [r for r in replies if r["stopped_by"] == "length"]
    cut_wrong = sum(float(r.get("score") or 0.0) == 0.0 for r in cut)
    lengths = [r["response_tokens"] for r in cut if isinstance(r.get("response_tokens"), int)]
    counts = {"n": n, "empty": len(empty), "empty_stopped": _by_reason(empty), "cut": len(cut),
              "cut_wrong": cut_wrong, "stopped": _by_reason(replies), **({"limit": max(lengths)} if lengths else {})}
    if scorer == "lm_eval":  # lm-eval's filters read the answer: a cut reply they found none in
        counts["cut_unread"] = sum(float(r.get("score") or 0.0) == 0.0 and _unread(r) for r in cut)
    if 2 * len(empty) >= n:
        return {"kind": "empty", **counts}
    reads_last = (scorer in ANSWER_LAST or answer_last) and 2 * cut_wrong >= n
    if reads_last or (scorer == "lm_eval" and 2 * counts["cut_unread"] >= n):
        return {"kind": "cut", **counts}
    return None


def _unread(record: dict[str, Any]) -> bool:
    """Whether lm-eval's filter found no answer in a reply: the record's ``unread``, which the collect stage wrote
    from the filter's own fallback; in a run made before it was recorded, an ``extracted`` value in
    :data:`NO_ANSWER`.
    """
    if isinstance(unread := record.get("unread"), bool):
        return unread
    return isinstance(record.get("extracted"), str) and record["extracted"].strip() in NO_ANSWER


def _by_reason(replies: list[dict[str, Any]]) -> dict[str, int]:
    return dict(Counter(r["stopped_by"] for r in replies))


def response_checks(results: dict[str, Any], run_dir: str | Path) -> list[ResponseCheck]:
    """Every trained model's finished task whose replies fail a check (module docstring), in the models' and tasks'
    order; a task whose samples.jsonl does not hold its items is left to the analysis's note about it.

    >>> response_checks({"models": {}}, ".")
    []
    """
    rd = RunDir(run_dir)
    out: list[ResponseCheck] = []
    for name, e in (results.get("models") or {}).items():
        if is_untrained(e) or e.get("status") == "failed":
            continue
        for task, summary in (e.get("tasks") or {}).items():
            records = list(read_samples(rd.task_dir(e.get("slug", name), task) / SAMPLES).values())
            if not records or not holds_task(len(records), (summary or {}).get("n")):
                continue
            found = check_replies(records, (summary or {}).get("scorer"), (summary or {}).get("answer_last") is True)
            if found is not None:
                out.append({"model": name, "task": task, **found})  # type: ignore[typeddict-item]
    return out
