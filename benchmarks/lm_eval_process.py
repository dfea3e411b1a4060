"""What a user waits for, start to exit: ``lm_eval --model hf`` against ``reporter run`` on the same lm-eval task.

Both tools run as fresh processes, as a user runs them, on lm-eval's own ``arc_challenge`` YAML
over reporter's offline copy of the data (``lm_eval_include: [packaged]``), the same documents
(reporter's seeded choice, given to lm-eval as ``--samples``), the same model files
(SmolLM2-135M-Instruct converted once into reporter's cache), float32 on the CPU, batch size 8:

``lm-eval``
    ``lm_eval run --model hf --model_args pretrained=DIR,dtype=float32 --tasks arc_challenge
    --include_path PACKAGED --samples {...} --batch_size 8 --device cpu``
``reporter``
    ``reporter run MODELS --no-render``: the same model and documents, collectors on (MUI, token
    log-probs; LPP and the contamination evidence off, as they are extra measurements lm-eval does
    not make; ``--evidence`` turns the evidence on too).

Each round runs both, order rotated, with fresh output directories; the figure is the median wall
time and the peak resident set (``/usr/bin/time -f %M``). The per-item ``acc`` of both is compared.

Usage::

    python benchmarks/lm_eval_process.py --docs 100 --shots 0 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from process_bench import run_timed as timed  # noqa: E402 - one timer for both fresh-process benchmarks


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--shots", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--evidence", action="store_true", help="reporter: the contamination evidence passes on too")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from reporter.config import ModelSpec
    from reporter.models.loading import load_model
    from reporter.models.packaged import PACKAGED, entry_dir
    from reporter.tasks.lm_eval_offline import packaged_include_dir
    from reporter.tasks.lm_eval_source import resolve, select_docs

    load_model(ModelSpec(name="s", source="packaged:smollm2-135m-instruct"))  # converted once into the cache
    model_dir = entry_dir(PACKAGED["smollm2-135m-instruct"]) / "model"
    packaged = str(packaged_include_dir())
    n = len(resolve("arc_challenge", (packaged,)).task("arc_challenge").eval_docs)
    ids = select_docs(n, "arc_challenge", limit=args.docs, seed=args.seed)
    work = Path(tempfile.mkdtemp(prefix="lm_eval_process-"))
    profile = work / "profile.yaml"
    contamination = "" if args.evidence else "contamination: {verbatim_items: 0, reference_texts: 0, order_items: 0, " \
                                              "split_items: 0}\n"
    profile.write_text(f"lpp: {{enabled: false}}\nsmoke_texts: 1\n{contamination}lm_eval_include: [packaged]\n"
                       f"tasks:\n  - {{lm_eval: arc_challenge, limit: {args.docs}, shots: {args.shots}}}\n")
    models = work / "models.yaml"
    models.write_text(f"profile: {profile}\nseed: {args.seed}\ndevice: cpu\nmodels:\n"
                      f"  - {{name: SmolLM2, source: {model_dir}, dtype: float32, max_batch_size: 8}}\n")
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    cmds = {
        "lm-eval": lambda out: [_bin("lm_eval"), "run", "--model", "hf", "--model_args",
                                f"pretrained={model_dir},dtype=float32", "--tasks", "arc_challenge",
                                "--include_path", packaged, "--samples", json.dumps({"arc_challenge": ids}),
                                "--num_fewshot", str(args.shots), "--batch_size", "8", "--device", "cpu",
                                "--output_path", str(out), "--log_samples"],
        "reporter": lambda out: [_bin("reporter"), "run", str(models), "-o", str(out), "--no-render", "--no-progress"],
    }
    times: dict[str, list[float]] = {k: [] for k in cmds}
    rss: dict[str, list[float]] = {k: [] for k in cmds}
    names = list(cmds)
    outs: dict[str, Path] = {}
    for r in range(args.rounds):
        for name in names[r % 2:] + names[:r % 2]:
            out = work / f"{name}-{r}"
            wall, peak = timed(cmds[name](out), env, work / f"{name}-{r}.log")
            times[name].append(wall)
            rss[name].append(peak)
            outs[name] = out
    theirs = {}
    for line in open(next(outs["lm-eval"].glob("*/samples_arc_challenge_*.jsonl"))):
        s = json.loads(line)
        theirs[str(s["doc_id"])] = float(s["acc"])
    ours = {json.loads(x)["id"]: json.loads(x)["score"]
            for x in (outs["reporter"] / "models" / "SmolLM2" / "tasks" / "arc_challenge" / "samples.jsonl")
            .read_text().splitlines()}
    differ = sorted(k for k in theirs if theirs[k] != ours.get(k))
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
           "docs": args.docs, "shots": args.shots, "rounds": args.rounds, "evidence": args.evidence,
           "wall_s": times, "median_s": med, "ratio": med["reporter"] / med["lm-eval"],
           "peak_rss_gb": {k: max(v) for k, v in rss.items()}, "acc_differs": differ}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print("| path | median wall s | ratio | peak RSS GB |\n|---|---|---|---|")
        for k in names:
            print(f"| {k} | {med[k]:.1f} | {med[k] / med['lm-eval']:.2f} | {max(rss[k]):.2f} |")
        print(f"per-item acc differs on {len(differ)} of {len(theirs)} documents")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
