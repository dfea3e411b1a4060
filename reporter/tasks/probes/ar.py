"""AR, Ambiguous Reasoning: an LPP synthetic probe (arXiv 2605.30018), run as a task.

Every item is genuinely ambiguous between two readings; the model replies
``ambiguous_status=AMBIGUOUS|NOT_AMBIGUOUS; answer=A|B``; the score is whether it flagged the
ambiguity (scorer ``ar``); :func:`ar_metrics` gives flag accuracy, answer accuracy, format
validity and overconfidence (share called NOT_AMBIGUOUS), stored as the task summary's ``ar``.
Items are generated deterministically from a seed.

>>> len(ar().items())
112
"""
from __future__ import annotations

import itertools
import random
import re
from typing import Any, Iterator, Sequence

from ...scoring import register_scorer
from ..base import Item, Task, register_task

AR_SEED = "lpp-ar-v1"
AR_FORMAT = "ambiguous_status=<AMBIGUOUS or NOT_AMBIGUOUS>; answer=<A or B>"
AR_ASK = ("Decide whether the question is ambiguous, and pick the better option anyway. Reply on one line in "
          f"exactly this format:\n{AR_FORMAT}")

_WOMEN = ["Alice", "Maria", "Sarah", "Emma", "Julia", "Nora", "Priya", "Grace"]
_MEN = ["David", "James", "Omar", "Lucas", "Daniel", "Kenji", "Peter", "Samuel"]

# Each template: the generator of (sentence, question, preferred option, other option), and the
# principle that makes the preferred reading the defensible "best" answer.
AR_TEMPLATES: dict[str, str] = {
    "pronoun": "subject / first-mention antecedent preference for an ambiguous pronoun "
               "(Crawley, Stevenson & Kleinman 1990; Gernsbacher & Hargreaves 1988)",
    "pp_attachment": "instrument (verb-attachment) reading of 'V the N with the X' — minimal attachment "
                     "(Frazier 1978), the textbook reading of 'saw the man with the telescope'",
    "relative_clause": "low attachment of 'the N1 of the N2 who ...' to N2, the preference of English "
                       "readers (Cuetos & Mitchell 1988; Carreiras & Clifton 1999)",
    "quantifier_scope": "surface scope of 'Every N V-ed a M' (one M per N), the default reading "
                        "(Ioup 1975; Kurtzman & MacDonald 1993)",
    "negation_scope": "surface (isomorphic) scope of 'All the N did not V' = none of them, the same "
                      "surface-scope rule (Musolino, Crain & Thornton 2000)",
    "adjective_scope": "wide scope of an adjective over two conjoined, similar nouns ('old chairs and "
                       "tables' = both old), the parallel reading (Frazier, Munn & Clifton 2000)",
    "moved_forward": "'moved forward' = to an earlier time, the dictionary sense of 'bring/move "
                     "forward' (e.g. Cambridge, Oxford); the phrase is famously split in practice "
                     "(McGlone & Harding 1998; Boroditsky 2000)",
}
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _ar_pronoun() -> Iterator[tuple[str, str, str, str]]:
    frames = ["{a} told {b} that {p} {pred}.", "{a} called {b} to say that {p} {pred}.",
              "{a} texted {b} that {p} {pred}.", "{a} mentioned to {b} that {p} {pred}."]
    preds = [("had been promoted", "Who had been promoted?"),
             ("would be late for the meeting", "Who would be late for the meeting?"),
             ("had won the raffle", "Who had won the raffle?"),
             ("needed a vacation", "Who needed a vacation?"),
             ("was moving to Chicago", "Who was moving to Chicago?")]
    for names, p in ((_WOMEN, "she"), (_MEN, "he")):
        for (a, b), f, (pred, q) in itertools.product(itertools.permutations(names, 2), frames, preds):
            yield f.format(a=a, b=b, p=p, pred=pred), q, a, b


def _ar_pp() -> Iterator[tuple[str, str, str, str]]:
    pairs = [("saw", "telescope"), ("watched", "binoculars"), ("photographed", "camera"), ("hit", "umbrella"),
             ("poked", "stick"), ("spotted", "binoculars"), ("filmed", "phone"), ("tapped", "cane")]
    people = ["man", "woman", "stranger", "tourist", "officer", "boy", "girl", "neighbor"]
    for name, (verb, x), person in itertools.product(_WOMEN + _MEN, pairs, people):
        yield f"{name} {verb} the {person} with the {x}.", f"Who had the {x}?", name, f"the {person}"


