"""GRPO (Jina-OCR-v1 5.3): the advantage and loss math on hand-computed values, rollouts and
log-probabilities on the tiny model, the loop's logs and checkpoint, and a reward that climbs."""

from __future__ import annotations

import hashlib
import io
import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image, ImageDraw

from model.data import DataConfig, Sample
from model.grpo import (
    GRPOConfig,
    _completions,
    clip_shares,
    completion_logprobs,
    dapo_loss,
    group_mean_advantages,
    k3_kl,
    load_prompts,
    mean_reward,
    remax_advantages,
    rollout,
    train_grpo,
)
from model.models import build_tiny
from model.rewards import RewardConfig, RewardPool, score
from schemas.config import load
from schemas.page import PAGE_SCHEMA, PageRecord, ProvenanceStep, page_id

# --------------------------------------------------------------------------- pure functions


def test_remax_advantage_is_sampled_minus_greedy_exactly():
    sampled = torch.tensor([[0.5, 0.25, 1.0], [0.0, 0.75, 0.125]])
    greedy = torch.tensor([0.25, 0.75])
    want = torch.tensor([[0.25, 0.0, 0.75], [-0.75, 0.0, -0.625]])
    assert torch.equal(remax_advantages(sampled, greedy), want)
    assert torch.equal(remax_advantages(sampled.reshape(-1), greedy), want.reshape(-1))  # flat, grouped


def test_group_mean_advantages():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2, 0.2, 0.2, 0.6])
    got = group_mean_advantages(rewards, 4)
    assert torch.allclose(got, torch.tensor([0.5, -0.5, 0.0, 0.0, -0.1, -0.1, -0.1, 0.3]))
    assert got.shape == rewards.shape
    assert torch.allclose(group_mean_advantages(rewards.reshape(2, 4), 4), got.reshape(2, 4))


@pytest.mark.parametrize("value", [0.9, 0.1, 1 / 3, 0.7])
def test_a_group_that_scored_alike_has_exactly_zero_advantage(value):
    # float32's mean of 8 x 0.9 is not 0.9 in the last bit: the page counted as live and was trained on
    rewards = torch.tensor([value] * 8 + [0.2, 0.4, 0.6, 0.8, 0.2, 0.4, 0.6, 0.8], dtype=torch.float32)
    got = group_mean_advantages(rewards, 8)
    assert torch.equal(got[:8], torch.zeros(8)) and got.dtype == torch.float32
    assert torch.allclose(got[8:], torch.tensor([-0.3, -0.1, 0.1, 0.3] * 2))


def test_dapo_loss_by_hand_with_asymmetric_clipping():
    # sequence 0 (A = +1): ratios 1.5, 1.25, 1.0 and one padded token
    # sequence 1 (A = -1): ratios 0.5, 0.9
    ratios = torch.tensor([[1.5, 1.25, 1.0, 7.0], [0.5, 0.9, 1.0, 1.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    old = torch.zeros(2, 4)
    new = torch.log(ratios).requires_grad_(True)
    adv = torch.tensor([1.0, -1.0])
    loss = dapo_loss(new, old, adv, mask, eps_low=0.2, eps_high=0.28)
    # A>0: min(r, clip(r, 0.8, 1.28)) = 1.28, 1.25, 1.0; A<0: min(-r, -clip(r)) = -0.8, -0.9
    want = -(1.28 + 1.25 + 1.0 - 0.8 - 0.9) / 5
    assert loss.item() == pytest.approx(want, abs=1e-6)
    # symmetric clipping (eps_high = eps_low) would cut 1.25 to 1.2: clip-higher keeps it
    sym = dapo_loss(new, old, adv, mask, eps_low=0.2, eps_high=0.2)
    assert sym.item() == pytest.approx(-(1.2 + 1.2 + 1.0 - 0.8 - 0.9) / 5, abs=1e-6)
    loss.backward()
    # clipped tokens (1.5 with A>0, 0.5 with A<0) and the padded token get no gradient;
    # d/dlogp of -r*A/5 is -r*A/5 for the others
    want_grad = torch.tensor([[0.0, -1.25 / 5, -1.0 / 5, 0.0], [0.0, 0.9 / 5, 0.0, 0.0]])
    assert torch.allclose(new.grad, want_grad, atol=1e-6)
    assert clip_shares(new.detach(), old, adv, mask, 0.2, 0.28) == (1 / 5, 1 / 5)


def test_dapo_loss_is_token_level_normalised():
    # two sequences of 1 and 3 tokens, ratio 1: loss = -(A0*1 + A1*3) / 4 (not the mean of per-sequence means)
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]], dtype=torch.bool)
    loss = dapo_loss(logp, logp, torch.tensor([1.0, 0.5]), mask)
    assert loss.item() == pytest.approx(-(1.0 + 1.5) / 4)


