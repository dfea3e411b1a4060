"""Which multiple-choice items' published option order the option-order test can test: options that refer to other
options, numbers and ordinals in sorted order, fixed grids of combinations are conventions, not arbitrary orders.

>>> order_is_convention(["1", "2", "5", "10"])
'numbers in sorted order'
"""
from __future__ import annotations

import re
from typing import Sequence

__all__ = ["order_is_convention"]

# options that point at other options or positions: moving them changes what they say
_REFERS = re.compile(r"(?i:\b(all|none|both|neither|any) of (the )?(above|below|these|those|them|the options)\b)"
                     r"|\b[A-E] (and|or|&) [A-E]\b|\b(?i:option) [A-E]\b|\(([A-E])\)|\b(?i:only) [A-E]\b"
                     r"|(?i:\b(both|neither|either) \(?[a-e]\)? (and|nor|or) \(?[a-e]\)?(?![\w-]))"
                     r"|(?i:^\s*\(?[a-e]\)? (and|or|nor|&) \(?[a-e]\)?\s*\.?\s*$)")
_NUMBER = re.compile(r"^\s*[-+]?\$?\d[\d,]*(\.\d+)?\s*%?\s*$")
# an option that starts with a number (units or words may follow: "0.5 centimeter", "0.25mc^2", "$1,200 a year")
_LEADING_NUMBER = re.compile(r"^\s*[-+−]?\$?(\d[\d,]*(\.\d+)?|\.\d+)(?![\d/:])")
_ORDINALS = {w: i + 1 for i, w in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
    "fifteenth sixteenth seventeenth eighteenth nineteenth twentieth".split())}
# options that only combine roman-numeral statements ("I only", "II and III", "I, II, and III")
_ROMAN_COMBINATION = re.compile(r"^\s*(?:(?:I{1,3}|IV|V|VI{0,3}|both|neither|none|all|only|and|or|nor)\b[\s,.]*)+$", re.I)


def _leading_value(option: str) -> float | None:
    """The number an option starts with (digits or an ordinal word), or None."""
    m = _LEADING_NUMBER.match(option)
    if m:
        try:
            return float(m.group(1).replace(",", ""))
        except ValueError:
            return None
    word = re.match(r"\s*([A-Za-z]+)", option)
    return float(_ORDINALS[word.group(1).lower()]) if word and word.group(1).lower() in _ORDINALS else None


def _is_grid(choices: Sequence[str]) -> bool:
    """Every option a tuple of the same length >= 2 ("True, False", "Wrong | Not wrong") over at most 3 values."""
    parts = [[x.strip(" .").lower() for x in re.split(r"[,|]", c)] for c in choices]
    lengths = {len(x) for x in parts}
    if len(lengths) != 1 or lengths.pop() < 2 or any(not v for x in parts for v in x):
        return False
    return len({v for x in parts for v in x}) <= 3


def order_is_convention(choices: Sequence[str]) -> str | None:
    """Why an item's published option order is not exchangeable with its permutations, or None.

    The test's null needs the published order to be arbitrary. Options that refer to other
    options ("All of the above", "both a and b", "I and II") change meaning when moved; options
    listed by a convention a model learns from other items (numbers, also with units, or
    ordinals, in sorted order; a fixed grid of combinations such as MMLU's "True, True / False,
    False / True, False / False, True") are preferred in that order by a model that never saw
    the item. Either would make the test fire on a clean model, so such items are left out.

    >>> order_is_convention(["1", "2", "5", "10"]), order_is_convention(["cat", "All of the above"])
    ('numbers in sorted order', 'an option refers to other options')
    >>> order_is_convention(["0.5 centimeter", "4.5 centimeters", "75 centimeters"]), order_is_convention(["Ninth", "Tenth", "Eleventh"])
    ('numbers in sorted order', 'numbers in sorted order')
    >>> order_is_convention(["True, True", "False, False", "True, False", "False, True"])
    'a fixed grid of combinations'
    >>> order_is_convention(["the strength of x.", "both a and b.", "neither a nor b."])
    'an option refers to other options'
    >>> order_is_convention(["7", "2", "5"]) is None, order_is_convention(["Paris", "Rome, Italy", "Oslo"]) is None
    (True, True)
    """
    if any(_REFERS.search(c) for c in choices):
        return "an option refers to other options"
    if len(choices) > 1 and all(_ROMAN_COMBINATION.match(c) for c in choices):
        return "an option refers to other options"
    if all(_NUMBER.match(c) for c in choices):
        vals = [float(re.sub(r"[^\d.+-]", "", c) or "nan") for c in choices]
        if vals == sorted(vals) or vals == sorted(vals, reverse=True):
            return "numbers in sorted order"
    lead = [_leading_value(c) for c in choices]
    if len(choices) > 2 and all(v is not None for v in lead):
        nums = [float(v) for v in lead if v is not None]
        if len(set(nums)) == len(nums) and (nums == sorted(nums) or nums == sorted(nums, reverse=True)):
            return "numbers in sorted order"
    if _is_grid(choices):
        return "a fixed grid of combinations"
    return None
