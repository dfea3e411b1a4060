"""Executors: run the per-model collect jobs here (``local``) or on a Ray cluster (``ray``).

Every job writes into the shared run directory exactly as locally, so resume, the analyse
stage and rendering do not care where a job ran.

>>> get_executor("local", None).__name__
'run_local'
"""
from __future__ import annotations

from typing import Any, Callable

from tqdm.auto import tqdm

from ..collect.job import collect_model
from ..config import Profile, RunConfig
from ..config.models import EXECUTORS
from ..errors import UserError

#: ``executor(cfg, run_dir, profile, *, force, progress) -> failure lines``
Executor = Callable[..., list[str]]


def run_local(cfg: RunConfig, root: str, profile: Profile, *, force: bool = False,
              progress: bool = True) -> list[str]:
    """One model after another in this process."""
    failures: list[str] = []
    for i in tqdm(range(len(cfg.models)), desc="models", disable=not progress):
        failures += collect_model(cfg, i, root, profile, force=force, progress=progress)
    return failures


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError("executor 'ray' needs Ray, which is not installed; run: pip install 'reporter[ray]'") from None
    return ray


def make_ray_runner(address: str | None) -> Executor:
    """An executor that submits each model as a Ray task asking for the model's ``num_gpus``."""

    def run_ray(cfg: RunConfig, root: str, profile: Profile, *, force: bool = False,
                progress: bool = True) -> list[str]:
        ray = _ray()
        started_here = not ray.is_initialized()
        if started_here:
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=True,
                         ignore_reinit_error=True, configure_logging=False)
            except Exception as e:  # unreachable cluster, bad address
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise UserError(f"executor 'ray': cannot connect to the Ray cluster at "
                                f"{address or 'a new local cluster'}: {first}") from None
        remote = ray.remote(max_retries=0)(collect_model)
        try:
            refs = [remote.options(num_gpus=spec.num_gpus, num_cpus=spec.num_cpus, name=f"reporter:{spec.name}")
                    .remote(cfg, i, root, profile, force=force, progress=False)
                    for i, spec in enumerate(cfg.models)]
            failures: list[str] = []
            for ref, spec in zip(refs, cfg.models):
                try:
                    failures += ray.get(ref)
                except Exception as e:  # a worker that died: its finished artifacts are kept
                    first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                    failures.append(f"model '{spec.name}': the Ray task failed: {first}")
            return failures
        finally:
            if started_here:
                ray.shutdown()

    return run_ray


def get_executor(name: str | None, address: str | None) -> Executor:
    """The executor called ``name`` (one of :data:`reporter.config.models.EXECUTORS`)."""
    name = name or "local"
    if name == "local":
        return run_local
    if name == "ray":
        return make_ray_runner(address)
    raise UserError(f"executor '{name}' is not valid; use one of {', '.join(EXECUTORS)}")
