"""Objects the doctests of ``reporter/`` share (``pytest --doctest-modules``).

A doctest that needs a model or a finished run uses ``lm`` (a tiny random-initialised Llama with
the packaged SmolLM2 tokenizer) or ``run_dir`` (a copy of the tiny three-model run that
tests/conftest.py builds once per session for the tests too), so every example in a docstring runs.
"""
from __future__ import annotations

import os
import resource

import pytest
from _pytest.doctest import DoctestItem

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """With REPORTER_TEST_CPU=FILE, append each test's CPU seconds (setup, call and teardown, all threads,
    waited-for subprocesses), node id and pytest-xdist worker to FILE: a cost that a busy machine does not inflate, unlike
    ``--durations``. Module and session fixtures count toward the first test that uses them.
    """
    log = os.environ.get("REPORTER_TEST_CPU")
    start = _cpu_seconds() if log else 0.0
    yield
    if log:
        with open(log, "a") as f:
            f.write(f"{_cpu_seconds() - start:.2f}\t{item.nodeid}\t{os.environ.get('PYTEST_XDIST_WORKER', '-')}\n")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n 2 --dist loadfile``), hand out the files that hold a ``slow`` test first.

    A worker takes whole files in collection order; a long file handed out last would leave the other
    worker idle at the end. Files keep their own order, and so do the tests within a file.
    """
    if not hasattr(config, "workerinput"):  # not a pytest-xdist worker
        return
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: only slow files move, as a block


@pytest.fixture(autouse=True)
def _doctest_objects(request: pytest.FixtureRequest) -> None:
    if isinstance(request.node, DoctestItem):
        from tests.conftest import doctest_objects

        objects = doctest_objects(request.getfixturevalue("tmp_path_factory"))
        request.getfixturevalue("doctest_namespace").update(objects)
