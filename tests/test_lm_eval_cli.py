"""lm-eval tasks through reporter's command line: a group end to end, bad input in one line, the other direction
(`reporter lm-eval --model reporter`), lm-eval's stored task index and the content digest."""
from __future__ import annotations

import json

import numpy as np
import pytest

from reporter.config import TaskConfig
from reporter.errors import UserError


@pytest.fixture(scope="module")
def lm(lmeval_lm):
    return lmeval_lm


@pytest.fixture(scope="module")
def env(lmeval_env):
    return lmeval_env


# --- a group end to end, through `reporter run` -------------------------------------------------------------------

MODELS = """\
profile: profile.yaml
seed: 3
models:
  - {name: Tiny, source: random:llama, random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}}
"""


def _cli(*args):
    from click.testing import CliRunner

    from reporter.cli import main

    return CliRunner().invoke(main, list(args))


def test_a_group_runs_end_to_end_with_lm_evals_aggregation(lm_eval_run, tmp_path):
    """Three MMLU subjects as one lm-eval group (the suite's shared lm-eval run): each a reporter task, the group
    aggregated as lm-eval's own hf model reports it on the same documents; a rerun changes nothing."""
    from lm_eval.evaluator import evaluate
    from lm_eval.models.huggingface import HFLM

    from reporter.collect.lm_eval_run import configure
    from reporter.config import ModelSpec
    from reporter.models.loading import load_model
    from reporter.tasks.lm_eval_source import resolve
    from tests.conftest import copy_run, lm_eval_env, small_tokenizer_dir

    run, root = lm_eval_run["run"], lm_eval_run["root"]
    results = json.loads((run / "results.json").read_text())
    model = results["models"]["Llama chat"]
    leaves = ["mmlu_anatomy", "mmlu_astronomy", "mmlu_virology"]
    assert set(leaves) <= set(model["tasks"])
    for leaf in leaves:
        entry = model["tasks"][leaf]
        assert entry["n"] == 2 and entry["lm_eval"]["group"] == "mmlu_mini" and entry["lm_eval"]["n_shot"] == 0
        assert entry["chance"] == 0.25 and "mui" in entry
        assert entry["seconds"] > 0  # the leaf's own requests and summary, timed
    groups = json.loads((run / "models" / "Llama-chat" / "lm_eval_groups.json").read_text())
    group = groups["mmlu_mini"]["metrics"]  # the run's summary on stdout gives lm-eval's aggregate beside the leaves
    said = [ln for ln in (root / "stdout.txt").read_text().splitlines() if ln.startswith("Llama chat: ")]
    assert len(said) == 1 and said[0].endswith(f", group mmlu_mini (3 tasks, lm-eval) {100 * group['acc,none']:.1f}% "
                                                f"± {100 * group['acc_stderr,none']:.1f}"), said
    spec = ModelSpec(name="Llama chat", source="random:llama",  # as the shared run's models.yaml (small_random)
                     random={"layers": 2, "hidden": 64, "intermediate": 96, "heads": 4,
                             "tokenizer": str(small_tokenizer_dir())})
    with lm_eval_env(root):
        lm = load_model(spec, run_seed=3)
        resolved = resolve("mmlu_mini", (lm_eval_run["packaged"], str(root / "groups")))
        for leaf in leaves:
            configure(resolved.task(leaf), TaskConfig(name=leaf, lm_eval=leaf))
        peer = evaluate(HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=8), resolved.loaded,
                        samples={leaf: model["tasks"][leaf]["lm_eval"]["doc_ids"] for leaf in leaves},
                        log_samples=True)
        assert groups["mmlu_mini"]["metrics"]["acc,none"] == pytest.approx(peer["groups"]["mmlu_mini"]["acc,none"],
                                                                           abs=1e-12)
        assert groups["mmlu_mini"]["subtasks"] == peer["group_subtasks"]["mmlu_mini"]
        for leaf in leaves:
            assert model["tasks"][leaf]["score"] == pytest.approx(peer["results"][leaf]["acc,none"], abs=1e-12)
        # a rerun of the same command finds everything done and changes nothing
        copy = copy_run(run, tmp_path / "run")
        before = (copy / "models" / "Llama-chat" / "tasks" / "mmlu_anatomy" / "samples.jsonl").read_text()
        r = _cli("run", str(root / "models.yaml"), "-o", str(copy), "--no-progress", "--no-render")
    assert r.exit_code == 0, r.output
    assert (copy / "models" / "Llama-chat" / "tasks" / "mmlu_anatomy" / "samples.jsonl").read_text() == before


