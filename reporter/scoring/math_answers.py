r"""MATH answers: the boxed answer of a solution, LaTeX normalisation, and equality checked with sympy.

Pure functions, no registry: the ``math`` scorer (:mod:`reporter.scoring.scorers`) and the MATH-500
task's gold answers use them.

>>> math_equal(r"\frac{1}{2}", "0.5"), extract_boxed(r"so \boxed{42}.")
(True, '42')
"""
from __future__ import annotations

import contextlib
import random
import re
import signal
import threading

__all__ = ["extract_boxed", "normalize_math", "math_equal"]


def _braced(s: str, start: int) -> tuple[str, int] | None:
    """The balanced ``{...}`` group opening at ``s[start]``: (contents, index after it)."""
    depth = 0
    for i in range(start, len(s)):
        depth += {"{": 1, "}": -1}.get(s[i], 0)
        if depth == 0:
            return s[start + 1:i], i + 1
    return None


def extract_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces), or None.

    >>> extract_boxed(r"so $x = \\boxed{\\frac{1}{2}}$ and \\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.")
    '\\\\left( 3, \\\\frac{\\\\pi}{2} \\\\right)'
    """
    text = str(text or "")
    for m in reversed(list(re.finditer(r"\\(?:boxed|fbox)(?![a-zA-Z])\s*(\{)?", text))):
        if m[1] and (got := _braced(text, m.end() - 1)):
            return got[0].strip()
        if not m[1] and (bare := re.match(r"\s*([^\s$]+)", text[m.end():])):  # "\boxed 5"
            return bare[1]
    return None


def normalize_math(s: str) -> str:
    r"""A canonical string form of a LaTeX answer (for string comparison and for sympy).

    >>> normalize_math(r"\left( 3, \dfrac12 \right)")
    '(3,\\frac{1}{2})'
    >>> normalize_math(r"90^\circ"), normalize_math(r"10\text{ cm}^2"), normalize_math(r"x = 1,000")
    ('90', '10', '1000')
    """
    s = str(s or "").strip().strip("$").strip().replace("{,}", ",")  # LaTeX's thousands comma: 10{,}080
    s = re.sub(r"\\le(?=[(\[].*\\right)", "", s)  # the packaged MATH-500 "answer" field mangles \left
    s = re.sub(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)(?![a-zA-Z])|\\displaystyle", "", s)
    s = re.sub(r"(?<!\\)\\[!,;: ]|~", " ", s)
    s = re.sub(r"\^\s*\{?\\circ\}?|\\circ|\\%|%|\\\$|\$", "", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s).replace("\\iny", "\\infty").replace("{}", "")
    s = re.sub(r"^(.*\d.*?)\s*\\(?:text|mbox|mathrm)\{\s*[a-zA-Z][a-zA-Z .]*\}(?:\^\{?\d\}?)?$", r"\1", s)
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox|mathbf|operatorname)\{([^{}]*)\}", r"\1", s)
    arg = r"\s*([^\s{\\])"  # \frac12 -> \frac{1}{2}, \frac1{x} -> \frac{1}{x}, \sqrt2 -> \sqrt{2}
    s = re.sub(rf"\\frac{arg}{arg}", r"\\frac{\1}{\2}", s)
    s = re.sub(rf"\\frac{arg}\s*\{{", r"\\frac{\1}{", s)
    s = re.sub(rf"\\frac\s*(\{{[^{{}}]*\}}){arg}", r"\\frac\1{\2}", s)
    s = re.sub(r"\\sqrt\s*([^\s{\[\\])", r"\\sqrt{\1}", s)
    s = re.sub(r" (?![a-zA-Z])|(?<![a-zA-Z]) ", "", re.sub(r"\s+", " ", s).strip())
    s = s.split("=", 1)[1] if re.fullmatch(r"[a-zA-Z]{1,2}(?:_\w)?=[^=<>]+", s) else s  # "x=5" -> "5"
    s = s.replace("\\\\", "\\")  # matrix row breaks: the packaged "answer" field also halves them
    return (s.replace(",", "") if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s) else s).rstrip(".")


def _to_sympy(s: str):
    """A sympy expression for a normalised answer, or None. Only vetted text reaches the parser."""
    import sympy
    from sympy.parsing.sympy_parser import convert_xor, implicit_multiplication, parse_expr, standard_transformations
    if m := re.fullmatch(r"(-?)(\d+)\\frac\{(\d+)\}\{(\d+)\}", s):  # mixed number 15\frac{39}{40}
        s = f"{m[1]}({m[2]}+{m[3]}/{m[4]})"
    while (j := s.find("\\frac{")) >= 0:
        num = _braced(s, j + 5)
        den = num and s[num[1]:num[1] + 1] == "{" and _braced(s, num[1])
        if not den:
            return None
        s = f"{s[:j]}(({num[0]})/({den[0]})){s[den[1]:]}"
    s = re.sub(r"\\sqrt\[([^\]\[]+)\]\{([^{}]*)\}", r"((\2)**(1/(\1)))", s)
    for a, b in (("\\sqrt", "sqrt"), ("\\pi", "pi"), ("\\infty", "oo"), ("\\cdot", "*"), ("\\times", "*"),
                 ("\\div", "/"), ("{", "("), ("}", ")"), ("^", "**")):
        s = s.replace(a, b)
    if (len(s) > 200 or not re.fullmatch(r"[0-9a-zA-Z+\-*/(). ]+", s)  # no huge/chained powers
            or re.search(r"\*\*\(?\d{4,}|\*\*[\w.()]*\*\*", s)
            or any(len(w) > 1 and w not in ("sqrt", "pi", "oo") for w in re.findall(r"[a-zA-Z]+", s))):
        return None
    names = {**{w: sympy.Symbol(w) for w in re.findall(r"[a-zA-Z]", s)}, "pi": sympy.pi, "oo": sympy.oo}
    allowed = {k: getattr(sympy, k) for k in ("Integer", "Float", "Rational", "Symbol", "sqrt")}
    try:
        return parse_expr(s, local_dict=names, global_dict=allowed,
                          transformations=standard_transformations + (implicit_multiplication, convert_xor))
    except Exception:  # noqa: BLE001 - any parse failure means "not comparable"
        return None


class _Timeout(BaseException):
    """Raised on SIGALRM; not an Exception, so no ``except Exception`` inside sympy swallows it."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """A limit of ``seconds`` of this process's own CPU time (SIGVTALRM) in the main thread on Unix; elsewhere
    none (the inputs are vetted). CPU time, not wall time: a loaded machine must not turn a correct answer
    into a wrong one.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def _raise(signum, frame):
        raise _Timeout
    old, prev = signal.signal(signal.SIGVTALRM, _raise), signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old)
        signal.setitimer(signal.ITIMER_VIRTUAL, *prev)  # an outer limit resumes