def test_k3_kl():
    logp = torch.tensor([0.0, math.log(0.5), -1.0])
    ref = torch.tensor([0.0, 0.0, -2.0])
    # d = ref - logp: 0 -> 0; log 2 -> 2 - log 2 - 1; -1 -> e^-1 + 1 - 1
    want = torch.tensor([0.0, 1 - math.log(2), math.exp(-1)])
    assert torch.allclose(k3_kl(logp, ref), want, atol=1e-6)


def test_config_validation():
    with pytest.raises(ValueError, match="baseline"):
        GRPOConfig(baseline="mean")
    with pytest.raises(ValueError, match=">= 2"):
        GRPOConfig(baseline="group_mean", num_rollouts=1)
    with pytest.raises(ValueError, match="grpo.rollouts: unknown key"):
        load(GRPOConfig, {"rollouts": 4}, "grpo")
    cfg = load(GRPOConfig, {"num_rollouts": 4, "reward": {"terms": ["content"], "floors": {}}}, "grpo")
    assert cfg.num_rollouts == 4 and cfg.reward.terms == ("content",) and cfg.baseline == "remax"
    for bad in ({"top_p": 0}, {"lr": 0}, {"max_grad_norm": -1}, {"max_prompts": 0}, {"warmup_steps": -1}):
        with pytest.raises(ValueError, match="grpo: need"):
            GRPOConfig(**bad)


def test_optim_config_validation():
    from model.optim import OptimConfig

    for bad in ({"lr": -1}, {"vision_lr": 0}, {"min_lr_ratio": 1.5}, {"betas": (0.9, 1.0)}, {"warmup_steps": -1}):
        with pytest.raises(ValueError, match="optim: need"):
            OptimConfig(**bad)


# --------------------------------------------------------------------------- rollouts


@pytest.fixture(scope="module")
def tiny():
    return build_tiny("tiny", seed=0)


def toy_sample(processor, i: int, reference: str, unit_tests: list[str] | None = None) -> Sample:
    image = Image.new("RGB", (112, 84), (255, 255 - 40 * i, 255))
    encoded = processor.encode("Read the page.", image)
    return Sample(encoded, f"toy{i}", "toy", "toy", reference, unit_tests or [], "Read the page.")


def test_completions_mask_ends_at_end_of_turn(tiny):
    p = tiny.processor
    eos, pad = p.eos_token_id, p.tokenizer.pad_token_id
    word = p.tokenizer("fox", add_special_tokens=False)["input_ids"]
    n = len(word)
    prompt = [5, 6]
    rows = torch.tensor([prompt + word + [eos] + [pad] * (2 * n - 1),
                         prompt + word * 2 + [eos] + [pad] * (n - 1),
                         prompt + word * 3])  # no end-of-turn: truncated
    r = _completions(rows, 2, eos, pad, p)
    assert r.tokens.shape == (3, 3 * n)
    assert r.mask.sum(1).tolist() == [n + 1, 2 * n + 1, 3 * n]
    assert r.truncated == [False, False, True]
    assert r.texts[0].strip() == "fox" and r.texts[1].replace(" ", "") == "foxfox"
    assert (r.tokens[0, n + 1:] == pad).all()


