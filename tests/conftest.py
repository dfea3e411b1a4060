"""Shared fixtures: tiny random-initialised transformers built from real configs, and the suite's one
tiny finished run (:func:`finished_run`), built once per session and shared by every module that only reads it."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist (`make test` runs `-n 2`) the workers share the cores: one intra-op thread each, so two
# workers do not oversubscribe two cores (tiny models gain nothing from threads anyway). The environment
# variables reach the `reporter` subprocesses that some tests start.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
if _WORKERS > 1:
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(max(1, (os.cpu_count() or 1) // _WORKERS)))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // _WORKERS)))

TINY = dict(layers=2, hidden=64, intermediate=96, heads=4, kv_heads=2)


def tiny_model(family: str, vocab: int = 211, seed: int = 0, **size):
    """A float32 random model of ``family`` with a few thousand parameters."""
    from transformers import AutoModelForCausalLM

    from reporter.models.random_archs import random_config

    cfg = random_config(family, vocab=vocab, **{**TINY, **size})
    if family.startswith("gemma"):
        cfg.head_dim = 16
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()


#: keys that hold wall times: they differ between two runs of the same work
TIMING_KEYS = frozenset({"seconds", "load_seconds", "first_measured"})


def without_timings(x):
    """``x`` (JSON data) without its wall times (:data:`TIMING_KEYS`, at any depth): what two runs of the same
    work must hold equal."""
    if isinstance(x, dict):
        return {k: without_timings(v) for k, v in x.items() if k not in TIMING_KEYS}
    if isinstance(x, list):
        return [without_timings(v) for v in x]
    return x


def assert_same_results(got, want, kept):
    """Two (MUI, token log-probs, calibration) collector triples hold the same results in float64: equal
    key-neuron sets (some found), log-probs to float32 storage (NaN where NaN), option probabilities to 1e-12."""
    (mui_s, lp_s, cal_s), (mui_t, lp_t, cal_t) = got, want
    for a, b in zip(mui_s.results(), mui_t.results(), strict=True):
        assert a.tolist() == b.tolist()
    assert sum(len(s) for s in mui_s.results()) > 0
    for a, b in zip(lp_s.prompt_results(), lp_t.prompt_results(), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)  # float32 storage of float64 values
    for a, b, k in zip(lp_s.response_results(), lp_t.response_results(), kept, strict=True):
        assert len(a) == len(k)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    for a, b in zip(cal_s.probs, cal_t.probs, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module of tiny models (fastest, and immune to a busy machine); restored after."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def benchmark_script(name: str):
    """A script of benchmarks/ (not a package) loaded as a module, e.g. ``benchmark_script("contamination_control")``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def tiny_yaml(tmp_path):
    """Write a YAML file and return its path."""

    def write(text: str, name: str = "models.yaml"):
        p = tmp_path / name
        p.write_text(text)
        return p

    return write


SMALL_VOCAB = 2048
_SMALL_TOK: Path | None = None