def test_no_progress_hides_lm_evals_own_bars(lm_eval_run):
    """``--no-progress`` hid reporter's bars but not lm-eval's: three per task (building its requests twice,
    tokenising them) went into a log that asked for none. The shared run was made with ``--no-progress``."""
    stderr = (lm_eval_run["root"] / "stderr.txt").read_text()
    assert "Llama chat / arc_challenge: " in stderr and "Llama chat / mmlu_anatomy: " in stderr  # the run's lines
    assert "it/s" not in stderr and "%|" not in stderr, stderr


def test_no_progress_hides_the_bar_of_lm_evals_bootstrapped_stderr(monkeypatch, capfd):
    """A metric whose stderr lm-eval bootstraps (f1, mcc, bleu …) drew one more bar: lm-eval imports tqdm inside the
    function that draws it, so hiding the bars of lm-eval's modules missed it."""
    from lm_eval.api.metrics import bootstrap_stderr, mean

    from reporter.collect.lm_eval_run import lm_eval_bars

    monkeypatch.setenv("DISABLE_MULTIPROC", "1")  # lm-eval's single-process path: no pool of workers in a test
    for progress in (True, False):  # with progress (the negative control) the bar is drawn
        with lm_eval_bars(progress):
            bootstrap_stderr(mean, [0, 1, 1, 0, 1], 2000)
        assert ("2/2" in capfd.readouterr().err) is progress


# --- bad input: one line, exit 2, nothing written ---------------------------------------------------------------

