"""``benchmarks/process_bench.py``'s breakdown of a run (``throughput.py --process``): what each task and each
evidence pass of a real finished run record, summed the plain way."""
from __future__ import annotations

import json

import numpy as np

from .conftest import benchmark_script


def test_the_breakdown_sums_each_task_and_each_evidence_pass_of_a_finished_run(finished_run):
    pb = benchmark_script("process_bench")
    for mdir in sorted((finished_run / "models").iterdir()):
        got = pb.where_time_went(finished_run, mdir.name)
        tasks = {str(p.relative_to(mdir)): json.loads(p.read_text())["seconds"] for p in mdir.glob("tasks/*/summary.json")}
        assert len(tasks) == 2 and all(s > 0 for s in tasks.values())  # arc_easy and spc, each timed
        for name, sec in tasks.items():
            assert got[name] == round(sec, 2)
        assert abs(got["tasks_s"] - sum(tasks.values())) < 0.006
        work = json.loads((mdir / "model_work.json").read_text()) if (mdir / "model_work.json").is_file() else {}
        skip = {"summary.json", "smoke.json", "model.json", "model_work.json", "error.json"}
        if work.get("reference") == "cached":  # read back from the cache: it cost this run nothing
            skip |= {"reference_logprobs.npz", "reference_verbatim.json"}
        evidence = 0.0
        for p in [*mdir.rglob("*.json"), *mdir.rglob("*.npz")]:
            if p.name in skip:
                continue
            if p.suffix == ".npz":
                with np.load(p, allow_pickle=False) as z:
                    rec = json.loads(str(z["meta"])) if "meta" in z.files else {}
            else:
                rec = json.loads(p.read_text())
            if isinstance(rec, dict) and isinstance(rec.get("seconds"), (int, float)):
                evidence += rec["seconds"]
        assert abs(got["evidence_s"] - evidence) < 0.006
        assert got["load_s"] == json.loads((mdir / "model.json").read_text())["load_seconds"]
