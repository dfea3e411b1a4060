"""Scoring: answer extraction and scorers, registered by name, and the sandbox for generated code.

Every scorer is ``fn(response, item) -> (extracted answer or None, score in [0, 1])``.

>>> get_scorer("choice")("The answer is (B)", {"answer": "B", "choices": ["x", "y"]})
('B', 1.0)
"""
from .scorers import (
                      ANSWER_KEYS,
                      ANSWER_LAST,
                      CHANCE,
                      SCORERS,
                      Scorer,
                      answer_share,
                      chance_level,
                      get_scorer,
                      majority_answer,
                      register_scorer,
)

__all__ = ["ANSWER_KEYS", "ANSWER_LAST", "CHANCE", "SCORERS", "Scorer", "answer_share", "chance_level", "get_scorer", "majority_answer",
           "register_scorer"]
