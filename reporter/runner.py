"""The collect stage: load each model, measure, write artifacts; then build results.json.

Each finished piece of work is written to the run directory as soon as it exists, so a
failed or interrupted run loses nothing and a rerun picks up where it stopped.
"""
from __future__ import annotations

import datetime as _dt
import gc
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .artifacts import RunDir, read_json, write_json
from .config import RunConfig, slugify
from .errors import UserError
from .manifest import build_manifest
from .results import write_results


#: generated probes have no published text that could have leaked into training data
NO_VERBATIM = ("spc", "ar")


def _log(msg: str) -> None:
    """Progress messages go to stderr (stdout carries only the final summary)."""
    tqdm.write(msg, file=sys.stderr)


def default_output(cfg: RunConfig) -> Path:
    stem = Path(cfg.path).stem if not cfg.path.startswith("<") else "default"
    return Path("reports") / f"{slugify(stem)}-{_dt.date.today().isoformat()}"


def _model_done(rd: RunDir, slug: str, profile: dict) -> bool:
    mdir = rd.model_dir(slug)
    if not (mdir / "model.json").is_file() or not (mdir / "smoke.json").is_file():
        return False
    if profile.get("lpp", {}).get("enabled") and not (mdir / "lpp.json").is_file():
        return False
    if not (mdir / "reference_logprobs.npz").is_file():
        return False
    validate = profile.get("mui", {}).get("validate_neurons")
    for t in profile.get("tasks", []):
        tdir = rd.task_dir(slug, t["name"])
        if not (tdir / "summary.json").is_file() or (validate and not (tdir / "validation.json").is_file()):
            return False
        if t["name"] not in NO_VERBATIM and not (tdir / "verbatim.json").is_file():
            return False
    return True


def collect_model(cfg: RunConfig, index: int, root: str, profile: dict, *, force: bool = False,
                  progress: bool = True) -> list[str]:
    """The collect stage for ONE model (a job): load, measure, write artifacts. Returns failure lines.

    Self-contained so an executor can run it anywhere that sees the run directory.
    """
    from .evaluate import contamination_evidence, run_task, validate_neurons
    from .logprobs import collect_reference_logprobs
    from .loading import load_model
    from .smoke import smoke

    rd = RunDir(root)
    spec = cfg.models[index]
    slug = spec.slug
    mdir = rd.model_dir(slug)
    if force and mdir.exists():
        import shutil

        shutil.rmtree(mdir)
    elif _model_done(rd, slug, profile):
        _log(f"{spec.name}: already complete in {mdir}, skipping")
        return []
    (mdir / "error.json").unlink(missing_ok=True)
    failures: list[str] = []
    try:
        lm = load_model(spec, run_device=cfg.device, run_dtype=cfg.dtype, run_seed=cfg.seed)
    except UserError as e:
        write_json(mdir / "error.json", {"error": str(e)})
        _log(f"{spec.name}: FAILED: {e}")
        return list(e.lines)
    write_json(mdir / "model.json", {"name": spec.name, **lm.meta})
    if not (mdir / "smoke.json").is_file():
        write_json(mdir / "smoke.json", smoke(lm, n_texts=profile.get("smoke_texts", 16), progress=progress))
    lpp_cfg = profile.get("lpp", {})
    if lpp_cfg.get("enabled") and not (mdir / "lpp.json").is_file():
        from .lpp import run_lpp

        try:
            write_json(mdir / "lpp.json", run_lpp(lm, corpus=lpp_cfg["corpus"], n_texts=lpp_cfg["n_texts"],
                                                  min_tokens=lpp_cfg["min_tokens"], context=lpp_cfg["context"],
                                                  step=lpp_cfg.get("step"), layers=lpp_cfg["layers"],
                                                  batch_size=spec.max_batch_size))
        except UserError as e:
            failures.extend(f"model '{spec.name}', LPP: {line}" for line in e.lines)
            _log(f"{spec.name} / LPP: FAILED: {e}")
    cont = profile.get("contamination", {})
    collect_reference_logprobs(lm, mdir / "reference_logprobs.npz", n=cont.get("reference_texts", 64))
    mui_cfg = profile.get("mui", {"enabled": False})
    for tcfg in profile.get("tasks", []):
        tdir = rd.task_dir(slug, tcfg["name"])
        try:
            summary = run_task(lm, tcfg, tdir, seed=cfg.seed, mui_cfg=mui_cfg, progress=progress)
            if tcfg["name"] not in NO_VERBATIM:
                contamination_evidence(lm, tcfg, tdir, seed=cfg.seed, max_items=cont.get("verbatim_items", 16))
            if mui_cfg.get("validate_neurons") and mui_cfg.get("enabled", True):
                validate_neurons(lm, tcfg, tdir, seed=cfg.seed, progress=progress)
        except UserError as e:
            failures.extend(f"model '{spec.name}', task '{tcfg['name']}': {line}" for line in e.lines)
            _log(f"{spec.name} / {tcfg['name']}: FAILED: {e}")
            continue
        _log(f"{spec.name} / {tcfg['name']}: {100 * summary['score']:.1f}% "
             f"[{100 * summary['ci_low']:.1f}, {100 * summary['ci_high']:.1f}] n={summary['n']}"
             + (f", MUI {summary['mui']:.2f}%" if "mui" in summary else ""))
    del lm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return failures


def run(cfg: RunConfig, output: str | Path | None = None, *, profile: dict | None = None,
        force: bool = False, progress: bool = True, command: list[str] | None = None,
        executor: str | None = None, address: str | None = None) -> dict:
    """Run every model of ``cfg`` and return the results dict (also written to results.json).

    ``executor`` ``local`` (default) runs the models one after another here; ``ray`` makes
    each model a Ray task (see :mod:`reporter.executors`). Then the analyse stage runs on
    the artifacts.

    >>> from reporter.config import parse_config
    >>> cfg = parse_config([{"name": "tiny", "source": "random:llama",
    ...                      "random": {"layers": 2, "hidden": 64, "intermediate": 128, "heads": 4}}])
    >>> res = run(cfg, "/tmp/reporter-doctest", progress=False)   # doctest: +SKIP
    """
    from .executors import get_executor

    profile = profile or {"name": None, "tasks": []}
    rd = RunDir(output or cfg.output or default_output(cfg))
    rd.root.mkdir(parents=True, exist_ok=True)
    old = read_json(rd.manifest)
    manifest = build_manifest(cfg, profile, command)
    if old and old.get("config_hash") != manifest["config_hash"] and not force:
        raise UserError(f"{rd.root}: holds a run with a different configuration (config hash "
                        f"{old.get('config_hash')} vs {manifest['config_hash']}); choose another -o/--output or pass --force")
    write_json(rd.manifest, manifest)
    run_jobs = get_executor(executor or cfg.executor, address or cfg.address)
    failures = run_jobs(cfg, str(rd.root.resolve()), profile, force=force, progress=progress)
    write_results(rd.root)
    from .analyse import write_analysis

    write_analysis(rd.root)
    res = read_json(rd.results)
    if failures:
        raise UserError(failures + [f"{rd.root}: the other models' results are saved; fix the above and rerun to resume"])
    return res
