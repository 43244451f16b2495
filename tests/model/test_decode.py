"""model/decode.py: speculative decoding is lossless (eq. 2 greedy verification) on 200+ prompts,
random text and page images, batch size 1 and batched, with a fitted and an untrained head; the
Table 8 metrics on hand-computed values; the bench CLI (model/speculate.py)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
import torch

from model.decode import accept_stats, bench_table, format_table, generate
from model.models import build_tiny, save
from model.mtp import MTPConfig, fit_head, self_distill
from model.mtp_head import DraftHead, save_head
from model.processing import Encoded
from model.speculate import main
from schemas.prompts import PROMPTS
from tests.helpers import text_page, write_text_page_corpus

MAX_NEW = 10


def text_prompt(ids: list[int]) -> Encoded:
    t = torch.tensor(ids, dtype=torch.long)
    return Encoded(t, torch.zeros(0, 1176), torch.zeros(0, 3, dtype=torch.long), torch.zeros_like(t), len(ids))


def random_prompts(n: int, seed: int) -> list[Encoded]:
    r = random.Random(seed)
    return [text_prompt([r.randrange(20, 7900) for _ in range(r.randint(3, 24))]) for _ in range(n)]


def page_prompts(processor, n: int, seed: int) -> list[Encoded]:
    r = random.Random(seed)
    instructions = [v for (task, lang), v in PROMPTS.items()]
    sizes = [(56, 56), (84, 56), (112, 84), (56, 112)]
    return [processor.encode(r.choice(instructions), text_page(seed * 1000 + i, r.choice(sizes))) for i in range(n)]


def reference(model, prompt: Encoded, eos: int, max_new: int = MAX_NEW) -> list[int]:
    """Plain greedy decoding by transformers' generate."""
    P = prompt.prompt_len
    ids = prompt.input_ids[:P][None]
    images = {} if prompt.image_grid_thw.numel() == 0 else \
        {"pixel_values": prompt.pixel_values, "image_grid_thw": prompt.image_grid_thw}
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                         mm_token_type_ids=prompt.mm_token_type_ids[:P][None], **images, do_sample=False,
                         max_new_tokens=max_new, eos_token_id=eos, pad_token_id=eos)
    return out[0, P:].tolist()


@pytest.fixture(scope="module")
def setup():
    loaded = build_tiny("tiny", seed=0)
    model, proc = loaded.model.eval(), loaded.processor
    eos = proc.eos_token_id
    prompts = random_prompts(164, seed=1) + page_prompts(proc, 40, seed=2)
    with torch.no_grad():
        refs = [reference(model, p, eos) for p in prompts]
    # The head is fitted on the verifier's own greedy outputs for some of the test prompts (an
    # untrained verifier's continuations of random prompts do not generalize); there it accepts
    # often, elsewhere rarely, so both regimes are covered.
    fit_set = prompts[:20] + prompts[-4:]
    fit_data = self_distill(model, fit_set, eos, MAX_NEW + 4)
    trained = fit_head(model, fit_data, MTPConfig(steps=80, batch_size=8, lr=3e-3, warmup_steps=3,
                                                  log_every=0)).head
    return {"loaded": loaded, "model": model, "eos": eos, "prompts": prompts, "refs": refs, "trained": trained,
            "untrained": DraftHead.from_verifier(model), "fit_set": fit_set}


def batches(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]


# --------------------------------------------------------------------------- lossless (eq. 2)

def test_at_least_200_prompts_random_and_page_images(setup):
    prompts = setup["prompts"]
    assert len(prompts) >= 200
    assert sum(p.image_grid_thw.numel() > 0 for p in prompts) >= 40


def test_k0_path_is_plain_greedy(setup):
    model, eos, prompts, refs = setup["model"], setup["eos"], setup["prompts"], setup["refs"]
    for p, ref in zip(prompts[::8], refs[::8]):
        r = generate(model, [p], None, 0, MAX_NEW, eos)
        assert r.tokens[0] == ref
        assert r.verifier_passes == len(ref)  # one pass per token, the prefill gives the first
    for group, ref_group in zip(batches(prompts, 16), batches(refs, 16)):
        assert generate(model, group, None, 0, MAX_NEW, eos).tokens == ref_group


