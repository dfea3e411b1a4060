"""Collector plugins of the collect stage (see :mod:`reporter.collect.collectors.base`).

Importing this package registers the built-in collectors, in the order they run: MUI key
neurons, token log-probs, option probabilities (calibration), the LPP latent signature, key SAE features.
"""
from . import mui, logprobs, calibration, lpp, sae  # noqa: F401,I001  (registration order is run order)
from .base import (COLLECTORS, BatchContext, CollectorPlugin, OptionPasses, TaskContext, enabled_collectors,
                   register_collector)

__all__ = ["COLLECTORS", "BatchContext", "CollectorPlugin", "OptionPasses", "TaskContext", "enabled_collectors",
           "register_collector"]