def _ar_relative() -> Iterator[tuple[str, str, str, str]]:
    pairs = [("servant", "actress"), ("secretary", "senator"), ("assistant", "professor"),
             ("driver", "ambassador"), ("bodyguard", "singer"), ("lawyer", "athlete"), ("agent", "author"),
             ("sister", "doctor"), ("daughter", "colonel"), ("manager", "musician")]
    verbs = ["photographed", "interviewed", "greeted", "recognized", "waved at"]
    states = ["on the balcony", "standing by the window", "in the lobby", "at the back of the room"]
    for (n1, n2), v, s in itertools.product(pairs, verbs, states):
        yield (f"Someone {v} the {n1} of the {n2} who was {s}.", f"Who was {s}?", f"the {n2}", f"the {n1}")


def _ar_quant() -> Iterator[tuple[str, str, str, str]]:
    rows = [("student", "read", "book", "books", "read"), ("tourist", "visited", "museum", "museums", "visited"),
            ("critic", "praised", "film", "films", "praised"), ("child", "petted", "dog", "dogs", "petted"),
            ("guest", "admired", "painting", "paintings", "admired"),
            ("reviewer", "recommended", "restaurant", "restaurants", "recommended"),
            ("hiker", "climbed", "mountain", "mountains", "climbed"),
            ("employee", "used", "laptop", "laptops", "used")]
    for (n, v, m, ms, vp), when in itertools.product(rows, ["", " last week", " yesterday", " this year"]):
        yield (f"Every {n} {v} a {m}{when}.", f"How many {ms} are involved?",
               f"Possibly several: each {n} may have {vp} a different {m}.",
               f"Exactly one: the same {m} for every {n}.")


def _ar_neg() -> Iterator[tuple[str, str, str, str]]:
    rows = [("students", "pass the exam", "passed the exam"), ("guests", "stay for dinner", "stayed for dinner"),
            ("trains", "arrive on time", "arrived on time"), ("lights", "turn off", "turned off"),
            ("players", "attend practice", "attended practice"), ("windows", "break", "broke"),
            ("emails", "reach the client", "reached the client"), ("plants", "survive the frost", "survived the frost")]
    for n, base, past in rows:
        neg = f"did not {base}"
        for ctx in ["", "Yesterday, ", "In the end, ", "This time, "]:
            first = "all" if ctx else "All"
            yield (f"{ctx}{first} the {n} {neg}.", f"How many of the {n} {past}?",
                   f"None of them {past}.", f"Some of them {past}, but not all.")


def _ar_adj() -> Iterator[tuple[str, str, str, str]]:
    rows = [("shop", "old", "chairs", "tables"), ("market", "fresh", "apples", "pears"),
            ("store", "cheap", "shirts", "trousers"), ("bakery", "warm", "rolls", "muffins"),
            ("library", "rare", "books", "maps"), ("gallery", "small", "paintings", "drawings"),
            ("garage", "used", "cars", "vans"), ("florist", "red", "roses", "tulips")]
    for (place, adj, n1, n2), verb in itertools.product(rows, ["sells", "offers"]):
        yield (f"The {place} {verb} {adj} {n1} and {n2}.", f"Which items are {adj}?",
               f"Both the {n1} and the {n2}.", f"Only the {n1}.")


def _ar_forward() -> Iterator[tuple[str, str, str, str]]:
    events = ["team meeting", "dentist appointment", "exam", "concert", "job interview", "budget review"]
    for ev, (di, day), k in itertools.product(events, enumerate(_DAYS[1:6], 1), [1, 2]):
        unit = "day" if k == 1 else "days"
        yield (f"The {ev} originally scheduled for {day} has been moved forward {k} {unit}.",
               f"On which day is the {ev} now?", _DAYS[(di - k) % 7], _DAYS[(di + k) % 7])


_AR_GEN = {"pronoun": _ar_pronoun, "pp_attachment": _ar_pp, "relative_clause": _ar_relative,
           "quantifier_scope": _ar_quant, "negation_scope": _ar_neg, "adjective_scope": _ar_adj,
           "moved_forward": _ar_forward}


def _ar_item(iid: str, template: str, sentence: str, question: str, preferred: str, other: str,
             rng: random.Random) -> Item:
    gold = "A" if rng.random() < 0.5 else "B"
    a, b = (preferred, other) if gold == "A" else (other, preferred)
    text = f"{sentence}\nQuestion: {question}\nA. {a}\nB. {b}\n\n{AR_ASK}"
    return Item(id=iid, question=text, answer=f"ambiguous_status=AMBIGUOUS; answer={gold}",
                meta={"gold_flag": "AMBIGUOUS", "gold_answer": gold, "template": template,
                      "gold_rule": AR_TEMPLATES[template]})


