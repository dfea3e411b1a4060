"""The LPP synthetic probes, run as tasks: ``spc`` (symbolic pattern completion) and ``ar`` (ambiguous reasoning).

Both are registered with ``probe=True``: they run and score like benchmarks, but the card
reports them apart and they are never points of the Utility Law.
"""
from .ar import AR_SEED, AR_TEMPLATES, ar_items, ar_metrics, parse_ar, score_ar
from .spc import SPC_RULES, SPC_SEED, char_f1, extract_continuation, score_char_f1, spc_example, spc_items

__all__ = ["SPC_RULES", "SPC_SEED", "AR_SEED", "AR_TEMPLATES", "spc_example", "spc_items", "extract_continuation",
           "char_f1", "score_char_f1", "ar_items", "parse_ar", "score_ar", "ar_metrics"]