def _sympy_equal(a: str, b: str) -> bool:
    import sympy
    try:
        with _time_limit(2.0):
            x, y = _to_sympy(a), _to_sympy(b)
            if x is None or y is None:
                return False
            if x - y == 0 or sympy.simplify(x - y) == 0:
                return True
            if not (x - y).free_symbols and not (x.atoms(sympy.Float) or y.atoms(sympy.Float)):
                return False  # exact numbers that differ (1000001 is not 1000000)
            rng = random.Random(0)  # numerically at a few points (also catches 0.5 == 1/2)
            for _ in range(3):
                point = {v: rng.uniform(0.5, 2.5) for v in (x - y).free_symbols}
                dx, dy = complex(x.evalf(30, subs=point)), complex(y.evalf(30, subs=point))
                # a decimal stands for itself up to float noise (0.333333 is not 1/3); expressions in
                # variables are compared at random points
                tol = 1e-6 if (x - y).free_symbols else 1e-9
                if not abs(dx - dy) <= tol * max(1.0, abs(dy)):
                    return False
            return True
    except (Exception, _Timeout):  # noqa: BLE001 - timeout, TypeError from oo/nan, ...
        return False


def _split_top(s: str) -> list[str]:
    parts, depth = [""], 0
    for ch in s:
        depth += (ch in "([{") - (ch in ")]}")
        parts[-1:] = [parts[-1], ""] if ch == "," and depth == 0 else [parts[-1] + ch]
    return parts


def math_equal(pred, gold) -> bool:
    r"""Whether two MATH answers are equivalent: same normalised string, element-wise for
    tuples/intervals (ordered) and lists of solutions (any order), else through sympy.

    >>> math_equal(r"\dfrac12", "0.5"), math_equal(r"3\sqrt{2}", r"\sqrt{18}"), math_equal("(1,2)", "(2,1)")
    (True, True, False)
    """
    if pred is None or gold is None:
        return False
    a, b = normalize_math(pred), normalize_math(gold)
    if a == b or a.replace(" ", "") == b.replace(" ", ""):
        return True
    ma, mb = (re.fullmatch(r"([(\[])(.*)([)\]])", x) for x in (a, b))
    pa, pb = _split_top(ma[2] if ma else a), _split_top(mb[2] if mb else b)
    if len(pa) == len(pb) == 1 or not (a and b):
        return bool(a and b) and _sympy_equal(a, b)
    if len(pa) != len(pb) or bool(ma) != bool(mb):
        return False
    if ma:  # tuples / intervals: ordered, same brackets
        return ma[1] == mb[1] and ma[3] == mb[3] and all(map(math_equal, pa, pb))
    return (all(any(math_equal(x, y) for y in pb) for x in pa)  # unordered solutions: "1,-2" = "-2, 1"
            and all(any(math_equal(x, y) for x in pa) for y in pb))