def ar_items(n_per_template: int = 16, seed: str = AR_SEED) -> list[Item]:
    """``n_per_template`` items from each of the seven templates (default 112), deterministic.

    Every item is genuinely ambiguous between two readings, so the gold flag is always
    AMBIGUOUS. The gold answer is the reading a documented default-interpretation principle
    prefers (``AR_TEMPLATES[template]``, also in ``meta["gold_rule"]``); which letter it gets
    is a seeded coin flip, so A and B are both gold about half the time.

    >>> it = ar_items(1)[0]
    >>> it.meta["template"], it.answer
    ('pronoun', 'ambiguous_status=AMBIGUOUS; answer=B')
    """
    out = []
    for t in AR_TEMPLATES:
        rng = random.Random(f"{seed}:{t}")
        cands = list(_AR_GEN[t]())
        if len(cands) < n_per_template:
            raise ValueError(f"AR template {t!r} has only {len(cands)} distinct items")
        for i, c in enumerate(rng.sample(cands, n_per_template)):
            out.append(_ar_item(f"ar-{t}-{i:03d}", t, *c, rng))
    return out


def _ar_pool() -> list[Item]:
    """Format demonstrations for few-shot runs: one clear-cut item and one ambiguous item of a
    template kept out of the evaluated set, so a demo neither leaks nor fixes the flag.
    """
    clear = Item(id="ar-demo-clear", question=(
        "Tom gave Lisa his umbrella because it was raining and she had none.\nQuestion: Who had no umbrella "
        f"at first?\nA. Tom\nB. Lisa\n\n{AR_ASK}"), answer="ambiguous_status=NOT_AMBIGUOUS; answer=B",
        meta={"gold_flag": "NOT_AMBIGUOUS", "gold_answer": "B", "template": "demo"})
    vague = Item(id="ar-demo-ambiguous", question=(
        "Visiting relatives can be boring.\nQuestion: What is boring?\nA. The relatives who visit\n"
        f"B. Going to visit relatives\n\n{AR_ASK}"), answer="ambiguous_status=AMBIGUOUS; answer=B",
        meta={"gold_flag": "AMBIGUOUS", "gold_answer": "B", "template": "demo"})
    return [clear, vague]


_NOT_ECHO = r"(?!\s*(?:\||or\b))"  # "AMBIGUOUS|NOT_AMBIGUOUS", "AMBIGUOUS or ...": the format echoed
_FLAG = re.compile(r"ambiguous[_ ]?status\W{0,3}[:=]\W{0,3}(not[\s_-]*ambiguous|unambiguous|ambiguous)\b" + _NOT_ECHO,
                   re.I)
_FLAG_BARE = re.compile(r"(?<!\|)(?<!\bor )\b(NOT[ _-]?AMBIGUOUS|UNAMBIGUOUS|AMBIGUOUS)\b" + _NOT_ECHO)
_ANSWER = re.compile(r"\banswer\W{0,3}[:=]\W{0,3}([AB])\b" + _NOT_ECHO, re.I)
_STRICT = re.compile(r"ambiguous_status\s*=\s*(AMBIGUOUS|NOT_AMBIGUOUS)\s*;\s*answer\s*=\s*([AB])")


def parse_ar(response: str) -> dict[str, Any]:
    """Parse an AR reply into ``{"flag", "answer", "valid"}``.

    flag: AMBIGUOUS / NOT_AMBIGUOUS / None from the last ``ambiguous_status = X`` (case, "="
    or ":", spaces, "not ambiguous", "unambiguous" tolerated), else the last bare upper-case
    AMBIGUOUS / NOT_AMBIGUOUS word; echoes of the template ("AMBIGUOUS|NOT_AMBIGUOUS",
    "AMBIGUOUS or ...") do not count. answer: A / B / None from the last ``answer = X``.
    valid: some line is exactly ``ambiguous_status=AMBIGUOUS|NOT_AMBIGUOUS; answer=A|B``
    (spaces around "=" and ";" allowed, nothing else on the line).

    >>> parse_ar("ambiguous_status=NOT_AMBIGUOUS; answer=B")
    {'flag': 'NOT_AMBIGUOUS', 'answer': 'B', 'valid': True}
    >>> parse_ar("Ambiguous status: ambiguous. Answer: (a)")
    {'flag': 'AMBIGUOUS', 'answer': 'A', 'valid': False}
    """
    text = str(response or "")
    hits = _FLAG.findall(text) or _FLAG_BARE.findall(text)
    flag = None
    if hits:
        flag = "AMBIGUOUS" if re.fullmatch(r"ambiguous", hits[-1], re.I) else "NOT_AMBIGUOUS"
    answers = _ANSWER.findall(text)
    valid = any(_STRICT.fullmatch(ln.strip()) for ln in text.splitlines())
    return {"flag": flag, "answer": answers[-1].upper() if answers else None, "valid": valid}


