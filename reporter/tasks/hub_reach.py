"""Whether the Hugging Face hub can be reached, asked once per process: :func:`hub_unreachable`.

Offline, the hub's client retried each request with back-off, so a hub dataset took tens of seconds and six
"Retrying in Ns" lines to fail. :func:`offline_while_unreachable` turns the client's own offline mode on while a
dataset loads when one connection to the hub failed: a copy in the local cache is still read, and anything else
fails at once.

>>> hub_address("https://hf-mirror.example:8443/x")
('hf-mirror.example', 8443)
"""
from __future__ import annotations

import contextlib
import os
import socket
from functools import lru_cache
from typing import Iterator
from urllib.parse import urlsplit

__all__ = ["hub_address", "hub_offline", "hub_unreachable", "offline_while_unreachable"]

#: seconds one connection to the hub may take before it counts as unreachable
TIMEOUT = 3.0
_PROXIES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy")


def hub_address(endpoint: str | None = None) -> tuple[str, int] | None:
    """The host and port of ``HF_ENDPOINT`` (default ``https://huggingface.co``); None where it is not a URL with
    a host and a port reporter can read (the hub client then answers for it).

    >>> hub_address("http://h:notaport") is None
    True
    """
    url = urlsplit(endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        port = url.port
    except ValueError:
        return None
    return (url.hostname, port or (80 if url.scheme == "http" else 443)) if url.hostname else None


def hub_unreachable() -> str | None:
    """Why the hub cannot be reached (its name does not resolve, or no connection within :data:`TIMEOUT`), or
    None: reachable, already in offline mode, or behind a proxy (which only a request through it can tell).

    The connection is tried once per process and address (:func:`_connect`); offline mode and proxies are read at
    every call, so an answer given while the client was offline (inside a finished task's check) is not the
    answer once it is online again.
    """
    import datasets.config
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or datasets.config.HF_HUB_OFFLINE or any(os.environ.get(p) for p in _PROXIES):
        return None
    if (address := hub_address()) is None:
        return None
    return _connect(*address)


@lru_cache(maxsize=8)
def _connect(host: str, port: int) -> str | None:
    """Why one connection to ``host:port`` within :data:`TIMEOUT` failed, or None."""
    try:
        socket.create_connection((host, port), timeout=TIMEOUT).close()
    except OSError as e:
        return f"{host} could not be reached: {e.strerror or type(e).__name__}"
    return None


@contextlib.contextmanager
def offline_while_unreachable(needed: bool = True) -> Iterator[str | None]:
    """The hub client's offline mode (``HF_HUB_OFFLINE``) for the ``with`` block where :func:`hub_unreachable`;
    yields its reason, or None (nothing changed). ``needed=False`` (the block reads local files only): the hub is
    not asked.
    """
    reason = hub_unreachable() if needed else None
    if reason is None:
        yield None
        return
    with hub_offline():
        yield reason


#: the module switches Hugging Face's libraries read on every request, and the environment variables they read when
#: they are imported
_OFFLINE_SWITCHES = (("huggingface_hub.constants", "HF_HUB_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE"),
                     ("datasets.config", "HF_DATASETS_OFFLINE"))
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


@contextlib.contextmanager
def hub_offline(environment: bool = False) -> Iterator[None]:
    """Hugging Face's libraries offline while it lasts (a request fails at once instead of reaching, or retrying,
    the hub), everything restored after; ``environment``: the environment variables too (for code that reads them
    itself, and child processes). ``huggingface_hub`` and ``datasets`` are loaded before their switches are set (0.6 s,
    once per process): loaded inside, or after another's switch, one would keep the offline values it read then, for
    the whole process.

    >>> from huggingface_hub import constants
    >>> with hub_offline():
    ...     constants.HF_HUB_OFFLINE
    True
    """
    import importlib

    modules = {}
    for module, _attr in _OFFLINE_SWITCHES:
        try:
            modules[module] = importlib.import_module(module)
        except ImportError:
            continue
    saved = [(modules[m], attr, getattr(modules[m], attr)) for m, attr in _OFFLINE_SWITCHES
             if m in modules and hasattr(modules[m], attr)]
    env = {k: os.environ.get(k) for k in _OFFLINE_ENV}
    for mod, attr, _value in saved:
        setattr(mod, attr, True)
    if environment:
        os.environ.update({k: "1" for k in _OFFLINE_ENV})
    try:
        yield
    finally:
        for mod, attr, value in saved:
            setattr(mod, attr, value)
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