@pytest.mark.parametrize("which,k", [("trained", 3), ("trained", 1), ("untrained", 2)])
def test_batch_size_one_is_lossless(setup, which, k):
    model, eos, head = setup["model"], setup["eos"], setup[which]
    step = 2 if which == "trained" and k == 3 else 5
    for p, ref in list(zip(setup["prompts"], setup["refs"]))[::step]:
        r = generate(model, [p], head, k, MAX_NEW, eos)
        assert r.tokens[0] == ref


@pytest.mark.parametrize("which,k", [("trained", 1), ("trained", 2), ("trained", 3), ("untrained", 3)])
def test_batched_is_lossless_with_per_row_acceptance(setup, which, k):
    model, eos, head, prompts, refs = setup["model"], setup["eos"], setup[which], setup["prompts"], setup["refs"]
    accepted = Counter()
    ragged_steps = 0
    for group, ref_group in zip(batches(prompts, 12), batches(refs, 12)):
        r = generate(model, group, head, k, MAX_NEW, eos)
        assert r.tokens == ref_group
        for row in r.accepted:
            accepted.update(row)
        steps = min(len(a) for a in r.accepted)
        ragged_steps += sum(len({a[s] for a in r.accepted}) > 1 for s in range(steps))
    if which == "trained":
        # every branch ran: full acceptance (bonus token), partial, and first-draft rejection,
        # and rows of one batch accepted different lengths in the same step
        assert accepted[k] > 0 and accepted[0] > 0
        assert k == 1 or any(accepted[n] for n in range(1, k))
        assert ragged_steps > 0


def test_fitted_head_commits_more_tokens_per_verifier_pass(setup):
    model, eos = setup["model"], setup["eos"]
    prompts = setup["fit_set"]
    passes = {}
    for which in ("trained", "untrained"):
        res = [generate(model, [p], setup[which], 3, MAX_NEW, eos) for p in prompts]
        passes[which] = sum(r.verifier_passes for r in res) / sum(len(r.tokens[0]) for r in res)
    assert passes["trained"] < 0.6  # vs 1.0 for plain greedy
    assert passes["trained"] < passes["untrained"]


def test_end_of_turn_stops_like_generate(setup):
    model, head = setup["model"], setup["trained"]
    p, ref = setup["prompts"][0], setup["refs"][0]
    stop = ref[4]  # pretend a mid-sequence token is the end-of-turn marker
    expected = reference(model, p, stop)
    assert expected == ref[:ref.index(stop) + 1]
    for k in (0, 3):
        assert generate(model, [p], head, k, MAX_NEW, stop).tokens[0] == expected
    assert generate(model, [p, setup["prompts"][1]], head, 3, MAX_NEW, stop).tokens[0] == expected


def test_glm_moe_verifier_is_lossless_too():
    loaded = build_tiny("tiny-moe", seed=0)
    model, proc = loaded.model.eval(), loaded.processor
    eos = proc.eos_token_id
    prompts = random_prompts(10, seed=7) + page_prompts(proc, 4, seed=8)
    refs = [reference(model, p, eos) for p in prompts]
    head = DraftHead.from_verifier(model)
    for p, ref in zip(prompts, refs):
        assert generate(model, [p], head, 3, MAX_NEW, eos).tokens[0] == ref
    assert generate(model, prompts, head, 2, MAX_NEW, eos).tokens == refs


# --------------------------------------------------------------------------- Table 8 metrics

def test_accept_stats_hand_computed():
    st = accept_stats([0, 1, 3, 3, 2], k=3)
    assert st.steps == 5
    assert st.tau == pytest.approx(14 / 5)  # (1 + 2 + 4 + 4 + 3) / 5, bonus included
    assert st.acceptance == pytest.approx((14 / 5 - 1) / 3)
    assert st.conditional == pytest.approx([4 / 5, 3 / 4, 2 / 3])  # #{A>=d} / #{A>=d-1}
    # marginals multiply out of the conditionals: tau = 1 + sum_d prod_{e<=d} a_e
    marg = [math.prod(st.conditional[:d]) for d in range(1, 4)]
    assert 1 + sum(marg) == pytest.approx(st.tau)
    assert accept_stats([], 2).steps == 0