def _ar_extracted(p: dict[str, Any]) -> str | None:
    if p["flag"] is None and p["answer"] is None:
        return None
    return f"ambiguous_status={p['flag'] or '?'}; answer={p['answer'] or '?'}"


@register_scorer("ar")
def score_ar(response: str, item: dict[str, Any]) -> tuple[str | None, float]:
    """AR: 1.0 iff the reply flags the item AMBIGUOUS (the gold flag of every AR item).

    The extracted string is the parsed reply, normalised ("?" for a missing part).

    >>> score_ar("ambiguous_status = AMBIGUOUS; answer = A", {"gold_flag": "AMBIGUOUS"})
    ('ambiguous_status=AMBIGUOUS; answer=A', 1.0)
    """
    p = parse_ar(response)
    return _ar_extracted(p), float(p["flag"] is not None and p["flag"] == item.get("gold_flag", "AMBIGUOUS"))


def _gold(item: Any) -> tuple[str, str | None]:
    d = item.scorer_item() if isinstance(item, Item) else dict(item)
    flag, ans = d.get("gold_flag"), d.get("gold_answer")
    if flag is None or ans is None:
        p = parse_ar(d.get("answer", ""))
        flag, ans = flag or p["flag"] or "AMBIGUOUS", ans or p["answer"]
    return flag, ans


def ar_metrics(responses: Sequence[str], items: Sequence[Any]) -> dict[str, Any]:
    """AR summary over responses and their items (:class:`Item` or scorer dicts).

    flag_accuracy: share whose flag equals the gold flag (AMBIGUOUS); answer_accuracy: share
    whose answer equals the gold answer; format_validity: share with a line in exactly the
    required format; overconfidence: share called NOT_AMBIGUOUS; unparsed_flag: share with no
    flag at all. Every share is over all items (an unparsed reply counts as wrong).

    >>> its = [{"gold_flag": "AMBIGUOUS", "gold_answer": "A"}] * 2
    >>> ar_metrics(["ambiguous_status=AMBIGUOUS; answer=A", "ambiguous_status=NOT_AMBIGUOUS; answer=B"], its)
    {'n': 2, 'flag_accuracy': 0.5, 'answer_accuracy': 0.5, 'format_validity': 1.0, 'overconfidence': 0.5, 'unparsed_flag': 0.0}
    """
    if len(responses) != len(items):
        raise ValueError("responses and items must have the same length")
    n = len(responses)
    if n == 0:
        nan = float("nan")
        return {"n": 0, "flag_accuracy": nan, "answer_accuracy": nan, "format_validity": nan,
                "overconfidence": nan, "unparsed_flag": nan}
    flag_ok = ans_ok = valid = over = unparsed = 0
    for r, it in zip(responses, items):
        p, (gflag, gans) = parse_ar(r), _gold(it)
        flag_ok += p["flag"] == gflag
        ans_ok += p["answer"] is not None and p["answer"] == gans
        valid += p["valid"]
        over += p["flag"] == "NOT_AMBIGUOUS"
        unparsed += p["flag"] is None
    return {"n": n, "flag_accuracy": flag_ok / n, "answer_accuracy": ans_ok / n, "format_validity": valid / n,
            "overconfidence": over / n, "unparsed_flag": unparsed / n}


@register_task("ar")
def ar(n_per_template: int = 16, seed: str = AR_SEED) -> Task:
    """Ambiguous Reasoning (7 templates x ``n_per_template`` items; all genuinely ambiguous)."""
    return Task(name="ar", scorer="ar", load=lambda: ar_items(n_per_template, seed), fewshot_pool=_ar_pool,
                instruction="Some questions have more than one reasonable reading.",
                answer_prefix="Reply:", max_new_tokens=32, stop=(), base_stop=("\n",), probe=True,
                summarize=lambda responses, items: {"ar": ar_metrics(responses, items)},
                description=f"LPP Ambiguous Reasoning: {len(AR_TEMPLATES)} templates x {n_per_template} genuinely "
                            "ambiguous two-option items; score = ambiguity flagged (the flag, answer and format rates too)",
                source=f"generated (reporter.probes, seed {seed!r})")