@pytest.mark.parametrize("kind", ["tiny", "tiny-moe"])
def test_completion_logprobs_match_a_plain_forward(kind):
    loaded = build_tiny(kind, seed=0)
    p = loaded.processor
    enc = toy_sample(p, 0, "x").encoded
    torch.manual_seed(0)
    r = rollout(loaded, enc, 3, GRPOConfig(max_completion_tokens=5))
    assert r.tokens.shape == (3, 5) and r.mask.all()
    tokens = r.tokens.clone()
    tokens[0, 2], tokens[0, 3:] = p.eos_token_id, p.tokenizer.pad_token_id  # a shorter, padded row
    mask = torch.arange(5)[None] <= torch.tensor([2, 4, 4])[:, None]
    with torch.no_grad():
        got = completion_logprobs(loaded.model, enc, tokens, mask, temperature=0.5)
        for i in range(3):
            n = int(mask[i].sum())
            ids = torch.cat([enc.input_ids, tokens[i, :n]])[None]
            mm = torch.cat([enc.mm_token_type_ids, torch.zeros(n, dtype=torch.long)])[None]
            logits = loaded.model(input_ids=ids, mm_token_type_ids=mm, pixel_values=enc.pixel_values,
                                  image_grid_thw=enc.image_grid_thw).logits[0, enc.prompt_len - 1:-1]
            logits[:, loaded.model.generation_config.suppress_tokens] = float("-inf")  # never sampled
            want = (logits / 0.5).log_softmax(-1).gather(-1, tokens[i, :n, None]).squeeze(-1)
            assert torch.allclose(got[i, :n], want, atol=1e-5)
            assert (got[i, n:] == 0).all()  # padding


def test_rollouts_never_sample_an_image_token_so_their_logprobs_can_be_computed(tmp_path):
    """A model that favours ``<|image_pad|>`` (as a barely trained one may) still samples text: one more image
    token in the completion would not match the page's image features in the teacher-forced pass (make
    train crashed so: "Image features and image tokens do not match"). Also after a save and load."""
    from model.models import load as load_model
    from model.models import save

    loaded = build_tiny("tiny", seed=0)
    bias = torch.zeros(loaded.model.lm_head.weight.shape[0])
    bias[loaded.model.config.image_token_id] = 1e4
    loaded.model.lm_head.bias = torch.nn.Parameter(bias)
    enc = toy_sample(loaded.processor, 0, "x").encoded
    torch.manual_seed(0)
    r = rollout(loaded, enc, 3, GRPOConfig(max_completion_tokens=4, temperature=1.0))
    assert not set(r.tokens.flatten().tolist()) & set(loaded.model.generation_config.suppress_tokens)
    with torch.no_grad():
        logp = completion_logprobs(loaded.model, enc, r.tokens, r.mask)
    # scored under the distribution they were sampled from: without the suppressed image token's 1e4 logit
    # every token's log-probability would be about -1e4
    assert torch.isfinite(logp).all() and (logp > -50).all()
    save(build_tiny("tiny", seed=0).model, loaded.processor, tmp_path / "ckpt")
    assert load_model(str(tmp_path / "ckpt")).model.generation_config.suppress_tokens == \
        loaded.model.generation_config.suppress_tokens


# --------------------------------------------------------------------------- the loop

REFERENCE = "The quick brown fox jumps over the lazy dog near the river."


def test_train_grpo_logs_updates_and_writes_a_checkpoint(tmp_path):
    loaded = build_tiny("tiny", seed=0)
    prompts = [toy_sample(loaded.processor, i, REFERENCE) for i in range(2)]
    cfg = GRPOConfig(num_rollouts=3, max_completion_tokens=4, lr=1e-2, steps=2, prompts_per_step=1,
                     beta_kl=0.1, updates_per_batch=2,
                     reward=RewardConfig(terms=("content", "structure", "repetition", "format"), workers=1))
    before = {k: v.clone() for k, v in loaded.model.named_parameters()}
    history = train_grpo(loaded, cfg, prompts, tmp_path / "grpo")
    assert [h.step for h in history] == [1, 2]
    h = history[0]
    assert set(h.terms) == {"content", "structure", "repetition", "format"}
    assert h.greedy_reward_mean is not None and 0 <= h.reward_mean <= 1
    assert h.completion_tokens_mean <= 4 and h.reward_timeouts == 0
    assert h.kl is not None and h.kl >= 0
    assert h.advantage_min <= h.advantage_mean <= h.advantage_max
    changed = {k for k, v in loaded.model.named_parameters() if not torch.equal(v, before[k])}
    assert any(k.startswith("lm_head") for k in changed)
    assert not any(".visual.blocks." in k for k in changed)  # vision tower frozen, projector trains
    logs = [json.loads(line) for line in (tmp_path / "grpo" / "grpo_log.jsonl").read_text().splitlines()]
    assert [x["step"] for x in logs] == [1, 2] and "zero_advantage_share" in logs[0]
    assert (tmp_path / "grpo" / "model.safetensors").exists()
    assert (tmp_path / "grpo" / "trainer_state.json").exists()