def test_bench_table_columns(setup):
    model, eos = setup["model"], setup["eos"]
    rows = bench_table(model, setup["trained"], setup["prompts"][:6] + setup["prompts"][-2:], (0, 1, 3),
                       MAX_NEW, eos, warmup=False)
    assert [r.k for r in rows] == [0, 1, 3]
    base, k1, k3 = rows
    assert base.speedup == 1.0 and base.cost == 1.0 and math.isnan(base.tau) and base.passes_per_token > 0.9
    assert all(r.lossless for r in rows) and len({r.tokens for r in rows}) == 1
    for r in (k1, k3):
        assert r.tau == pytest.approx(1 + r.acceptance * r.k)
        assert r.cost == pytest.approx(r.tau / r.speedup)
        assert len(r.conditional) == r.k and r.passes_per_token < base.passes_per_token
    text = format_table(rows)
    assert "tau" in text and "a_3" in text and text.count("\n") == 3
    # k = 0 given last (or not at all) is still each prompt's reference for the lossless column
    rows = bench_table(model, setup["trained"], setup["prompts"][:2], (3, 0), MAX_NEW, eos, warmup=False)
    assert [r.k for r in rows] == [0, 3] and all(r.lossless for r in rows)


def test_bench_cli_on_a_checkpoint_and_head(setup, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0 and "--bench" in capsys.readouterr().out
    loaded = setup["loaded"]
    save(loaded.model, loaded.processor, tmp_path / "ckpt")
    save_head(setup["trained"], tmp_path / "head")
    corpus = write_text_page_corpus(tmp_path / "corpus", 12)  # 3 of these ids hash into the eval split
    main(["--bench", "--checkpoint", str(tmp_path / "ckpt"), "--head", str(tmp_path / "head"), "--corpus", corpus,
          "--ks", "0,2", "--max-new-tokens", "8"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:6] == ["k", "tok/s", "S", "accept", "tau", "c"]
    assert [line.split()[0] for line in out[1:]] == ["0", "2"] and out[2].split()[-2] == "yes"
    assert out[2].split()[-1].endswith("%")  # distinct tokens per output
    # without --head, one is fitted first on the corpus's train split
    main(["--bench", "--checkpoint", str(tmp_path / "ckpt"), "--corpus", corpus, "--ks", "1", "--fit-steps", "2",
          "--max-new-tokens", "4"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("no --head: fitted one") and "2 steps" in out[0]
    assert [line.split()[0] for line in out[2:]] == ["0", "1"]


def _favour_image_pad(model) -> int:
    """The verifier's LM head made to prefer ``<|image_pad|>`` above all (a barely trained model may)."""
    image_id = model.config.image_token_id
    head = model.lm_head
    bias = torch.zeros(head.weight.shape[0])
    bias[image_id] = 1e4
    head.bias = torch.nn.Parameter(bias)
    return image_id


def test_no_vision_token_is_generated_and_decoding_stays_lossless():
    """A completion is text: ``<|image_pad|>`` and its kin are suppressed (model.models.suppress_vision_tokens)
    in generate and in the speculative decoder alike, so it still equals plain greedy decoding."""
    loaded = build_tiny("tiny", seed=0)
    model, proc = loaded.model.eval(), loaded.processor
    image_id = _favour_image_pad(model)
    eos = proc.eos_token_id
    prompts = random_prompts(4, seed=3) + page_prompts(proc, 2, seed=4)
    refs = [reference(model, p, eos) for p in prompts]
    assert all(refs) and not any(set(r) & set(model.generation_config.suppress_tokens) for r in refs)
    head = DraftHead.from_verifier(model)
    for k in (0, 2):
        assert generate(model, prompts, head, k, MAX_NEW, eos).tokens == refs
    model.generation_config.suppress_tokens = []  # the bias does what it says: without suppression, image_pad
    assert set(reference(model, prompts[0], eos)) == {image_id}
