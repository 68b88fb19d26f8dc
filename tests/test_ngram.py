"""Character n-gram baselines of the text task and its ``stdlib`` corpus (issue 37)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from transflow.control import (
    CharNgram,
    DepthTextConfig,
    baselines_table,
    load_text_split,
    stdlib_files,
    text_baselines,
    validation_windows,
    window_overlap,
)
from transflow.control._text import STDLIB_EXCLUDED_DIRS, _stdlib_split, _stdlib_texts, _unit_hash


def _ref_prob(train: list[int], vocab: int, discount: float, history, target, order) -> float:
    """Interpolated Kneser–Ney written out from the formula with Counters (independent of
    the vectorised tables): raw counts at ``order``, continuation counts below it."""
    grams = {k: Counter(zip(*(train[i:] for i in range(k)))) for k in range(1, order + 2)}

    def n(k, gram, top):
        if k == top:
            return grams[k][gram]
        return sum(1 for a in range(vocab) if grams[k + 1][(a, *gram)] > 0)

    def p(k, c):
        if k == 0:
            return 1.0 / vocab
        ctx = tuple(history[len(history) - (k - 1) :]) if k > 1 else ()
        counts = [n(k, (*ctx, x), order) for x in range(vocab)]
        total, types = sum(counts), sum(1 for v in counts if v > 0)
        if total == 0:
            return p(k - 1, c)
        return (max(counts[c] - discount, 0) + discount * types * p(k - 1, c)) / total

    return p(order, target)


def _random_text(seed: int, length: int, vocab: int) -> np.ndarray:
    """A text with structure: a random order-2 Markov chain with peaked transitions."""
    rng = np.random.default_rng(seed)
    table = rng.dirichlet(np.full(vocab, 0.3), size=(vocab, vocab))
    out = list(rng.integers(0, vocab, 2))
    for _ in range(length - 2):
        out.append(int(rng.choice(vocab, p=table[out[-2], out[-1]])))
    return np.asarray(out, np.int32)


def test_distribution_sums_to_one_over_the_alphabet():
    # every order, random histories of every length (seen and unseen contexts), and a
    # vocabulary with characters that never occur in training
    train = _random_text(0, 3000, 6)
    m = CharNgram(train, vocab=8, max_order=5)
    rng = np.random.default_rng(1)
    for order in range(1, 6):
        for _ in range(20):
            hist = rng.integers(0, 8, int(rng.integers(0, 7)))
            p = m.distribution(hist, order)
            assert p.shape == (8,) and np.all(p > 0)
            assert abs(p.sum() - 1.0) < 1e-12
    # the characters never seen in training keep only the uniform floor's share
    assert m.distribution([0, 1], 3)[7] < m.distribution([0, 1], 3)[0]


def test_matches_the_formula_written_out():
    train = _random_text(2, 400, 4)
    m = CharNgram(train, vocab=4, max_order=4, discount=0.6)
    rng = np.random.default_rng(3)
    for order in range(1, 5):
        for _ in range(8):
            hist = [int(c) for c in rng.integers(0, 4, order - 1)]
            target = int(rng.integers(0, 4))
            got = float(m.prob(np.array([hist]).reshape(1, order - 1), [target], order)[0])
            want = _ref_prob(train.tolist(), 4, 0.6, hist, target, order)
            assert abs(got - want) <= 1e-14, (order, hist, target)


def test_hand_computed_tiny_example():
    # train "abab" (a=0, b=1, c=2 never seen), D = 1/2:
    # continuation unigrams: a after {b}, b after {a}: N1+ = 1 each, total 2, 2 types
    #   P1(a) = P1(b) = (1 - 1/2)/2 + (1/2)(2/2)(1/3) = 5/12, P1(c) = 1/6
    # bigrams ab: 2, ba: 1
    #   P2(b|a) = (2 - 1/2)/2 + (1/2)(1/2) P1(b) = 41/48, P2(c|a) = (1/4)(1/6) = 1/24
    #   P2(a|b) = (1 - 1/2)/1 + (1/2)(1/1) P1(a) = 17/24, P2(c|b) = (1/2)(1/6) = 1/12
    #   P2(a|c) = P1(a) = 5/12 (context never seen)
    # raw unigrams (the unigram model): a, b: 2 of 4 → (3/2)/4 + (1/2)(2/4)(1/3) = 11/24
    m = CharNgram(np.array([0, 1, 0, 1]), vocab=3, max_order=2, discount=0.5)
    F = Fraction
    want2 = {(0, 1): F(41, 48), (0, 0): F(5, 48), (0, 2): F(1, 24), (1, 0): F(17, 24)}
    want2 |= {(1, 2): F(1, 12), (2, 0): F(5, 12), (2, 2): F(1, 6)}
    for (h, c), w in want2.items():
        assert m.prob(np.array([[h]]), [c], 2)[0] == pytest.approx(float(w), abs=1e-15)
    assert m.distribution([], 1).tolist() == pytest.approx([11 / 24, 11 / 24, 1 / 12])
    # one window "abc" → "bca": the first target has 1 character of history (bigram)
    x, y = np.array([[0, 1, 2]]), np.array([[1, 2, 0]])
    bits2 = -(np.log2(41 / 48) + np.log2(1 / 12) + np.log2(5 / 12)) / 3
    bits1 = -(np.log2(11 / 24) + np.log2(1 / 12) + np.log2(11 / 24)) / 3
    assert m.bits_per_char(x, y, 2) == pytest.approx(bits2, abs=1e-13)
    assert m.bits_per_char(x, y, 1) == pytest.approx(bits1, abs=1e-13)


def _ney(counts: Counter) -> float:
    n1 = sum(1 for v in counts.values() if v == 1)
    n2 = sum(1 for v in counts.values() if v == 2)
    return n1 / (n1 + 2 * n2) if n1 and n2 else 0.5


def test_ney_discounts_from_count_of_counts():
    train = _random_text(4, 600, 12)
    m = CharNgram(train, vocab=12, max_order=3)
    t = train.tolist()
    raw = {k: Counter(zip(*(t[i:] for i in range(k)))) for k in (1, 2, 3)}
    # continuation counts: the distinct characters seen before each k-gram
    cont = {k: Counter(g[1:] for g in raw[k + 1]) for k in (1, 2)}
    got = m.discounts
    assert got["raw"] == pytest.approx([_ney(raw[k]) for k in (1, 2, 3)], abs=1e-15)
    assert got["continuation"] == pytest.approx([_ney(cont[k]) for k in (1, 2)], abs=1e-15)
    # the closed form (not the 0.5 fallback) decides most of them here
    assert sum(d != 0.5 for d in got["raw"] + got["continuation"]) >= 3


def test_bits_per_char_decrease_from_unigram_to_trigram_on_repetitive_text():
    rng = np.random.default_rng(5)
    words = ["the ", "cat ", "sat ", "on ", "a ", "mat "]
    text = "".join(words[i] for i in rng.integers(0, len(words), 6000))
    vocab = sorted(set(text))
    ids = np.array([vocab.index(c) for c in text])
    train, val = ids[:15000], ids[15000:]
    starts = np.arange(0, len(val) - 33, 32)
    x = val[starts[:, None] + np.arange(32)]
    y = val[starts[:, None] + np.arange(32) + 1]
    m = CharNgram(train, vocab=len(vocab), max_order=3)
    b1, b2, b3 = (m.bits_per_char(x, y, k) for k in (1, 2, 3))
    assert b1 > b2 + 1.0 and b2 > b3 + 0.1, (b1, b2, b3)
    assert b1 > 2.5  # about log2 of the alphabet's spread; b3 mostly the word choice
    assert b3 < 1.5


def test_windows_are_scored_on_their_own_like_the_causal_network():
    train = _random_text(6, 3000, 6)
    m = CharNgram(train, vocab=6, max_order=5)
    rng = np.random.default_rng(7)
    x = rng.integers(0, 6, (5, 12))
    y = rng.integers(0, 6, (5, 12))
    lp = m.log2_probs(x, y, 5)
    for i in range(12):
        # characters after position i, and more than 4 before it, change nothing
        x2 = x.copy()
        x2[:, i + 1 :] = (x2[:, i + 1 :] + 1) % 6
        x2[:, : max(0, i - 3)] = (x2[:, : max(0, i - 3)] + 2) % 6
        np.testing.assert_array_equal(m.log2_probs(x2, y, 5)[:, i], lp[:, i])
        k = min(5, i + 2)  # the in-window history: the model of order i + 2 at the start
        want = np.log2(m.prob(x[:, i + 2 - k : i + 1], y[:, i], k))
        np.testing.assert_allclose(lp[:, i], want, rtol=0, atol=1e-15)
    assert m.bits_per_char(x, y, 5) == pytest.approx(-lp.mean())


def test_window_overlap_on_a_constructed_example():
    train = np.arange(20)
    windows = np.array([[0, 1, 2], [17, 18, 19], [5, 6, 8], [19, 0, 1], [3, 4, 5]])
    assert window_overlap(train, windows) == pytest.approx(3 / 5)
    # ids at and past the UTF-16 surrogate range are characters like any other
    big = np.array([0xD7FF, 0xD800, 0xDFFF, 0xE000, 70000])
    assert window_overlap(big, np.array([[0xD800, 0xDFFF], [0xDFFF, 0xD800]])) == 0.5
    with pytest.raises(ValueError, match="windows"):
        window_overlap(train, np.array([1, 2]))
    assert window_overlap(np.array([1, 2]), np.array([[1, 2, 3]])) == 0.0  # longer than train


def test_window_overlap_agrees_with_a_plain_search():
    rng = np.random.default_rng(8)
    for vocab, length in ((2, 8), (3, 6), (300, 3)):
        train = rng.integers(0, vocab, 500)
        windows = rng.integers(0, vocab, (40, length))
        windows[:10] = [train[i : i + length] for i in rng.integers(0, 500 - length, 10)]
        hay = [tuple(train[i : i + length]) for i in range(500 - length + 1)]
        want = np.mean([tuple(w) in set(hay) for w in windows])
        assert window_overlap(train, windows) == want
        assert 0.25 <= want < 1.0  # both found and missing windows


def test_text_baselines_score_the_task_validation_windows():
    cfg = DepthTextConfig(context=16, n_val=24)
    b = text_baselines(cfg, orders=(1, 2, 4))
    split = load_text_split(cfg.val_fraction)
    x, y = validation_windows(cfg, split)
    m = CharNgram(split.train, len(split.vocab), 4)
    assert b["bpc"] == [m.bits_per_char(x, y, k) for k in (1, 2, 4)]
    assert b["bpc"][0] > b["bpc"][1] > b["bpc"][2]
    assert (b["n_val_windows"], b["context"], b["vocab"], b["corpus"]) == (24, 16, 103, "pydoc")
    assert b["overlap"] == window_overlap(split.train, x)
    table = baselines_table(b)
    rows = [ln for ln in table.splitlines() if ln.startswith("|")]
    assert rows[0] == "| 1-gram | 2-gram | 4-gram | overlap |"
    assert len({r.count("|") for r in rows}) == 1


def test_pydoc_default_split_is_unchanged():
    from pydoc_data.topics import topics

    text = "".join(topics[k] for k in sorted(topics))
    vocab = "".join(sorted(set(text)))
    ids = np.array([vocab.index(c) for c in text], np.int32)
    cut = int(round(len(ids) * 0.9))
    s = load_text_split()
    assert s.vocab == vocab
    np.testing.assert_array_equal(s.train, ids[:cut])
    np.testing.assert_array_equal(s.val, ids[cut:])
    assert (DepthTextConfig().corpus, DepthTextConfig().max_chars) == ("pydoc", 0)
    capped = load_text_split(0.5, max_chars=1000)
    assert len(capped.train) + len(capped.val) == 1000


def test_stdlib_corpus_is_split_by_file_deterministically():
    cap = 400_000
    train, val = stdlib_files(0.2, max_chars=cap)
    assert train and val and set(train).isdisjoint(val)
    assert sum(n for _, n in train + val) <= cap
    assert train == sorted(train) and val == sorted(val)
    assert all(_unit_hash("split", p) < 0.2 for p, _ in val)
    assert all(_unit_hash("split", p) >= 0.2 for p, _ in train)
    assert not any(STDLIB_EXCLUDED_DIRS & set(p.split("/")[:-1]) for p, _ in train + val)
    # a file's side does not depend on the cap: the larger sample keeps each file's side
    train2, val2 = stdlib_files(0.2, max_chars=2 * cap)
    assert set(train) <= set(train2) and set(val) <= set(val2)
    # the loader concatenates exactly these files, in this order
    s = load_text_split(0.2, corpus="stdlib", max_chars=cap)
    assert len(s.train) == sum(n for _, n in train) and len(s.val) == sum(n for _, n in val)
    texts = _stdlib_texts()
    first = texts[val[0][0]]
    assert "".join(s.vocab[i] for i in s.val[: len(first)]) == first
    # the same after reading the files again
    _stdlib_texts.cache_clear()
    _stdlib_split.cache_clear()
    assert stdlib_files(0.2, max_chars=cap) == (train, val)
    s2 = load_text_split(0.2, corpus="stdlib", max_chars=cap)
    np.testing.assert_array_equal(s2.train, s.train)
    assert s2.vocab == s.vocab
    # the task's windows come from the validation files
    cfg = DepthTextConfig(context=16, n_val=8, corpus="stdlib", max_chars=cap, val_fraction=0.2)
    xv, _ = validation_windows(cfg)
    vtext = "".join(s.vocab[i] for i in s.val)
    assert all("".join(s.vocab[i] for i in w) in vtext for w in xv)


def test_bad_options_raise_naming_them():
    with pytest.raises(ValueError, match="`corpus`"):
        load_text_split(0.1, corpus="wikipedia")
    with pytest.raises(ValueError, match="`corpus`"):
        validation_windows(DepthTextConfig(corpus="stdlb"))
    with pytest.raises(ValueError, match="`max_chars`"):
        load_text_split(0.1, max_chars=-5)
    with pytest.raises(TypeError, match="`max_chars`"):
        load_text_split(0.1, max_chars=1.5)
    with pytest.raises(ValueError, match="`max_chars`"):  # too small for both sides
        load_text_split(0.1, corpus="stdlib", max_chars=10)
    train = np.array([0, 1, 2, 1, 0])
    with pytest.raises(ValueError, match="`max_order`"):
        CharNgram(train, vocab=3, max_order=0)
    with pytest.raises(TypeError, match="`max_order`"):
        CharNgram(train, vocab=3, max_order=2.0)
    with pytest.raises(ValueError, match="`train` ids"):
        CharNgram(train, vocab=2)
    with pytest.raises(ValueError, match="`discount`"):
        CharNgram(train, vocab=3, max_order=2, discount=1.0)
    m = CharNgram(train, vocab=3, max_order=2)
    with pytest.raises(ValueError, match="`order`"):
        m.distribution([0], order=3)
    with pytest.raises(ValueError, match="`order`"):
        m.bits_per_char(np.array([[0, 1]]), np.array([[1, 2]]), order=0)
    with pytest.raises(ValueError, match="`orders`"):
        text_baselines(DepthTextConfig(context=16, n_val=4), orders=(0, 1))


@pytest.mark.parametrize("smoke", [True, False])
def test_schemes_baselines_use_the_windows_of_its_text_runs(smoke, tmp_path, monkeypatch):
    """experiment=schemes scores the baselines on the text config its trainings use."""
    from transflow.experiments.tasks import schemes

    import transflow.control as control

    used = {}

    class _Stop(Exception):
        pass

    def fake_training(task, tcfg, **kw):
        used["train"] = tcfg
        raise _Stop

    monkeypatch.setattr(control, "run_training", fake_training)

    def fake_baselines(c):
        used["base"] = c
        return {}

    monkeypatch.setattr(control, "text_baselines", fake_baselines)

    class Ctx:
        run_dir = tmp_path

        def log(self, rec):
            pass

    ctx = Ctx()
    ctx.smoke = smoke
    cfg = schemes.Config()
    with pytest.raises(_Stop):
        schemes.train(cfg, ctx, "text", "prenorm", 0)
    schemes.text_baselines(cfg, ctx)
    fields = ("corpus", "max_chars", "val_fraction", "context", "n_val")
    got = {f: getattr(used["base"], f) for f in fields}
    assert got == {f: getattr(used["train"], f) for f in fields}
    x1, _ = validation_windows(used["base"])
    x2, _ = validation_windows(used["train"])
    np.testing.assert_array_equal(x1, x2)


def test_depth_text_table_reports_the_baselines():
    from transflow.experiments.tasks import depth_text

    b = {"orders": [1, 2, 3, 4, 5], "bpc": [4.6, 3.3, 2.4, 2.0, 1.8], "overlap": 0.08}
    b |= {"corpus": "pydoc", "context": 64, "n_val_windows": 256, "n_train_chars": 9}
    b |= {"vocab": 103}
    model = {"bpc": [2.5, 2.6], "bpc_std": [0.1, 0.2], "change_4x": [0.01, 0.03]}
    model |= {"n_params": 10, "cpu_seconds": 1.0}
    text = {"depths": [4, 16], "seeds": [0, 1], "path": model | {"scheme": "heun"}}
    text |= {"per_layer": model | {"scheme": "prenorm"}, "baselines": b}
    report = depth_text.text_table(text)
    assert "| path | heun | 10 | 2.500 ± 0.100 | 2.600 ± 0.200 | 3.00 % | 1.0 |" in report
    assert "| 1-gram | 2-gram | 3-gram | 4-gram | 5-gram | overlap |" in report
    assert "| 4.6000 | 3.3000 | 2.4000 | 2.0000 | 1.8000 | 8.0 % |" in report


def test_text_task_trains_on_the_stdlib_corpus():
    """DEPTH_TEXT with corpus="stdlib": the model's vocabulary and batches come from it."""
    import jax

    from transflow.control import DEPTH_TEXT

    cfg = DepthTextConfig(
        d=8, n_heads=1, n_steps=2, context=8, n_val=4, batch_size=3, path="none", dt=1.0
    )
    cfg = dataclasses.replace(cfg, corpus="stdlib", max_chars=300_000)
    split = load_text_split(cfg.val_fraction, "stdlib", 300_000)
    problem = DEPTH_TEXT.setup(cfg, 0, jax.random.key(0))
    assert problem.extra["vocab"] == len(split.vocab) != 103
    assert problem.extra["n_train_chars"] == len(split.train)
    x, y = problem.batch(2)
    assert x.shape == (3, 8) and (x[:, 1:] == y[:, :-1]).all()
    text = "".join(split.vocab[i] for i in split.train)
    assert all("".join(split.vocab[i] for i in row) in text for row in x)
    assert problem.model(x[0]).shape == (8, len(split.vocab))
