"""LPP metrics: float64 references, known spectra, one pass = one pass per prefix, batching, corpus."""
import json
import math

import numpy as np
import pytest
import torch

from reporter.collect.collectors.lpp import LPPCollector, prefix_schedule, run_lpp
from reporter.collect.collectors.lpp import latent_profile as profile
from reporter.config import LPPConfig
from reporter.errors import UserError
from reporter.instrument.hooked_pass import PassBatch, hooked_pass
from reporter.metrics.spectra import (
    clip_top_dims,
    effective_rank,
    entropy,
    participation_ratio,
    robust,
    variance_shares,
)
from reporter.tasks.corpora import lpp_corpus

from .conftest import tiny_lm


# ------------------------------------------------------------------ plain float64 references
def ref_eigs(H):
    H = np.asarray(H, dtype=np.float64)
    Hc = H - H.mean(0)
    s = np.linalg.svd(Hc, compute_uv=False)
    ev = s ** 2 / (H.shape[0] - 1)
    return ev[ev > ev.max() * 1e-12]


def ref_pr(H, normalize=True):
    ev = ref_eigs(H)
    pr = ev.sum() ** 2 / (ev ** 2).sum()
    return pr / min(H.shape) if normalize else pr


def ref_er(H, normalize=True):
    ev = ref_eigs(H)
    p = ev / ev.sum()
    er = math.exp(-sum(x * math.log(x) for x in p))
    return er / min(H.shape) if normalize else er


def ref_entropy(logits):
    out = []
    for row in np.asarray(logits, dtype=np.float64).reshape(-1, logits.shape[-1]):
        z = row - row.max()
        p = np.exp(z) / np.exp(z).sum()
        out.append(-sum(x * math.log(x) for x in p if x > 0) / math.log(len(row)))
    return np.array(out).reshape(logits.shape[:-1])


# ------------------------------------------------------------------ metrics on matrices
@pytest.mark.parametrize("shape", [(50, 8), (6, 20), (20, 20)])
def test_pr_er_match_float64_reference(shape):
    rng = np.random.default_rng(0)
    H = rng.normal(size=shape) * rng.uniform(0.1, 3.0, size=shape[1])
    for norm in (True, False):
        assert participation_ratio(H, normalize=norm) == pytest.approx(ref_pr(H, norm), rel=1e-10)
        assert effective_rank(H, normalize=norm) == pytest.approx(ref_er(H, norm), rel=1e-10)
        # a float32 torch tensor gives the same (computed in float64 inside)
        T = torch.tensor(H, dtype=torch.float32)
        assert participation_ratio(T, normalize=norm) == pytest.approx(ref_pr(T.double().numpy(), norm), rel=1e-8)


def test_isotropic_and_rank_one_spectra():
    d = 7
    E = np.eye(d)
    H = np.concatenate([E, -E]) * 2.5  # rows +-e_i: covariance a multiple of the identity
    assert participation_ratio(H) == pytest.approx(1.0, abs=1e-12)
    assert effective_rank(H) == pytest.approx(1.0, abs=1e-12)
    assert participation_ratio(H, normalize=False) == pytest.approx(d, abs=1e-10)
    rng = np.random.default_rng(1)
    R1 = np.outer(rng.normal(size=30), rng.normal(size=5)) + rng.normal(size=5)  # rank 1 after centring
    assert participation_ratio(R1, normalize=False) == pytest.approx(1.0, abs=1e-9)
    assert effective_rank(R1, normalize=False) == pytest.approx(1.0, abs=1e-9)
    assert math.isnan(participation_ratio(np.ones((4, 3))))  # zero variance: undefined