def _bad(tmp_path, profile: str, models: str = MODELS):
    (tmp_path / "profile.yaml").write_text(profile)
    (tmp_path / "models.yaml").write_text(models)
    r = _cli("run", str(tmp_path / "models.yaml"), "-o", str(tmp_path / "run"), "--no-progress")
    assert r.exit_code == 2, r.output
    assert not (tmp_path / "run").exists()
    lines = [x for x in r.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    return lines[0]


def test_unknown_task_name_gets_a_suggestion(env, tmp_path):
    line = _bad(tmp_path, "lm_eval_include: [packaged]\ntasks:\n  - {lm_eval: arc_chalenge}\n")
    assert "tasks[0].lm_eval" in line and "arc_chalenge" in line and "did you mean 'arc_challenge'" in line


def test_hub_only_dataset_offline_says_how_to_give_a_local_copy(env, tmp_path):
    line = _bad(tmp_path, "tasks:\n  - {lm_eval: winogrande}\n")  # lm-eval's own YAML: its data is on the hub
    assert "tasks[0].lm_eval" in line and "winogrande" in line and "dataset_path: json" in line
    assert "lm_eval_include: [packaged]" in line


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: a connection to it is refused


def test_a_hub_dataset_without_offline_mode_fails_at_once_not_after_retries(env, tmp_path, monkeypatch):
    """Without HF_HUB_OFFLINE the hub client retried with back-off: about 23 s and six "Retrying in Ns" lines
    before the one line. One failed connection now turns its offline mode on while the data loads, and the line
    says which host could not be reached. (The hub here is a closed port of this machine: nothing leaves it.)"""
    import datasets.config
    from huggingface_hub import constants

    from reporter.tasks import hub_reach, lm_eval_source

    for module, attr in ((constants, "HF_HUB_OFFLINE"), (datasets.config, "HF_HUB_OFFLINE"),
                         (datasets.config, "HF_DATASETS_OFFLINE")):
        monkeypatch.setattr(module, attr, False)
    for proxy in hub_reach._PROXIES:
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(lm_eval_source, "_LOADED", {})
    hub_reach._connect.cache_clear()
    try:
        line = _bad(tmp_path, "tasks:\n  - {lm_eval: winogrande}\n")
    finally:
        hub_reach._connect.cache_clear()
    assert "which could not be reached (127.0.0.1 could not be reached: Connection refused)" in line, line
    assert constants.HF_HUB_OFFLINE is False and datasets.config.HF_HUB_OFFLINE is False  # restored after the load


def test_local_task_data_asks_the_hub_nothing(env, tmp_path, monkeypatch):
    """reporter's offline copies (dataset_path: json) load without a connection to the hub being tried."""
    import socket

    import datasets.config
    from huggingface_hub import constants

    from reporter.tasks import hub_reach, lm_eval_source

    for module, attr in ((constants, "HF_HUB_OFFLINE"), (datasets.config, "HF_HUB_OFFLINE")):
        monkeypatch.setattr(module, attr, False)

    def refuse(*a, **k):
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(lm_eval_source, "_LOADED", {})
    hub_reach._connect.cache_clear()
    (tmp_path / "profile.yaml").write_text("lm_eval_include: [packaged]\ntasks:\n  - {lm_eval: arc_easy, limit: 2}\n")
    (tmp_path / "models.yaml").write_text(MODELS)
    try:
        r = _cli("validate", str(tmp_path / "models.yaml"))
    finally:
        hub_reach._connect.cache_clear()
    assert r.exit_code == 0, r.output


def test_a_reachable_hub_is_left_alone(monkeypatch):
    """Negative control: a hub that accepts the connection (a socket listening here) keeps the client as it was."""
    import socket

    from reporter.tasks import hub_reach

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    for proxy in hub_reach._PROXIES:
        monkeypatch.delenv(proxy, raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        hub_reach._connect.cache_clear()
        try:
            assert hub_reach.hub_unreachable() is None
            with hub_reach.offline_while_unreachable() as reason:
                assert reason is None
        finally:
            hub_reach._connect.cache_clear()
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")  # behind a proxy only a request can tell
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    hub_reach._connect.cache_clear()
    try:
        assert hub_reach.hub_unreachable() is None
    finally:
        hub_reach._connect.cache_clear()


def test_an_answer_given_offline_is_not_kept_for_when_the_client_is_online(monkeypatch):
    """The reachability was kept once per process, whatever the client's mode when it was first asked: asked first
    inside a finished task's check (the client offline there), it said "reachable" for the rest of the process, and
    a hub that cannot be reached was then retried for tens of seconds. Only the connection is kept now."""
    import datasets.config
    from huggingface_hub import constants

    from reporter.tasks import hub_reach

    for proxy in hub_reach._PROXIES:
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    hub_reach._connect.cache_clear()
    try:
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        assert hub_reach.hub_unreachable() is None  # offline: nothing to tell
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        assert "could not be reached" in str(hub_reach.hub_unreachable())
    finally:
        hub_reach._connect.cache_clear()


def test_a_task_yaml_with_a_syntax_error_names_its_file(env, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "broken.yaml").write_text("task: broken\ndataset_path: [json\n")
    line = _bad(tmp_path, "lm_eval_include: [mine]\ntasks:\n  - {lm_eval: broken}\n")
    assert "broken.yaml" in line and "line" in line


def test_missing_extra_says_what_to_install(env, tmp_path, monkeypatch):
    from reporter.tasks import lm_eval_source

    monkeypatch.setattr(lm_eval_source, "available", lambda: False)
    line = _bad(tmp_path, "tasks:\n  - {lm_eval: arc_challenge}\n")
    assert "pip install 'reporter[lm-eval]'" in line and "tasks[0].lm_eval" in line


def test_bad_keys_and_values_are_one_line_each(env, tmp_path):
    line = _bad(tmp_path, "lm_eval_include: [packaged]\ntasks:\n  - {lm_eval: arc_challenge, metrc: acc}\n")
    assert "tasks[0].metrc" in line and "did you mean 'metric'" in line
    line = _bad(tmp_path, "lm_eval_include: [packaged]\ntasks:\n  - {lm_eval: arc_challenge, "
                          "lm_eval_config: {doc_to_text: x}}\n")
    assert "tasks[0].lm_eval_config.doc_to_text" in line and "fewshot_split" in line
    line = _bad(tmp_path, "lm_eval_include: [nowhere]\ntasks:\n  - {lm_eval: arc_challenge}\n")
    assert "lm_eval_include[0]" in line and "not a directory" in line


# --- the other direction: an lm-eval command line with --model reporter ---------------------------------------

def test_an_unknown_task_on_the_lm_eval_command_line_is_one_line(env, tmp_path):
    """lm-eval's own refusal of a task name was a ValueError traceback, exit 1."""
    r = _cli("lm-eval", "--model", "reporter", "--model_args", "pretrained=random:llama", "--tasks", "nosuchtask",
             "--limit", "1")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "error: --tasks: nosuchtask: no such lm-eval task (`reporter lm-eval ls tasks` lists them" in r.output


def _saved(lm, tmp_path, *, collectors: bool = False):
    """The tiny model saved as a local directory (and, with ``collectors``, a reporter profile with the collectors on
    and the evidence passes off, as ``collectors.yaml`` beside it)."""
    model_dir = tmp_path / "tiny"
    lm.model.save_pretrained(model_dir)
    lm.tokenizer.save_pretrained(model_dir)
    if collectors:
        (tmp_path / "collectors.yaml").write_text(
            "lpp: {enabled: false}\nsmoke_texts: 2\ncontamination: {verbatim_items: 0, reference_texts: 0, "
            "order_items: 0, split_items: 0}\ntasks: [arc_easy]\n")
    return model_dir


def test_lm_eval_command_line_with_model_reporter_writes_reporters_run(env, lm, tmp_path):
    """`reporter lm-eval` is lm-eval's own command line; --model reporter with output= also writes reporter's run,
    on exactly the documents the command chose, and lm-eval scores from the answers reporter collected."""
    import glob

    model_dir = _saved(lm, tmp_path, collectors=True)
    out = tmp_path / "run"
    r = _cli("lm-eval", "--model", "reporter", "--model_args",
             f"pretrained={model_dir},name=tiny,output={out},profile={tmp_path / 'collectors.yaml'}",
             "--tasks", "arc_challenge", "--include_path", env["packaged"], "--limit", "4", "--num_fewshot", "1",
             "--output_path", str(tmp_path / "lmeval"), "--log_samples", "--device", "cpu")
    assert r.exit_code == 0, r.output
    results = json.loads((out / "results.json").read_text())
    entry = results["models"]["tiny"]["tasks"]["arc_challenge"]
    assert entry["lm_eval"]["doc_ids"] == [0, 1, 2, 3] and entry["lm_eval"]["n_shot"] == 1 and "mui" in entry
    ours = {json.loads(x)["id"]: json.loads(x) for x in (out / "models" / "tiny" / "tasks" / "arc_challenge" /
                                                           "samples.jsonl").read_text().splitlines()}
    theirs = [json.loads(x) for x in open(glob.glob(str(tmp_path / "lmeval" / "*" / "samples_arc_challenge_*"))[0])]
    assert sorted(s["doc_id"] for s in theirs) == [0, 1, 2, 3]
    for s in theirs:
        mine = ours[str(s["doc_id"])]
        assert float(s["acc"]) == mine["score"] and float(s["acc_norm"]) == mine["lm_eval_metrics"]["acc_norm,none"]
        np.testing.assert_allclose([float(x[0]) for x in s["filtered_resps"]], mine["loglikelihoods"], atol=1e-5)
    config = json.loads(open(glob.glob(str(tmp_path / "lmeval" / "*" / "results_*.json"))[0]).read())["config"]
    assert config["model"] == "reporter" and config["model_args"]["pretrained"] == str(model_dir)  # as it was named
    # what reporter cannot reproduce is one line, exit 2
    r = _cli("lm-eval", "--model", "reporter", "--model_args", f"pretrained={model_dir},output={out},colour=red",
             "--tasks", "arc_challenge", "--include_path", env["packaged"], "--limit", "5")
    assert r.exit_code == 2 and "colour" in r.output and "valid keys" in r.output, r.output
    # a source or a setting the models YAML would refuse: the same line, named by its --model_args key
    for args, want in ((f"pretrained=packaged:nope,output={out}",
                        "error: --model_args pretrained: unknown packaged model 'nope'; available: packaged:"),
                       (f"pretrained={model_dir},dtype=fp8,output={out}",
                        "error: --model_args dtype: 'fp8' is not valid; use one of auto")):
        r = _cli("lm-eval", "--model", "reporter", "--model_args", args, "--tasks", "arc_challenge",
                 "--include_path", env["packaged"], "--limit", "5")
        assert r.exit_code == 2 and want in r.output and "KeyError" not in r.output, r.output


def test_lm_evals_own_index_is_stored_once_and_read_back_the_same(env, monkeypatch):
    """lm-eval's index of its ~14,000 task YAMLs is built once and then read from reporter's cache, unchanged."""
    from reporter.tasks import lm_eval_source as src

    built = src.task_manager((env["packaged"],), True)  # built (or already built) by the tests above
    stored = list((env["tmp"] / "cache" / "reporter" / "lm-eval-index").glob("*.json"))
    assert len(stored) == 1
    monkeypatch.setattr(src, "_ROOTS", {})
    monkeypatch.setattr(src, "_MANAGERS", {})
    again = src.task_manager((env["packaged"],), True)
    assert again is not built and again.all_tasks == built.all_tasks and again.all_groups == built.all_groups
    for name in ("arc_challenge", "mmlu_stem", "gsm8k", "ai2_arc"):
        a, b = built.task_index[name], again.task_index[name]
        assert (a.kind, a.yaml_path, a.cfg, a.tags) == (b.kind, b.yaml_path, b.cfg, b.tags)
    assert again.load(["arc_challenge"])["tasks"]["arc_challenge"].get_config("output_type") == "multiple_choice"


def test_task_digest_counts_documents_by_content_not_by_where_they_lie(env, tmp_path):
    """The same task and data in two places: one digest; one changed document: another."""
    from reporter.tasks import lm_eval_source as src

    rows = [{"question": f"Q{i}?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "A"}
            for i in range(5)]
    digests = []
    for place, edit in (("one", False), ("two", False), ("three", True)):
        d = tmp_path / place
        d.mkdir()
        data = [dict(r) for r in rows]
        if edit:
            data[3] = {**data[3], "question": "Q3, edited?"}
        (d / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
        (d / "arc_mini.yaml").write_text(
            f"include: {src.lm_eval_version() and ''}{_arc_yaml()}\ntask: arc_mini\ndataset_path: json\n"
            f"dataset_name: null\ndataset_kwargs:\n  data_files:\n    validation: {d / 'val.jsonl'}\n"
            "training_split: null\ntest_split: null\nvalidation_split: validation\n")
        digests.append(src.resolve("arc_mini", (str(d),)).digests["arc_mini"])
    assert digests[0] == digests[1] != digests[2]


def test_task_digest_counts_the_other_split_the_min_k_test_reads(env, tmp_path, monkeypatch):
    """MMLU's shape: test evaluated, dev for the few-shot examples, validation read only by the Min-K% test. A new
    copy that changed only the validation split kept the digest, so a finished run's other-split comparison stood
    against texts the task no longer has. Now it changes the digest (and so the run's configuration hash); where the
    other split is the few-shot split (ARC's train), the digest is as it was and the split counts once."""
    from reporter.tasks import lm_eval_source as src

    def rows(tag: str, n: int) -> list[dict]:
        return [{"question": f"{tag} Q{i}?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "A"}
                for i in range(n)]

    def digest(place: str, splits: dict[str, list[dict]], fewshot: str) -> str:
        d = tmp_path / place
        d.mkdir()
        files = ""
        for split, data in splits.items():
            (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
            files += f"    {split}: {d / f'{split}.jsonl'}\n"
        (d / "arc_mini.yaml").write_text(
            f"include: {_arc_yaml()}\ntask: arc_mini\ndataset_path: json\ndataset_name: null\n"
            f"dataset_kwargs:\n  data_files:\n{files}"
            f"training_split: {'train' if 'train' in splits else 'null'}\ntest_split: test\n"
            f"validation_split: {'validation' if 'validation' in splits else 'null'}\nfewshot_split: {fewshot}\n")
        resolved = src.resolve("arc_mini", (str(d),))
        task = resolved.loaded["tasks"]["arc_mini"]
        assert src.other_split(task)[0] == ("train" if "train" in splits else "validation")
        return resolved.digests["arc_mini"]

    test, dev, val = rows("test", 5), rows("dev", 3), rows("val", 4)
    edited = [*val[:2], {**val[2], "question": "val Q2, edited?"}, val[3]]
    mmlu = [digest(place, {"test": test, "dev": dev, "validation": v}, "dev")
            for place, v in (("one", val), ("two", val), ("three", edited))]
    assert mmlu[0] == mmlu[1] != mmlu[2]
    # ARC's shape: the other split is the few-shot split, counted once as before
    arc = [digest(place, {"test": test, "train": t}, "train")
           for place, t in (("arc-one", val), ("arc-two", edited))]
    assert arc[0] != arc[1]
    import hashlib

    resolved_task = src.resolve("arc_mini", (str(tmp_path / "arc-one"),)).loaded["tasks"]["arc_mini"]
    h = hashlib.sha256()  # what the digest was before the other split counted: config, functions, the two splits
    config = {k: v for k, v in resolved_task.dump_config().items() if k != "dataset_kwargs"}
    if isinstance(config.get("metadata"), dict):
        config["metadata"] = {k: v for k, v in config["metadata"].items() if k != "config_source"}
    h.update(json.dumps(config, sort_keys=True, default=src._stable_text).encode())
    for code in sorted({src._function_code(f) for f in src._functions(resolved_task.config)}):
        h.update(b"\x00code" + code.encode())
    for docs in (resolved_task.eval_docs, resolved_task.fewshot_docs()):
        h.update(b"\x00docs")
        src._hash_docs(h, docs)
    assert arc[0] == f"sha256:{h.hexdigest()}"
    # an other split that cannot be read is left out (the test cannot read it either), and loading goes on
    mmlu_task = src.resolve("arc_mini", (str(tmp_path / "one"),)).loaded["tasks"]["arc_mini"]
    assert src.task_digest(mmlu_task) == mmlu[0]
    monkeypatch.setattr(src, "other_split", lambda task: None)
    without = src.task_digest(mmlu_task)

    def unreadable(task):
        raise OSError("the validation file went away")

    monkeypatch.setattr(src, "other_split", unreadable)
    assert src.task_digest(mmlu_task) == without != mmlu[0]


def test_task_digest_counts_a_tasks_functions_by_their_files_not_their_addresses(env, tmp_path):
    """A task whose ``doc_to_text`` is a ``!function`` (lm-eval copies it unserialised into ``fewshot_config``) got
    another digest in every process, so its run could never be resumed; a helper a ``!function`` calls did not count,
    so fixing it resumed the old scores. For either shape (``doc_to_text`` a function or a template; lm-eval's
    TaskConfig is a dataclass and a dict, whose fields are where the functions are): two loads of the same task,
    one digest; a changed helper of ``process_results``, another.
    """
    from reporter.tasks import lm_eval_source as src

    rows = [{"question": f"{i} plus {i}?", "choices": [str(2 * i), str(2 * i + 1)], "label": 0} for i in range(4)]
    helper = "def _pick(lls):\n    return max(range(len(lls)), key=lambda i: lls[i])\n"
    for shape, doc_to_text in (("function", "!function utils.doc_to_text"), ("template", "'Q: {{question}}'")):
        digests = []
        for place, pick in (("one", helper), ("two", helper), ("three", helper.replace("max(", "min("))):
            d = tmp_path / shape / place
            d.mkdir(parents=True)
            (d / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (d / "utils.py").write_text(pick + "def process_results(doc, results):\n"
                                        "    return {'acc': float(_pick([r[0] for r in results]) == doc['label'])}\n"
                                        "def doc_to_text(doc):\n    return 'Question: ' + doc['question'] + '\\nAnswer:'\n")
            (d / "addq.yaml").write_text(
                f"task: addq\ndataset_path: json\ndataset_name: null\n"
                f"dataset_kwargs: {{data_files: {{test: {d / 'data.jsonl'}}}}}\ntest_split: test\n"
                f"output_type: multiple_choice\ndoc_to_text: {doc_to_text}\ndoc_to_choice: '{{{{choices}}}}'\n"
                "doc_to_target: '{{label}}'\nprocess_results: !function utils.process_results\n"
                "metric_list: [{metric: acc}]\nmetadata: {version: 1.0}\n")
            resolved = src.resolve("addq", (str(d),))
            task = resolved.loaded["tasks"]["addq"]
            assert callable(task.config.process_results)
            assert callable(task.config.fewshot_config.doc_to_text) is (shape == "function")
            digests.append(resolved.digests["addq"])
        assert digests[0] == digests[1] != digests[2], shape


def _arc_yaml() -> str:
    import importlib.util

    return str(importlib.util.find_spec("lm_eval").submodule_search_locations[0]) + "/tasks/arc/arc_easy.yaml"


def test_gen_kwargs_reach_generate_until_tasks_only_and_a_failed_reporter_run_is_exit_2(env, lm, tmp_path,
                                                                                        monkeypatch):
    """``--gen_kwargs`` failed reporter's run of every multiple-choice task ("Expected a dict for key
    'generation_kwargs', got NoneType"; lm-eval applies it to generate_until tasks only), and the command still
    exited 0 after printing lm-eval's table, with those tasks missing from reporter's run."""
    model_dir = _saved(lm, tmp_path, collectors=True)

    def command(out):
        return _cli("lm-eval", "--model", "reporter", "--model_args",
                    f"pretrained={model_dir},name=tiny,output={out},profile={tmp_path / 'collectors.yaml'}",
                    "--tasks", "arc_challenge", "--include_path", env["packaged"], "--limit", "2",
                    "--gen_kwargs", "max_gen_toks=4", "--device", "cpu")

    r = command(tmp_path / "run")
    assert r.exit_code == 0, r.output
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["models"]["tiny"]["status"] == "complete" and "arc_challenge" in results["models"]["tiny"]["tasks"]
    import reporter.collect.lm_eval_run as lm_eval_run
    from reporter.errors import UserError

    def broken(*args, **kwargs):  # reporter's own run of the task fails; lm-eval goes on and writes its results
        raise UserError("its requests could not be built")

    monkeypatch.setattr(lm_eval_run, "resolve_entry", broken)
    r = command(tmp_path / "run2")
    assert r.exit_code == 2, r.output
    assert "reporter: model 'tiny', task 'arc_challenge': its requests could not be built" in r.output
    assert r.stderr.strip().splitlines()[-1] == (
        "error: reporter's run had failures, listed above (lm-eval's own results are written); fix them and rerun the "
        "same command: reporter's finished work is kept")


def test_include_path_packaged_is_the_offline_copy_and_hints_say_so_in_command_line_terms(env, lm, tmp_path):
    """An lm-eval user offline was told "lm_eval_include: [packaged]" (a profile key; this command line has none),
    and ``--include_path packaged`` failed with the same hub error."""
    from reporter.run.lm_eval_cli import _command_line_terms

    model_dir = _saved(lm, tmp_path)
    out = tmp_path / "run"
    r = _cli("lm-eval", "--model", "reporter", "--model_args", f"pretrained={model_dir},name=tiny,output={out}",
             "--tasks", "arc_challenge", "--include_path", "packaged", "--limit", "2", "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "arc_challenge" in json.loads((out / "results.json").read_text())["models"]["tiny"]["tasks"]
    # the same output= with another reporter profile: said in this command line's terms (it has no -o nor --force)
    r = _cli("lm-eval", "--model", "reporter", "--model_args",
             f"pretrained={model_dir},name=tiny,output={out},profile=standard",
             "--tasks", "arc_challenge", "--include_path", "packaged", "--limit", "2", "--device", "cpu")
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0].endswith("; give another output= in --model_args, or remove that directory "
                                                   "to make the run again"), r.output
    assert "--force" not in r.stderr and "-o/--output" not in r.stderr
    line = ("tasks[0].lm_eval: lm-eval task 'x': … give a local copy: a task YAML in a directory listed in "
            "lm_eval_include, with … (reporter's offline copies of ARC, HellaSwag, BoolQ and MMLU: lm_eval_include: "
            "[packaged])")
    assert _command_line_terms(UserError(line)).lines == [
        "tasks[0].lm_eval: lm-eval task 'x': … give a local copy: a task YAML in a directory given to --include_path, "
        "with … (reporter's offline copies of ARC, HellaSwag, BoolQ and MMLU: --include_path packaged)"]


def test_a_hub_dataset_lm_eval_cannot_reach_is_one_line_not_its_traceback(env, lm, tmp_path):
    """Without output=, lm-eval's own loading of a hub-only dataset offline was a 95-line ConnectionError traceback."""
    model_dir = _saved(lm, tmp_path)
    r = _cli("lm-eval", "--model", "reporter", "--model_args", f"pretrained={model_dir}", "--tasks", "winogrande",
             "--limit", "2", "--device", "cpu")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: lm-eval could not load a task's data: Couldn't reach "
                                                     "'allenai/winogrande' on the Hub"), r.output
    assert errors[0].endswith("--include_path packaged")


def test_a_group_taken_off_and_listed_again_gets_its_aggregate_back(lm_eval_run, tmp_path):
    """``--tasks arc_challenge`` into the shared run removed the MMLU group's aggregate (its documents leave with
    it); the full command afterwards said "already complete" and wrote a card with no group row: a model counted as
    done without the aggregate of a group it lists. It is scored again from the leaves' answers, measuring nothing."""
    from tests.conftest import copy_run, lm_eval_env

    run, root = lm_eval_run["run"], lm_eval_run["root"]
    copy = copy_run(run, tmp_path / "run")
    groups = copy / "models" / "Llama-chat" / "lm_eval_groups.json"
    leaf = copy / "models" / "Llama-chat" / "tasks" / "mmlu_anatomy" / "samples.jsonl"
    stamp, want = leaf.stat().st_mtime_ns, json.loads(groups.read_text())
    with lm_eval_env(root):
        r = _cli("run", str(root / "models.yaml"), "-o", str(copy), "--no-progress", "--no-render",
                 "--tasks", "arc_challenge")
        assert r.exit_code == 0 and not groups.exists(), r.output
        r = _cli("run", str(root / "models.yaml"), "-o", str(copy), "--no-progress", "--no-render")
    assert r.exit_code == 0, r.output
    assert json.loads(groups.read_text())["mmlu_mini"]["metrics"] == want["mmlu_mini"]["metrics"]
    assert leaf.stat().st_mtime_ns == stamp
    model = json.loads((copy / "results.json").read_text())["models"]["Llama chat"]
    assert model["lm_eval_groups"]["mmlu_mini"]["metrics"] == want["mmlu_mini"]["metrics"]
