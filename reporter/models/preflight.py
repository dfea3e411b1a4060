"""Checks of a models file against this machine, registered into its validation.

:mod:`reporter.config` checks a file's syntax without importing torch or any model code;
importing this module registers the checks that need them (a ``random:ARCH`` family is known,
a ``packaged:NAME`` model is known and its wheels are installed, a ``cuda`` device exists), so
they run in the same pass, one line per problem with the key path, before anything loads.

>>> from reporter.config import parse_config
>>> parse_config([{"name": "m", "source": "random:lama"}], "m.yaml")
Traceback (most recent call last):
reporter.errors.ConfigError: m.yaml: models[0].source: unknown architecture 'lama' (did you mean 'random:llama'?); supported: llama, mistral, qwen2, qwen3, phi3, gemma, gemma2, gemma3, gpt2, gpt_neox, opt
"""
from __future__ import annotations

from ..config.models import DEVICE_CHECKS, SOURCE_CHECKS
from ..registry import did_you_mean
from . import packaged
from .random_archs import RANDOM_ARCHS


@SOURCE_CHECKS.register("packaged")
def check_packaged(name: str) -> str | None:
    """A ``packaged:NAME`` model must be known and its wheels installed."""
    pm = packaged.PACKAGED.get(name)
    if pm is None:
        return (f"unknown packaged model '{name}'{did_you_mean(name, packaged.PACKAGED, prefix='packaged:')}; "
                "available: " + ", ".join(f"packaged:{n}" for n in packaged.PACKAGED))
    if packaged.missing_modules(pm):
        return f"packaged model '{name}' is not installed; run: {pm.pip_command}"
    return None


@SOURCE_CHECKS.register("random")
def check_random(arch: str) -> str | None:
    """A ``random:ARCH`` family must have a random-initialisation recipe."""
    if arch in RANDOM_ARCHS:
        return None
    return (f"unknown architecture '{arch}'{did_you_mean(arch, RANDOM_ARCHS, prefix='random:')}; supported: "
            + ", ".join(RANDOM_ARCHS))


def cuda_count() -> int:
    """CUDA devices visible to torch."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@DEVICE_CHECKS.register("cuda")
def check_cuda(device: str) -> str | None:
    """A ``cuda`` / ``cuda:N`` device must exist here."""
    if not device.startswith("cuda"):
        return None
    n = cuda_count()
    if n == 0:
        return f"'{device}' was asked for but no CUDA GPU is available here; use auto or cpu"
    if ":" in device and int(device.split(":")[1]) >= n:
        return f"'{device}' does not exist: this machine has {n} GPU(s), cuda:0..cuda:{n - 1}"
    return None