def test_entropy_matches_reference_and_limits():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 40) * 4
    np.testing.assert_allclose(entropy(logits).numpy(), ref_entropy(logits.numpy()), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(entropy(logits.to(torch.bfloat16)).numpy(),
                               ref_entropy(logits.to(torch.bfloat16).double().numpy()), atol=1e-12)
    assert entropy(torch.zeros(9)).item() == pytest.approx(1.0)
    masked = torch.tensor([0.0, 0.0, float("-inf"), float("-inf")])
    assert entropy(masked).item() == pytest.approx(math.log(2) / math.log(4))


def test_entropy_a_few_rows_at_a_time_equals_the_reference(monkeypatch):
    """Rows are taken ENTROPY_ELEMENTS // |V| at a time (Gemma-3's 262k vocabulary in float64): the same numbers
    whatever the chunk, masked tokens included, and the input's shape kept."""
    from reporter.metrics import spectra

    torch.manual_seed(1)
    logits = torch.randn(4, 7, 300) * 3
    logits[0, 0, :150] = float("-inf")
    whole = entropy(logits)
    for elements in (300, 301, 1000, 299):  # one row, one, three, and at least one row a chunk
        monkeypatch.setattr(spectra, "ENTROPY_ELEMENTS", elements)
        assert torch.equal(entropy(logits), whole)
    assert whole.shape == (4, 7)
    np.testing.assert_allclose(whole.numpy(), ref_entropy(logits.numpy()), rtol=1e-12, atol=1e-12)


def ref_robust(per_text, n_clip=5, n_sigma=3.0):
    """Robust PR/ER in float64 numpy: each text's first row dropped, the ``n_clip`` highest-variance columns clipped
    to mean +- ``n_sigma`` std (ddof 1), then (pr, er, pr_raw, er_raw) of the stacked rest."""
    X = np.concatenate([t[1:] for t in per_text])
    mu, sd = X.mean(0), X.std(0, ddof=1)
    top = np.argsort(-sd)[:n_clip]
    X[:, top] = np.clip(X[:, top], mu[top] - n_sigma * sd[top], mu[top] + n_sigma * sd[top])
    return ref_pr(X), ref_er(X), ref_pr(X, False), ref_er(X, False)


def ref_shares(H):
    """Shares of the total (ddof 1) variance in the 1 and the 5 highest-variance columns, by a plain loop."""
    var = sorted((float(np.var(H[:, j], ddof=1)) for j in range(H.shape[1])), reverse=True)
    return var[0] / sum(var), sum(var[:5]) / sum(var)


def test_variance_shares_on_constructed_data():
    c = np.array([4.0, 3.0, 2.0, 1.0, 1.0, 0.5, 0.5])
    E = np.diag(c)
    H = np.concatenate([E, -E])  # column j: two entries +-c_j, var_j proportional to c_j^2
    top1, top5 = variance_shares(H)
    w = c ** 2 / (c ** 2).sum()
    assert top1 == pytest.approx(w[0])
    assert top5 == pytest.approx(w[:5].sum())


def test_robust_drops_first_positions_and_clips_top_dims():
    rng = np.random.default_rng(2)
    texts = [rng.normal(size=(12, 9)) for _ in range(4)]
    for t in texts:
        t[0, 3] = 500.0  # a massive activation on the first token
    r = robust(texts)
    pr, _, _, er_raw = ref_robust(texts)
    assert r["participation_ratio"] == pytest.approx(pr, rel=1e-10)
    assert r["er_raw"] == pytest.approx(er_raw, rel=1e-10)
    # the outlier dominates the plain spectrum but not the robust one
    assert participation_ratio(np.concatenate(texts), normalize=False) < 1.5 < r["pr_raw"]
    # clipping actually bounds an outlier that is not on the first position
    Y = np.zeros((40, 2))
    Y[::2, 0], Y[1::2, 0], Y[5, 1], Y[::3, 1] = 1, -1, 100.0, 1.0
    Z = clip_top_dims(torch.tensor(Y), n_clip=1).numpy()
    assert Z[5, 1] < 100 and np.array_equal(Z[:, 0], Y[:, 0])


def test_prefix_schedule():
    assert prefix_schedule(200) == list(range(20, 201, 20))
    assert prefix_schedule(64) == [6, 12, 18, 24, 30, 36, 42, 48, 54, 60, 64]


# ------------------------------------------------------------------ profile on a tiny model
@pytest.fixture(scope="module")
def lm():
    return tiny_lm("llama", init_std=0.1)


@pytest.fixture(scope="module")
def texts(lm):
    return lpp_corpus(5, min_tokens=30, tokenizer=lm.tokenizer)


def test_one_pass_equals_a_pass_per_prefix(lm, texts):
    ctx, step = 40, 10
    widths = []  # the LM head runs on the scheduled prefixes' last positions only, not on all 40
    handle = lm.model.get_output_embeddings().register_forward_hook(lambda m, i, o: widths.append(o.shape[1]))
    try:
        got = profile(lm.model, lm.tokenizer, texts, context=ctx, step=step, min_tokens=30, batch_size=5)
    finally:
        handle.remove()
    assert len(widths) == 1 and 4 <= widths[0] < ctx
    ids = [lm.tokenizer(t)["input_ids"][:ctx] for t in texts]
    assert got["n_texts"] == len(texts) and got["hidden"] == "final_norm_output"
    with torch.no_grad():
        for row in got["per_prefix"]:
            m = row["m"]
            per_text, ents = [], []
            for s in ids:  # a separate forward pass on each truncated prefix
                out = lm.model(torch.tensor([s[:m]]), output_hidden_states=True)
                per_text.append(out.hidden_states[-1][0].double().numpy())
                ents.append(ref_entropy(out.logits[0, -1].double().numpy()[None])[0])
            H = np.concatenate(per_text)
            assert row["n_tokens"] == H.shape[0] == m * len(ids)
            assert row["entropy"] == pytest.approx(np.mean(ents), rel=1e-5)
            assert row["pr"] == pytest.approx(ref_pr(H), rel=1e-4)
            assert row["er"] == pytest.approx(ref_er(H), rel=1e-4)
            assert row["pr_raw"] == pytest.approx(ref_pr(H, False), rel=1e-4)
            assert row["er_raw"] == pytest.approx(ref_er(H, False), rel=1e-4)
            rob = ref_robust(per_text)  # the first position of each text dropped, the top columns clipped
            for key, want in zip(("robust_pr", "robust_er", "robust_pr_raw", "robust_er_raw"), rob):
                assert row[key] == pytest.approx(want, rel=1e-4), (m, key)
            if m == ctx:  # the variance shares: every row of the whole context
                top1, top5 = ref_shares(H)
    assert got["top1_var_share"] == pytest.approx(top1, rel=1e-4)
    assert got["top5_var_share"] == pytest.approx(top5, rel=1e-4)
    pp = got["per_prefix"]
    assert got["entropy_floor"] == min(p["entropy"] for p in pp)
    assert got["participation_ratio"] == max(p["pr"] for p in pp)
    assert got["effective_rank"] == max(p["er"] for p in pp)
    assert got["er_raw"] == max(p["er_raw"] for p in pp)
    assert got["robust"]["participation_ratio"] == max(p["robust_pr"] for p in pp)
    assert got["robust"]["er_raw"] == max(p["robust_er_raw"] for p in pp)
    json.dumps(got)  # results.json-ready


def test_batched_padded_equals_one_text_at_a_time(lm, texts):
    # lengths differ (min_tokens < context), so right padding is exercised
    short = [t[: 120 + 40 * i] for i, t in enumerate(texts)]
    kw = dict(context=48, step=12, min_tokens=20)
    lens = [min(48, len(lm.tokenizer(t)["input_ids"])) for t in short]
    assert len(set(lens)) > 1 and min(lens) >= 20
    for rule in ("official", "exclude"):
        a = profile(lm.model, lm.tokenizer, short, batch_size=5, short_texts=rule, **kw)
        b = profile(lm.model, lm.tokenizer, short, batch_size=1, short_texts=rule, **kw)
        assert a["n_texts"] == b["n_texts"] == len(short)
        for pa, pb in zip(a["per_prefix"], b["per_prefix"]):
            assert pa["n_texts"] == pb["n_texts"] and pa["n_tokens"] == pb["n_tokens"]
            for k in ("entropy", "pr", "er", "pr_raw", "er_raw", "robust_pr", "robust_er"):
                assert pa[k] == pytest.approx(pb[k], rel=1e-4), k
        # a text shorter than a prefix adds its tokens to H; its entropy counts there only under "official"
        last = a["per_prefix"][-1]
        assert last["n_tokens"] == sum(lens)
        assert last["n_texts"] == (len(lens) if rule == "official" else sum(n >= 48 for n in lens))


def test_collector_in_a_left_padded_shared_pass_matches_profile(lm, texts):
    kw = dict(context=32, step=8)
    ref = profile(lm.model, lm.tokenizer, texts[:3], min_tokens=20, **kw)
    seqs = [lm.tokenizer(t)["input_ids"][:32 + 5 * i] for i, t in enumerate(texts[:3])]  # longer than context
    width = max(map(len, seqs))
    ids = torch.zeros(3, width, dtype=torch.long)
    am = torch.zeros(3, width, dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, width - len(s):], am[r, width - len(s):] = torch.tensor(s), 1
    col = LPPCollector(**kw)
    hooked_pass(lm.model, lm.adapter, PassBatch(ids, am, am.bool()), [col])
    got = col.result()
    for k in ("entropy_floor", "participation_ratio", "effective_rank", "pr_raw", "er_raw", "top1_var_share"):
        assert got[k] == pytest.approx(ref[k], rel=1e-4), k


def test_per_layer_profile_and_gpt2():
    lm2 = tiny_lm("gpt2", init_std=0.1)
    texts = lpp_corpus(3, min_tokens=24, tokenizer=lm2.tokenizer)
    p = profile(lm2.model, lm2.tokenizer, texts, context=24, step=8, min_tokens=24, layers="all")
    assert [x["layer"] for x in p["per_layer"]] == [0, 1]
    ids = torch.tensor([lm2.tokenizer(t)["input_ids"][:24] for t in texts])
    with torch.no_grad():
        hs = lm2.model(ids, output_hidden_states=True).hidden_states
    H0 = hs[1].reshape(-1, hs[1].shape[-1]).double().numpy()  # decoder layer 0's output
    layer0 = p["per_layer"][0]
    assert layer0["pr"] == pytest.approx(ref_pr(H0), rel=1e-5)
    assert layer0["er"] == pytest.approx(ref_er(H0), rel=1e-5)
    assert layer0["pr_raw"] == pytest.approx(ref_pr(H0, False), rel=1e-5)
    assert layer0["er_raw"] == pytest.approx(ref_er(H0, False), rel=1e-5)
    assert (layer0["top1_var_share"], layer0["top5_var_share"]) == pytest.approx(ref_shares(H0), rel=1e-5)
    Hf = hs[-1].reshape(-1, hs[-1].shape[-1]).double().numpy()  # final-norm output: the headline
    assert p["per_prefix"][-1]["pr"] == pytest.approx(ref_pr(Hf), rel=1e-5)


def test_short_texts_are_skipped(lm):
    with pytest.raises(UserError, match="at least"):
        profile(lm.model, lm.tokenizer, ["too short"], context=20, min_tokens=10)


# ------------------------------------------------------------------ corpus
def test_default_corpus_is_long_distinct_and_deterministic(lm):
    a = lpp_corpus(10, 128, tokenizer=lm.tokenizer)
    assert a == lpp_corpus(10, 128, tokenizer=lm.tokenizer)
    assert len(a) == len(set(a)) == 10
    assert all(len(lm.tokenizer(t)["input_ids"]) >= 128 for t in a)
    assert a[0].startswith("(CNN)")  # round-robin over the five CoQA genres
    lam = lpp_corpus(3, min_tokens=128, tokenizer=lm.tokenizer, corpus="lambada")
    assert all(len(lm.tokenizer(t)["input_ids"]) >= 128 and "\n\n" in t for t in lam)


def test_local_corpus_files_and_unreachable_hub(tmp_path):
    j = tmp_path / "c.jsonl"
    j.write_text(json.dumps({"text": "one two " * 200}) + "\n" + json.dumps("short") + "\n")
    assert len(lpp_corpus(5, min_tokens=128, corpus=str(j))) == 1
    t = tmp_path / "c.txt"
    t.write_text("word " * 300 + "\n\nshort line\n")
    assert lpp_corpus(5, min_tokens=10, corpus=str(t)) == ["word " * 300]
    with pytest.raises(UserError, match="no such file"):
        lpp_corpus(5, 128, corpus=str(tmp_path / "missing.txt"))
    with pytest.raises(UserError, match="hub dataset cannot be loaded"):
        lpp_corpus(5, 128, corpus="reporter-tests/no-such-corpus")  # HF_HUB_OFFLINE=1 in the tests


@pytest.fixture
def hub_copy():
    """``_hub_texts`` reads a dataset once per process; each test starts and ends with nothing read."""
    from reporter.tasks.corpora import _hub_texts
    _hub_texts.cache_clear()
    yield _hub_texts
    _hub_texts.cache_clear()


def test_the_model_only_cache_keys_a_hub_corpus_by_its_texts(tmp_path, hub_copy, monkeypatch):
    """A hub corpus (here a dataset folder, which ``datasets.load_dataset`` reads the same way, offline) is keyed by
    the texts the pass reads, not its name: a new revision under the same name is measured again.
    """
    import random

    from reporter.collect.collectors.lpp import LPPPlugin
    from reporter.config import Profile
    from reporter.tasks.base import content_sha256

    folder = tmp_path / "owner_corpus"
    folder.mkdir()
    first = ["one two three " * 60, "four five six " * 60, "seven eight " * 80]
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in first))
    profile = Profile(name="p", lpp=LPPConfig(corpus=str(folder)))
    key = LPPPlugin().model_cache_key(profile)
    order = list(range(len(first)))
    random.Random(42).shuffle(order)  # the official code's sample of a hub corpus
    assert key["corpus_sha256"] == content_sha256([first[i] for i in order])
    assert lpp_corpus(5, 16, corpus=str(folder)) == [first[i] for i in order]  # what the pass reads
    assert LPPPlugin().model_cache_key(profile) == key
    hub_copy.cache_clear()  # the next process, after the dataset changed under its name
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in [*first[:2], "nine " * 200]))
    assert LPPPlugin().model_cache_key(profile)["corpus_sha256"] not in (None, key["corpus_sha256"])
    # a hub corpus that cannot be read has no key, so nothing is taken from the cache (the pass then fails with why)
    assert LPPPlugin().model_cache_key(Profile(name="p", lpp=LPPConfig(corpus="reporter-tests/no-such-corpus"))) is None
    # a local file counts by its bytes in the settings, a built-in corpus by its texts
    f = tmp_path / "c.txt"
    f.write_text("word " * 300 + "\n")
    local = LPPPlugin().model_cache_key(Profile(name="p", lpp=LPPConfig(corpus=str(f))))
    assert "corpus_sha256" not in local and local["lpp"]["corpus"].startswith("sha256:")
    builtin = LPPPlugin().model_cache_key(Profile(name="p"))
    assert builtin["corpus_sha256"] is not None
    # a file named like a built-in corpus in the working directory is not the corpus (the pass reads CoQA)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "coqa").write_text("word " * 300 + "\n")
    assert LPPPlugin().model_cache_key(Profile(name="p")) == builtin


def test_run_lpp_records_its_settings(lm):
    r = run_lpp(lm, LPPConfig(n_texts=2, min_tokens=16, context=16, step=8))
    assert r["corpus"] == "coqa" and r["n_texts"] == 2 and r["dtype"] == "float32"
    assert [p["m"] for p in r["per_prefix"]] == [8, 16]
    assert set(r["robust"]) >= {"participation_ratio", "effective_rank", "pr_raw", "er_raw"}