def small_tokenizer_dir() -> Path:
    """The packaged SmolLM2 tokenizer cut to its first SMALL_VOCAB tokens, written once per process.

    The same byte-level BPE, special tokens and chat template, with the merges whose result is among
    the kept ids: every text still encodes and decodes exactly (the 256 byte tokens are kept), in
    about 1.3 times as many tokens. A tiny model's cost is nearly all in its embedding and LM head
    (hidden 64 x 49,152 tokens), so the tests that train a model use this one: a 24 times smaller
    head behind the same tokenizer code.
    """
    import atexit
    import json
    import tempfile

    global _SMALL_TOK
    if _SMALL_TOK is None:
        from reporter.models.packaged import PACKAGED, tokenizer_dir

        src = tokenizer_dir(PACKAGED["smollm2-135m-instruct"])
        spec = json.loads((src / "tokenizer.json").read_text())
        vocab = {t: i for t, i in spec["model"]["vocab"].items() if i < SMALL_VOCAB}
        spec["model"]["vocab"] = vocab
        spec["model"]["merges"] = [m for m in spec["model"]["merges"]
                                   if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
        out = Path(tempfile.mkdtemp(prefix="reporter-small-tok-"))
        atexit.register(shutil.rmtree, out, ignore_errors=True)
        (out / "tokenizer.json").write_text(json.dumps(spec))
        # the tokenizer's files only: ``src`` may be the converted checkpoint, whose 0.5 GB of weights
        # were copied here once per process (and never removed) until this kept to the tokenizer
        for name in ("tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
            if (src / name).is_file():
                shutil.copy(src / name, out / name)
        _SMALL_TOK = out
    return _SMALL_TOK


@contextlib.contextmanager
def transformers_warnings():
    """The messages transformers logs at WARNING and above inside the block, whatever a run did to its logging before
    (quietened it, or gave its handler a stream that is gone since), and its warn-once memory forgotten."""
    import logging

    from transformers.utils import logging as hf_logging

    seen: list[str] = []
    catch = logging.Handler(logging.WARNING)
    catch.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    lib = logging.getLogger("transformers")
    level = lib.level
    lib.addHandler(catch)
    lib.setLevel(logging.WARNING)
    hf_logging.warning_once.cache_clear()
    try:
        yield seen
    finally:
        lib.removeHandler(catch)
        lib.setLevel(level)


def small_random(text: str) -> str:
    """Models YAML ``text`` with every ``random: {...}`` block borrowing the small tokenizer
    (``random.tokenizer``, :func:`small_tokenizer_dir`): the same run at a fraction of the cost, for tests
    whose subject is not the tokenizer.
    """
    return text.replace("random: {", f"random: {{tokenizer: {small_tokenizer_dir()}, ")


def tiny_lm(family: str = "llama", *, kind: str = "base", init_std: float = 0.5, seed: int = 0,
            vocab: str = "full", **size):
    """A LoadedModel around a tiny random model with the packaged SmolLM2 tokenizer.

    ``init_std`` well above the usual 0.02 gives peaked next-token distributions, so greedy
    decoding is not decided by float rounding between near-equal logits. ``vocab="small"``: the same
    tokenizer cut to SMALL_VOCAB tokens (:func:`small_tokenizer_dir`), for the tests that train a model.
    """
    from transformers import AutoModelForCausalLM

    from reporter.config import ModelSpec
    from reporter.models.adapters import get_adapter
    from reporter.models.loading import LoadedModel, load_tokenizer
    from reporter.models.packaged import PACKAGED, tokenizer_dir
    from reporter.models.random_archs import random_config

    tok = load_tokenizer(str(small_tokenizer_dir() if vocab == "small"
                             else tokenizer_dir(PACKAGED["smollm2-135m-instruct"])))
    cfg = random_config(family, vocab=len(tok), **{**TINY, **size})
    cfg.initializer_range = init_std
    cfg.pad_token_id, cfg.eos_token_id, cfg.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    spec = ModelSpec(name=f"tiny-{family}", source=f"random:{family}", kind=kind, max_batch_size=8)
    return LoadedModel(spec=spec, model=model, tokenizer=tok, adapter=get_adapter(model), device=torch.device("cpu"),
                       dtype=torch.float32, kind=kind, use_chat_template=kind == "instruct", meta={})


def train_on(lm, texts, *, steps: int, lr: float = 1e-2) -> None:
    """Contaminate ``lm`` on purpose: full-batch AdamW on ``texts`` (padding masked out) for ``steps`` steps."""
    enc = lm.tokenizer(list(texts), return_tensors="pt", padding=True)
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    lm.model.train()
    opt = torch.optim.AdamW(lm.model.parameters(), lr=lr)
    for _ in range(steps):
        loss = lm.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    lm.model.eval()


# --- the shared finished run -------------------------------------------------------------------------

RUN_YAML = """\
seed: 3
models:
  - {name: Llama chat, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}}
  - {name: GPT-2 base, source: random:gpt2, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}}
  - {name: Untrained, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4, seed: 9}}
"""
PROFILE_YAML = """\
lpp: {n_texts: 3, context: 40, min_tokens: 40}
contamination: {verbatim_items: 2, reference_texts: 4}
smoke_texts: 2
tasks:
  - {name: arc_easy, limit: 2, max_new_tokens: 4}
  - {name: spc, limit: 2, max_new_tokens: 4}
"""


def _session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's base temporary directory, the same for every pytest-xdist worker."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _run_once(root: Path, files: dict[str, str], formats: str = "html,pdf,md") -> Path:
    """``reporter run`` (card in ``formats`` included) of ``root/models.yaml`` into ``root/run``, made once per session.

    ``files`` (name: text) are written into ``root`` first. The first process to ask builds it under a
    file lock; every other one (the other xdist workers) waits and reads the same directory.
    """
    root.mkdir(exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "done").is_file():
            from click.testing import CliRunner

            from reporter.cli import main

            shutil.rmtree(root / "run", ignore_errors=True)  # a build that failed half-way
            for name, text in files.items():
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_text(text)
            r = CliRunner().invoke(main, ["run", str(root / "models.yaml"), "-o", str(root / "run"),
                                          "--no-progress", "--format", formats])
            assert r.exit_code == 0, r.output
            (root / "stderr.txt").write_text(r.stderr)  # what a user of --no-progress reads
            (root / "stdout.txt").write_text(r.stdout)  # the run's summary
            (root / "done").write_text("")
    return root / "run"


def shared_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``reporter run`` (card.html included) of RUN_YAML with PROFILE_YAML, made once per session (:func:`_run_once`).

    Its ``models.yaml`` and ``profile.yaml`` sit beside it (``run.parent``).
    """
    root = _session_dir(tmp_path_factory) / "finished-run"
    return _run_once(root, {"profile.yaml": PROFILE_YAML,
                            "models.yaml": f"profile: {root / 'profile.yaml'}\n" + small_random(RUN_YAML)},
                     formats="html")  # the PDF and Markdown cards are tests/test_card.py's and test_markdown.py's


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """A finished, rendered tiny run: three models (Llama chat, GPT-2 base, Untrained), arc_easy and spc.

    Shared by the whole session (and by the doctests): read it, never write to it; a test that changes a
    run works on its own copy (:func:`copy_run`).
    """
    return shared_run(tmp_path_factory)


# --- the shared finished run of lm-eval tasks ----------------------------------------------------------------

LM_EVAL_GROUP_YAML = """\
group: mmlu_mini
task: [mmlu_anatomy, mmlu_astronomy, mmlu_virology]
aggregate_metric_list:
  - metric: acc
    weight_by_size: true
metadata:
  version: 1.0
"""
LM_EVAL_MODELS_YAML = """\
seed: 3
models:
  - {name: Llama chat, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}}
  - {name: Untrained, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4, seed: 9}}