def test_one_rollout_of_one_page_logs_valid_json(tmp_path):
    loaded = build_tiny("tiny", seed=0)
    prompts = [toy_sample(loaded.processor, 0, REFERENCE)]
    cfg = GRPOConfig(num_rollouts=1, max_completion_tokens=3, steps=1, prompts_per_step=1,
                     reward=RewardConfig(terms=("content",), workers=1))
    train_grpo(loaded, cfg, prompts, tmp_path / "grpo")

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    [log] = [json.loads(line, parse_constant=refuse) for line in (tmp_path / "grpo" / "grpo_log.jsonl").open()]
    assert log["reward_std"] == 0.0 and log["advantage_std"] == 0.0


def test_zero_advantage_prompts_are_left_out_of_the_update():
    # the only term is left out for every completion (the reference has no formula): every reward
    # is 1.0, every group-mean advantage 0, nothing to learn, weights unchanged
    loaded = build_tiny("tiny", seed=0)
    prompts = [toy_sample(loaded.processor, 0, "no formula here")]
    cfg = GRPOConfig(num_rollouts=3, baseline="group_mean", max_completion_tokens=3, lr=1e-2, steps=1,
                     prompts_per_step=1, reward=RewardConfig(terms=("formula",), workers=1))
    before = {k: v.clone() for k, v in loaded.model.named_parameters()}
    [h] = train_grpo(loaded, cfg, prompts, None)
    assert h.zero_advantage_share == 1.0 and h.reward_mean == 1.0 and h.loss == 0.0
    assert h.greedy_reward_mean is None
    assert all(torch.equal(v, before[k]) for k, v in loaded.model.named_parameters())


def test_one_update_raises_the_likelihood_of_better_rollouts():
    """A single step on fixed rollouts: completions with a positive advantage become more likely
    relative to those with a negative one (the fast variant of the climbing test below)."""
    loaded = build_tiny("tiny", seed=0)
    prompts = [toy_sample(loaded.processor, 0, REFERENCE)]
    cfg = GRPOConfig(num_rollouts=8, baseline="group_mean", max_completion_tokens=6, lr=1e-2, steps=1,
                     prompts_per_step=1, reward=RewardConfig(terms=("content",), workers=1))
    enc = prompts[0].encoded
    torch.manual_seed(cfg.seed)  # train_grpo seeds the same way, so it draws these rollouts again
    r = rollout(loaded, enc, cfg.num_rollouts, cfg)
    with torch.no_grad():
        lp_before = completion_logprobs(loaded.model, enc, r.tokens, r.mask).sum(1)
    [h] = train_grpo(loaded, cfg, prompts, None)
    with torch.no_grad():
        lp_after = completion_logprobs(loaded.model, enc, r.tokens, r.mask).sum(1)
    rewards = torch.tensor([score(REFERENCE, t, cfg=cfg.reward).total for t in r.texts])
    assert h.reward_mean == pytest.approx(float(rewards.mean()), abs=1e-6)  # the same rollouts
    adv = group_mean_advantages(rewards, 8)
    gain = lp_after - lp_before
    assert (adv > 0).any() and (adv < 0).any()
    assert gain[adv > 0].mean() > gain[adv < 0].mean()


@pytest.mark.slow
def test_mean_reward_climbs_on_the_training_prompts():
    """15 ReMax steps on two pages (content reward through the real reward pool): the mean sampled
    reward over 64 fresh rollouts rises (measured: 0.173 -> 0.228)."""
    loaded = build_tiny("tiny", seed=0)
    prompts = [toy_sample(loaded.processor, i, REFERENCE) for i in range(2)]
    cfg = GRPOConfig(num_rollouts=8, max_completion_tokens=8, lr=3e-2, steps=15, prompts_per_step=2,
                     reward=RewardConfig(terms=("content",), workers=1))
    with RewardPool(cfg.reward) as pool:
        torch.manual_seed(1)
        before = mean_reward(loaded, prompts, cfg, pool, samples_per_prompt=32)
        train_grpo(loaded, cfg, prompts, None, pool=pool)
        torch.manual_seed(1)
        after = mean_reward(loaded, prompts, cfg, pool, samples_per_prompt=32)
    assert after > before + 0.02


# --------------------------------------------------------------------------- prompts from the corpus


