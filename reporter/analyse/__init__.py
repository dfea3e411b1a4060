"""The analyse stage: results.json from the artifacts, then law, fairness, contamination, diversity, training.

Runs on a run directory alone, without torch or a model (an import-linter contract keeps it so).
"""
from .analysis import analyse, write_analysis
from .results import build_results, fresh_results, write_results

__all__ = ["analyse", "write_analysis", "build_results", "fresh_results", "write_results"]
