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


#: how long ``--address HOST:PORT`` may take to answer a TCP connection before the run is refused
CONNECT_TIMEOUT_S = 10.0


def reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why a Ray address ``HOST:PORT`` or ``ray://HOST:PORT`` does not accept a TCP connection, or None when it does
    (``auto``, ``local`` and other forms are Ray's to resolve).

    >>> reachable("auto") is None, reachable("127.0.0.1:1", timeout=2)
    (True, 'nothing answers at 127.0.0.1:1 (Connection refused)')
    >>> reachable("ray://head")
    "'ray://head' is not HOST:PORT"
    """
    import socket

    rest = address.split("://", 1)[1] if "://" in address else address
    if address in ("auto", "local") or ("://" not in address and ":" not in address):
        return None
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return f"{address!r} is not HOST:PORT"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except socket.timeout:
        return f"nothing answered at {host}:{port} within {timeout:g} s"
    except OSError as e:
        return f"nothing answers at {host}:{port} ({e.strerror or type(e).__name__})"


class RayRunner:
    """An executor that submits each model as a Ray task asking for the model's GPUs (:meth:`ModelSpec.gpus`).

    :meth:`connect` is called before the run directory is created, so an unreachable cluster leaves nothing
    behind: an address that takes no TCP connection within :data:`CONNECT_TIMEOUT_S` is refused in one line
    (Ray itself would retry it forever).
    """

    def __init__(self, address: str | None):
        self.address = address
        self.started_here = False

    def connect(self) -> None:
        """Join (or start) the Ray cluster, once; an unreachable address is one :class:`UserError` line."""
        ray = _ray()
        if ray.is_initialized():
            return
        if self.address and (why := reachable(self.address)) is not None:
            raise UserError(f"executor 'ray': cannot connect to the Ray cluster at {self.address}: {why}; start "
                            "the cluster (ray start --head) or fix --address / address:")
        try:
            ray.init(address=self.address, include_dashboard=False, log_to_driver=True,
                     ignore_reinit_error=True, configure_logging=False)
        except Exception as e:  # no cluster for "auto", a bad address
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(f"executor 'ray': cannot connect to the Ray cluster at "
                            f"{self.address or 'a new local cluster'}: {first}") from None
        self.started_here = True

    def __call__(self, cfg: RunConfig, root: str, profile: Profile, *, force: bool = False,
                 progress: bool = True) -> list[str]:
        """Run every model of ``cfg`` as a Ray task; returns the failure lines."""
        ray = _ray()
        self.connect()
        remote = ray.remote(max_retries=0)(collect_model)
        try:
            refs = [remote.options(num_gpus=spec.gpus(cfg.device), num_cpus=spec.num_cpus, name=f"reporter:{spec.name}")
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
            if self.started_here:
                ray.shutdown()
                self.started_here = False


def get_executor(name: str | None, address: str | None) -> Executor:
    """The executor called ``name`` (one of :data:`reporter.config.models.EXECUTORS`)."""
    name = name or "local"
    if name == "local":
        return run_local
    if name == "ray":
        return RayRunner(address)
    raise UserError(f"executor '{name}' is not valid; use one of {', '.join(EXECUTORS)}")