"""
LM_EVAL_PROFILE_YAML = """\
lpp: {enabled: false}
contamination: {verbatim_items: 2, reference_texts: 4}
smoke_texts: 2
lm_eval_include: [packaged, groups]
tasks:
  - {lm_eval: arc_challenge, limit: 6}
  - {lm_eval: mmlu_mini, limit: 2}
"""


#: the session's one store of lm-eval's own task index (set by :func:`_session_lm_eval_index`)
_SHARED_INDEX: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def _session_lm_eval_index(tmp_path_factory):
    """One directory for the stored lm-eval index, shared by every private cache of the session and both xdist
    workers: the index (~10 s to build) depends only on lm-eval's YAML files, which the store's key checks."""
    path = _session_dir(tmp_path_factory) / "lm-eval-index"
    path.mkdir(exist_ok=True)
    _SHARED_INDEX[:] = [path]
    yield


@pytest.fixture(autouse=True)
def _forget_plugin_modules():
    """The ``--plugin`` modules a test imported, and the entry points it made up, are forgotten after it, as a new
    process would not have them: they are part of every later run's code version
    (:func:`reporter.plugin_code.plugin_sources`), and a run made before them was refused as another code's (seen with
    two workers, by the order the files fell to them). A group the test loaded with no entry point is kept: that is
    what this environment has, and loading it again costs a scan of every distribution."""
    import sys

    from reporter.plugin_import import _PLUGIN_MODULES, _PLUGIN_SEARCH, _REBOUND
    from reporter.registry import _GROUPS

    before, groups = dict(_PLUGIN_MODULES), dict(_GROUPS)
    yield
    for name in [n for n in _PLUGIN_MODULES if n not in before]:
        del _PLUGIN_MODULES[name]
        _PLUGIN_SEARCH.pop(name, None)
        _REBOUND.pop(name, None)
        if name.startswith("reporter_plugin_"):
            mod = sys.modules.pop(name, None)
            for alias in [a for a, m in list(sys.modules.items()) if m is mod and mod is not None]:
                del sys.modules[alias]  # its plain name, bound for the plugins beside it
    for group in [g for g in _GROUPS if g not in groups and _GROUPS[g]]:
        del _GROUPS[group]
    _GROUPS.update(groups)


@contextlib.contextmanager
def lm_eval_env(root: Path):
    """Reporter's cache, the datasets cache and offline datasets under ``root`` (the user's caches untouched);
    the cache's stored lm-eval index is the session's (:func:`_session_lm_eval_index`)."""
    import datasets

    from reporter.tasks import lm_eval_offline as lo
    from reporter.tasks import lm_eval_source as src

    index = root / "cache" / "reporter" / "lm-eval-index"
    if _SHARED_INDEX and not index.exists():
        index.parent.mkdir(parents=True, exist_ok=True)
        index.symlink_to(_SHARED_INDEX[0], target_is_directory=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(root / "cache"))
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", root / "hf_datasets")
        mp.setattr(lo, "_memo", {})
        mp.setattr(src, "_LOADED", {})
        yield


@pytest.fixture(scope="session")
def lm_eval_run(tmp_path_factory) -> dict:
    """``reporter run`` (card included) of two tiny models on lm-eval's own arc_challenge (6 items) and a
    3-subject MMLU group (2 items each) over the packaged offline data; made once per session, read-only.

    Returns ``run`` (the run directory), ``root`` (its models.yaml, profile.yaml, groups/ and caches) and
    ``packaged`` (the offline task directory it used).
    """
    root = _session_dir(tmp_path_factory) / "lm-eval-run"
    root.mkdir(exist_ok=True)
    with lm_eval_env(root):
        from reporter.tasks.lm_eval_offline import packaged_include_dir

        packaged = str(packaged_include_dir())
        _run_once(root, {"groups/mmlu_mini.yaml": LM_EVAL_GROUP_YAML, "profile.yaml": LM_EVAL_PROFILE_YAML,
                         "models.yaml": f"profile: {root / 'profile.yaml'}\n" + small_random(LM_EVAL_MODELS_YAML)})
    return {"run": root / "run", "root": root, "packaged": packaged}


# --- lm-eval test modules ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lmeval_lm():
    """A tiny Llama with peaked next-token distributions (greedy decoding is not decided by rounding), on the
    small-vocabulary tokenizer (lm-eval's hf model runs every (context, option) pair whole: the head is its cost)."""
    return tiny_lm("llama", init_std=0.5, vocab="small")


@pytest.fixture(scope="module")
def lmeval_env(tmp_path_factory, lmeval_lm):
    """For an lm-eval test module: a private reporter cache, datasets cache and offline datasets; the packaged tasks.

    (After ``lmeval_lm``: the tiny model's tokenizer comes from the user's cache, where the rest of the suite
    extracts it.)
    """
    from reporter.tasks.lm_eval_offline import packaged_include_dir

    tmp = tmp_path_factory.mktemp("lm_eval_tasks")
    with lm_eval_env(tmp):
        yield {"tmp": tmp, "packaged": str(packaged_include_dir())}


def rename_model(run: Path, old: str, new: str) -> None:
    """Rename model ``old`` to ``new`` everywhere in a run's results.json and manifest.json, as a hand edit would
    (its ``slug``, the name of its directory, stays)."""
    def sub(o):
        if isinstance(o, dict):
            return {(new if k == old else k): (v if k == "slug" else sub(v)) for k, v in o.items()}
        if isinstance(o, list):
            return [sub(x) for x in o]
        return new if o == old else o

    for name in ("results.json", "manifest.json"):
        (run / name).write_text(json.dumps(sub(json.loads((run / name).read_text()))))


def copy_run(run: Path, dest: Path) -> Path:
    """A private copy of a finished run (``dest`` must not exist yet), for a test that changes it."""
    shutil.copytree(run, dest)
    return dest


_DOCTEST_OBJECTS: dict = {}


def doctest_objects(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What the doctests of ``reporter/`` see, made once per process: ``lm`` (a tiny Llama), ``run_dir`` (this
    process's own copy of the shared run, since some doctests write into their run; its models are all untrained
    references) and ``card_run_dir`` (a copy of ``tests/data/run2``: the packaged SmolLM2 as ``smol``, a trained
    model's results, and an untrained ``tiny``)."""
    if not _DOCTEST_OBJECTS:
        run = copy_run(shared_run(tmp_path_factory), tmp_path_factory.mktemp("doctest") / "run")
        card_run = tmp_path_factory.mktemp("doctest-card") / "run"
        shutil.copytree(Path(__file__).parent / "data" / "run2", card_run)
        _DOCTEST_OBJECTS.update(lm=tiny_lm("llama"), run_dir=run, card_run_dir=card_run)
    return _DOCTEST_OBJECTS


# --- scheduling: the heaviest modules first ----------------------------------------------------------------------

#: test modules by measured cost, heaviest first: every module of at least 5 s of test time (durations of 2026-12-07
#: afternoon, the working tree, two workers; 518 of the suite's 590 s). `make test` runs pytest-xdist with --dist loadfile
#: and --no-loadscope-reorder, so modules are handed out in collection order: the long ones first keep one worker from
#: running a long module alone at the end. (Without that flag pytest-xdist orders modules by their number of tests,
#: and this list had no effect: test_resume.py, 43 s in 13 tests, ran last and left the other worker idle 13 s.)
#: Scheduling only: a stale list costs wall time, never a result; modules not listed keep their order after these.
HEAVY_FIRST = ("test_card", "test_hostile", "test_entry_points", "test_resume", "test_lm_eval_cli", "test_split_reference",
               "test_option_order_null", "test_robustness", "test_board", "test_showcase", "test_resume_validity",
               "test_contamination_control", "test_loading", "test_scaleout", "test_golden", "test_plugin_failures",
               "test_run", "test_sandbox", "test_markdown", "test_sae", "test_architecture", "test_ranking", "test_scoring",
               "test_compare", "test_control_power", "test_lm_eval_offline", "test_collector_paths", "test_lm_eval_tasks",
               "test_contamination", "test_analyse", "test_lm_eval_profile", "test_model_cache", "test_tree",
               "test_coreset")


def pytest_collection_modifyitems(config, items):
    """Put the modules of HEAVY_FIRST first, in that order; every module's own test order is kept."""
    rank = {name: k for k, name in enumerate(HEAVY_FIRST)}

    def key(item):
        mod = Path(str(item.fspath)).stem
        return rank.get(mod, len(rank)) if Path(str(item.fspath)).parent.name == "tests" else len(rank)

    items[:] = [it for _, it in sorted(enumerate(items), key=lambda p: (key(p[1]), p[0]))]
