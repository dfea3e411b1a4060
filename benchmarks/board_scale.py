"""How long ``reporter board`` takes over 20 runs × 4 models, first build and rebuild after adding one run.

What a user waits for: ``reporter board`` as a fresh process, start to exit, peak resident set from
``/usr/bin/time``. The runs are built from one real run of four tiny local models (``reporter run``, a
40-item multiple-choice task and gsm8k-free profile, MUI on): each of the 20 copies is a new "release"
of all four models (``version: 1.<j>``), with a seeded share of its per-item outcomes flipped (and its
task scores recomputed from them), so that every copy is a distinct version and every step between
consecutive versions is a real paired comparison (4 releases × 19 steps). Then a 21st run is added and
the board rebuilt: only it is read, and only the 4 new steps are compared.

Usage::

    python benchmarks/board_scale.py [--runs 20] [--template RUN_DIR] [--keep]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROFILE = """\
name: board-scale
mui: {top_ratio: 0.01, mode: score}
lpp: {enabled: false}
contamination: {verbatim_items: 0, reference_texts: 4, order_items: 0, split_items: 0}
smoke_texts: 2
tasks:
  - {name: arc_easy, limit: 40, shots: 0, max_new_tokens: 2}
"""


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def template_run(work: Path) -> Path:
    """One real run of four tiny local models (random init, saved as model directories)."""
    from tests.conftest import small_tokenizer_dir
    from tests.test_golden import _save_local_model

    tok = small_tokenizer_dir()
    for j, fam in enumerate(("llama", "qwen2", "llama", "qwen2")):
        _save_local_model(work / f"m{j}", fam, 10 + j, tok)
    (work / "profile.yaml").write_text(PROFILE)
    (work / "models.yaml").write_text("profile: profile.yaml\nseed: 5\nmodels:\n" + "".join(
        f"  - {{name: M{j}, source: ./m{j}}}\n" for j in range(4)))
    subprocess.run([_bin("reporter"), "run", str(work / "models.yaml"), "-o", str(work / "template"),
                    "--no-progress", "--format", "html,md"], check=True, stdout=subprocess.DEVNULL)
    return work / "template"


def make_version(template: Path, dest: Path, j: int) -> None:
    """Copy ``template`` as version 1.j of every model: a seeded share of outcomes flipped, scores recomputed."""
    shutil.copytree(template, dest)
    res = json.loads((dest / "results.json").read_text())
    man = json.loads((dest / "manifest.json").read_text())
    for m in (man.get("resolved") or {}).get("config", {}).get("models", []):
        m["version"] = f"1.{j}"
    for k, (name, e) in enumerate(sorted(res["models"].items())):
        rng = np.random.default_rng(1000 * j + k)
        for task, s in e["tasks"].items():
            path = dest / "models" / e["slug"] / "tasks" / task / "samples.jsonl"
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            for r in rows:
                if j and rng.random() < 0.1 * (1 + (j + k) % 3):
                    r["score"] = 1.0 - float(r["score"])
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            s["score"] = float(np.mean([r["score"] for r in rows]))
    res["run"]["created"] = f"2026-12-{1 + j // 24:02d}T{j % 24:02d}:00:00+00:00"
    (dest / "results.json").write_text(json.dumps(res))
    (dest / "manifest.json").write_text(json.dumps(man))


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (GB) and the last stdout line of one fresh process."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "MAXRSS %M", *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(p.stdout + p.stderr)
    rss = next(int(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("MAXRSS"))
    return wall, rss / 1e6, p.stdout.strip().splitlines()[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--template", type=Path, default=None, help="an analysed run to copy (default: build one)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="board_scale-"))
    template = args.template or template_run(work)
    runs = []
    for j in range(args.runs + 1):
        make_version(template, work / f"v1.{j}", j)
        runs.append(str(work / f"v1.{j}"))
    site = work / "site"
    first = timed([_bin("reporter"), "board", *runs[:-1], "-o", str(site)])
    again = timed([_bin("reporter"), "board", *runs, "-o", str(site)])
    same = timed([_bin("reporter"), "board", *runs, "-o", str(site)])
    doc = json.loads((site / "board.json").read_text())
    print("| build | runs | models | wall s | peak RSS GB | terminal line |\n|---|---|---|---|---|---|")
    for what, n, (wall, rss, line) in (("first", args.runs, first), ("after adding one run", args.runs + 1, again),
                                       ("unchanged", args.runs + 1, same)):
        print(f"| {what} | {n} | {4 * n} | {wall:.1f} | {rss:.2f} | {line} |")
    print(f"board.json: {len(doc['rows'])} rows, {len(doc['history'])} histories, "
          f"{sum(len(h['steps']) for h in doc['history'])} steps, in-process {doc['seconds']} s (last build)")
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