def _png(text: str) -> bytes:
    image = Image.new("L", (84, 56), "white")
    ImageDraw.Draw(image).text((4, 20), text, fill="black")
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _record(source: str, domain: str, n: int, tests: bool) -> PageRecord:
    data = _png(f"{source} {n}")
    test = json.dumps({"type": "present", "text": "fox", "pdf": "x.pdf", "page": 1, "id": f"t{n}"})
    return PageRecord(
        id=page_id(source, str(n), 0), source=source, source_id=str(n), page_number=0, domain=domain,
        language="en", license="cc0", image=data, image_sha256=hashlib.sha256(data).hexdigest(), width=84,
        height=56, task="parse_page", instruction="Convert the page to markdown.", response=f"fox {n}",
        unit_tests=[test] if tests else [], provenance=[ProvenanceStep("test", "1", "x")], split="train")


def test_load_prompts_prefers_synthetic_pages_with_unit_tests(tmp_path, tiny):
    records = [_record("jinaocrsynth", "synthetic-table", n, tests=n % 2 == 0) for n in range(6)]
    records += [_record("finepdfs", "web-pdf", n, tests=True) for n in range(6, 9)]
    (tmp_path / "data").mkdir()
    pq.write_table(pa.Table.from_pylist([r.to_row() for r in records], schema=PAGE_SCHEMA),
                   tmp_path / "data" / "train-00000-of-00001.parquet")
    data = DataConfig(path=str(tmp_path), eval_fraction=0.0)
    prompts = load_prompts(tmp_path, tiny.processor, GRPOConfig(), data=data)
    assert sorted(p.response for p in prompts) == ["fox 0", "fox 2", "fox 4"]
    assert all(p.source == "jinaocrsynth" and p.unit_tests for p in prompts)
    # by domain, tests not required, capped
    cfg = GRPOConfig(sources=("web-pdf",), require_unit_tests=False, max_prompts=2)
    assert [p.response for p in load_prompts(tmp_path, tiny.processor, cfg, data=data)] == ["fox 6", "fox 7"]


def test_load_prompts_encodes_only_the_prompts_a_run_can_draw(tmp_path, tiny, monkeypatch):
    """Unset max_prompts: a seeded uniform sample of steps x prompts_per_step, not every matching page
    (each encoded page holds ~2 MB of pixels, so encoding them all grew with the corpus)."""
    import model.grpo as grpo

    records = [_record("jinaocrsynth", "synthetic-table", n, tests=True) for n in range(40)]
    (tmp_path / "data").mkdir()
    pq.write_table(pa.Table.from_pylist([r.to_row() for r in records], schema=PAGE_SCHEMA),
                   tmp_path / "data" / "train-00000-of-00001.parquet")
    data = DataConfig(path=str(tmp_path), eval_fraction=0.0)
    encoded = []
    real = grpo.SampleSource.encode

    def counted(self, record, rng=None):
        encoded.append(record["id"])
        return real(self, record, rng)

    monkeypatch.setattr(grpo.SampleSource, "encode", counted)
    cfg = GRPOConfig(steps=3, prompts_per_step=2, seed=5)
    prompts = load_prompts(tmp_path, tiny.processor, cfg, data=data)
    assert len(prompts) == 6 and len(encoded) == 6
    order = [r.response for r in records]
    assert [order.index(p.response) for p in prompts] == sorted(order.index(p.response) for p in prompts)
    again = [p.response for p in load_prompts(tmp_path, tiny.processor, cfg, data=data)]
    assert again == [p.response for p in prompts]  # seeded
    others = {tuple(p.response for p in load_prompts(tmp_path, tiny.processor, GRPOConfig(steps=3, prompts_per_step=2,
                                                                                          seed=s), data=data))
              for s in range(6)}
    assert len(others) > 1 and any(set(o) - {f"fox {n}" for n in range(6)} for o in others)  # not the first six


def test_uniform_sample_is_uniform_and_bounded():
    from collections import Counter

    from model.records import uniform_sample

    assert uniform_sample(range(3), 5, 0) == [0, 1, 2]
    counts = Counter(x for seed in range(3000) for x in uniform_sample(range(10), 3, seed))
    assert set(counts) == set(range(10)) and max(counts.values()) / min(counts.values()) < 1.25
    assert all(s == sorted(s) for s in (uniform_sample(range(50), 7, seed) for seed in range(20)))
