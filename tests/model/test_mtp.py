"""model/mtp_head.py, model/mtp.py: the FastMTP head (3.1), its objective on hand-computed values
(5.6, eqs. 4-5), the state-shift grid of eq. 1 against a literal reference, fitting that leaves the verifier bitwise
unchanged, and the safetensors export with its DeepSeek/vLLM name mapping."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from safetensors.torch import load_file

from model.models import build_tiny, text_model
from model.mtp import (
    LossWeights,
    MTPConfig,
    collate,
    depth_weights,
    fit_for_checkpoint,
    fit_head,
    grid_forward,
    main,
    mtp_loss,
    self_distill,
    trace,
)
from model.mtp_head import DraftHead, HeadCache, export_serving, load_head, save_head, vllm_mtp_mapping
from model.processing import Encoded
from tests.helpers import TEXT_PAGE_WORDS, text_page, write_text_page_corpus


def samples(processor, n: int, seed: int = 0) -> list[Encoded]:
    r = random.Random(seed)
    return [processor.encode("Convert this page to Markdown.", text_page(seed * 100 + i),
                             " ".join(r.choices(TEXT_PAGE_WORDS, k=r.randint(4, 10)))) for i in range(n)]


@pytest.fixture(scope="module")
def tiny():
    loaded = build_tiny("tiny", seed=0)
    loaded.model.eval()
    return loaded


def randomized(head: DraftHead, seed: int = 1) -> DraftHead:
    """A head with every weight random, so no path is an identity by construction."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.1 if p.ndim > 1 else 1.0) + (1.0 if p.ndim == 1 else 0))
    return head


# --------------------------------------------------------------------------- objective (5.6)

def test_depth_weights_are_normalized_powers_of_beta():
    assert depth_weights(3, 0.6) == pytest.approx([1 / 1.96, 0.6 / 1.96, 0.36 / 1.96])
    assert sum(depth_weights(5, 0.6)) == pytest.approx(1.0)


def test_mtp_loss_matches_hand_computation():
    # One row, V = 2, d = 1, K = 2. Depth 1: P = (.5, .5), u = 1. Depth 2: P = (.75, .25), u = 0.
    # Target token 0, Q = (.5, .5), b_{p+1} = 2.
    #   CE1 = ln 2, CE2 = -ln .75; KL1 = 0, KL2 = .5 ln(.5/.75) + .5 ln(.5/.25); MSE1 = 1, MSE2 = 4
    #   alpha = (1/1.6, .6/1.6); L = sum_k alpha_k (.85 CE + .45 KL + .45 MSE) = 1.440456275
    logits = [torch.tensor([[0.0, 0.0]]), torch.tensor([[math.log(3.0), 0.0]])]
    states = [torch.tensor([[1.0]]), torch.tensor([[0.0]])]
    loss = mtp_loss(logits, states, torch.tensor([0]), torch.tensor([[2.0]]), torch.tensor([[0.0, 0.0]]))
    assert loss.total.item() == pytest.approx(1.440456275, abs=1e-6)
    assert loss.ce == pytest.approx([math.log(2), -math.log(0.75)], abs=1e-6)
    assert loss.kl == pytest.approx([0.0, 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(2)], abs=1e-6)
    assert loss.mse == pytest.approx([1.0, 4.0], abs=1e-6)


def test_mtp_loss_weights_and_detached_targets():
    logits = [torch.tensor([[1.0, -1.0, 0.5]], requires_grad=True)]
    state = torch.tensor([[0.5, -0.5]], requires_grad=True)
    target_states = torch.tensor([[1.0, 1.0]], requires_grad=True)
    target_logits = torch.tensor([[0.0, 2.0, 0.0]], requires_grad=True)
    only_mse = mtp_loss(logits, [state], torch.tensor([1]), target_states, target_logits,
                        LossWeights(ce=0.0, kl=0.0, mse=1.0))
    assert only_mse.total.item() == pytest.approx(0.25 + 2.25)
    only_mse.total.backward()
    assert target_states.grad is None and target_logits.grad is None  # verifier targets detached
    assert state.grad is not None


# --------------------------------------------------------------------------- eq. 1 grid

def fake_trace(L: int, P: int, d: int, vocab: int, seed: int):
    from model.mtp import VerifierTrace

    g = torch.Generator().manual_seed(seed)
    return VerifierTrace(torch.randint(0, vocab, (L,), generator=g), torch.randn(L, d, generator=g),
                         torch.arange(L) + 3, P)


def test_collate_marks_prompt_and_loss_rows():
    b = collate([fake_trace(7, 3, 4, 50, 0), fake_trace(5, 2, 4, 50, 1)])
    assert b.prompt_rows[0].tolist() == [True, True, True, False, False, False, False]
    # rows p with P-1 <= p <= len-3: the target x_{p+2} is a response token a draft can propose
    assert b.loss_rows[0].tolist() == [False, False, True, True, True, False, False]
    assert b.loss_rows[1].tolist() == [False, True, True, False, False, False, False]
    assert b.next_tokens[0, :6].tolist() == b.input_ids[0, 1:7].tolist()


def test_grid_forward_is_equation_1(tiny):
    """Against a literal reading of eq. 1, one sample at a time without padding or prefix reuse:
    a^(1)_p = b_p; a^(k)_p = u^(k-1)_{p-1}, except prompt rows, which keep b_p at every depth."""
    head = randomized(DraftHead.from_verifier(tiny.model))
    d, V = head.config.hidden_size, head.config.vocab_size
    traces = [fake_trace(12, 5, d, V, 0), fake_trace(9, 7, d, V, 1), fake_trace(10, 4, d, V, 2)]
    got = grid_forward(head, collate(traces), depths=3)
    for i, t in enumerate(traces):
        L = t.input_ids.shape[0]
        nxt = torch.cat([t.input_ids[1:], torch.zeros(1, dtype=torch.long)])
        a = t.states.clone()
        for k in range(3):
            u = head(nxt[None], a[None], t.positions[None])[0]
            torch.testing.assert_close(got[k][i, :L], u, atol=1e-5, rtol=1e-5)
            a = torch.stack([t.states[p] if p < t.prompt_len else u[p - 1] for p in range(L)])
    # prompt rows keep base states, so their outputs do not depend on the depth
    P = traces[1].prompt_len
    torch.testing.assert_close(got[0][1, :P], got[2][1, :P])
    assert not torch.allclose(got[0][0, 6:12], got[2][0, 6:12])


def test_head_cache_and_padding_match_full_forward(tiny):
    head = randomized(DraftHead.from_verifier(tiny.model))
    d, V = head.config.hidden_size, head.config.vocab_size
    g = torch.Generator().manual_seed(3)
    tok, st, pos = torch.randint(0, V, (1, 9), generator=g), torch.randn(1, 9, d, generator=g), torch.arange(9)[None]
    full = head(tok, st, pos)
    cache = HeadCache()
    parts = [head(tok[:, :4], st[:, :4], pos[:, :4], cache), head(tok[:, 4:5], st[:, 4:5], pos[:, 4:5], cache),
             head(tok[:, 5:], st[:, 5:], pos[:, 5:], cache)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)
    cache.crop(4)
    assert cache.length == 5
    torch.testing.assert_close(head(tok[:, 5:], st[:, 5:], pos[:, 5:], cache), full[:, 5:], atol=1e-5, rtol=1e-5)
    # left padding with masked slots and explicit positions leaves the real rows unchanged
    pad = 3
    tok_p = torch.cat([torch.zeros(1, pad, dtype=torch.long), tok], 1)
    st_p = torch.cat([torch.randn(1, pad, d, generator=g) * 50, st], 1)
    pos_p = torch.cat([torch.zeros(1, pad, dtype=torch.long), pos], 1)
    valid = torch.arange(9 + pad)[None] >= pad
    torch.testing.assert_close(head(tok_p, st_p, pos_p, HeadCache(), valid)[:, pad:], full, atol=1e-5, rtol=1e-5)


def test_untrained_head_is_the_identity_on_the_state_through_tied_parts(tiny):
    head = DraftHead.from_verifier(tiny.model)
    b = torch.randn(2, 5, head.config.hidden_size)
    u = head(torch.randint(0, 100, (2, 5)), b, torch.arange(5).expand(2, 5))
    norm = text_model(tiny.model).norm
    with torch.no_grad():
        expected = norm(head.hnorm(b))  # N_o is the verifier's final norm
        torch.testing.assert_close(u, expected, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(head.logits(u), tiny.model.lm_head(u))
    assert torch.isfinite(u).all()
    assert not any(p is tiny.model.lm_head.weight for p in head.parameters())


# --------------------------------------------------------------------------- fitting

@pytest.mark.parametrize("kind", ["tiny", "tiny-moe"])
def test_fit_trains_only_the_head_and_leaves_the_verifier_bitwise_unchanged(kind):
    loaded = build_tiny(kind, seed=0)
    model = loaded.model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    data = self_distill(model, samples(loaded.processor, 4), loaded.processor.eos_token_id, max_new_tokens=12)
    head0 = DraftHead.from_verifier(model)
    init = {k: v.clone() for k, v in head0.state_dict().items()}
    result = fit_head(model, data, MTPConfig(steps=30, batch_size=4, lr=3e-3, warmup_steps=2, log_every=10),
                      head=head0)
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before), "a verifier tensor changed"
    assert all(p.grad is None for p in model.parameters())
    names = set(result.head.state_dict())
    assert {n.split(".")[0] for n in names} == {"enorm", "hnorm", "eh_proj", "block"}
    changed = {k for k, v in result.head.state_dict().items() if not torch.equal(v, init[k])}
    assert changed == names  # B_theta, P, N_e, N_h all trained
    assert result.trainable == sum(v.numel() for v in init.values())
    assert result.history[-1]["loss"] < 0.8 * result.history[0]["loss"]


def test_self_distill_keeps_prompts_and_uses_greedy_outputs(tiny):
    src = samples(tiny.processor, 2, seed=5)
    out = self_distill(tiny.model, src, tiny.processor.eos_token_id, max_new_tokens=9)
    for s, o in zip(src, out):
        P = s.prompt_len
        assert o.prompt_len == P and torch.equal(o.input_ids[:P], s.input_ids[:P])
        ids = s.input_ids[:P][None]
        ref = tiny.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                  mm_token_type_ids=s.mm_token_type_ids[:P][None], pixel_values=s.pixel_values,
                                  image_grid_thw=s.image_grid_thw, do_sample=False, max_new_tokens=9,
                                  eos_token_id=tiny.processor.eos_token_id,
                                  pad_token_id=tiny.processor.eos_token_id)[0, P:]
        assert o.input_ids[P:].tolist() == ref.tolist()
        assert o.mm_token_type_ids[P:].sum() == 0


def test_trace_states_are_post_norm_and_give_the_logits(tiny):
    s = samples(tiny.processor, 1, seed=9)[0]
    t = trace(tiny.model, s)
    assert t.states.shape == (s.length, tiny.model.config.get_text_config().hidden_size)
    assert t.positions.shape == (s.length,) and t.positions[-1] > t.positions[s.prompt_len - 1]
    with torch.no_grad():
        out = tiny.model(input_ids=s.input_ids[None], pixel_values=s.pixel_values, image_grid_thw=s.image_grid_thw,
                         mm_token_type_ids=s.mm_token_type_ids[None])
        torch.testing.assert_close(tiny.model.lm_head(t.states), out.logits[0], atol=1e-4, rtol=1e-4)


# --------------------------------------------------------------------------- export

def test_save_load_roundtrip_and_deepseek_mapping(tiny, tmp_path):
    head = randomized(DraftHead.from_verifier(tiny.model), seed=4)
    save_head(head, tmp_path / "head")
    saved = load_file(str(tmp_path / "head" / "model.safetensors"))
    doc = json.loads((tmp_path / "head" / "mtp_config.json").read_text())
    assert doc["concat_order"] == ["embedding", "hidden"] and doc["vllm"]["method"] == "mtp"
    back = load_head(tmp_path / "head", tiny.model)
    assert all(torch.equal(saved[k], v) for k, v in back.state_dict().items())
    x = (torch.randint(0, 100, (1, 4)), torch.randn(1, 4, head.config.hidden_size), torch.arange(4)[None])
    torch.testing.assert_close(back(*x), head(*x))

    mapping = vllm_mtp_mapping(head)
    N = tiny.model.config.get_text_config().num_hidden_layers
    assert set(saved) | {"tied.embed.weight", "tied.norm.weight", "tied.lm_head.weight"} == set(mapping)
    assert len(set(mapping.values())) == len(mapping)
    assert all(v.startswith(f"model.layers.{N}.") for v in mapping.values())
    assert mapping["eh_proj.weight"] == f"model.layers.{N}.eh_proj.weight"
    assert mapping["block.self_attn.q_proj.weight"] == f"model.layers.{N}.self_attn.q_proj.weight"
    assert mapping["block.mlp.down_proj.weight"] == f"model.layers.{N}.mlp.down_proj.weight"
    assert mapping["block.post_attention_layernorm.weight"] == f"model.layers.{N}.post_attention_layernorm.weight"
    assert mapping["tied.norm.weight"] == f"model.layers.{N}.shared_head.norm.weight"
    assert mapping["tied.lm_head.weight"] == f"model.layers.{N}.shared_head.head.weight"
    assert doc["deepseek_mapping"] == mapping

    served = load_file(str(export_serving(head, tmp_path / "serve" / "mtp.safetensors")))
    assert set(served) == set(mapping.values())
    # same concat order as DeepSeek (enorm(e) first): eh_proj is copied unchanged
    assert torch.equal(served[f"model.layers.{N}.eh_proj.weight"], head.eh_proj.weight)
    assert torch.equal(served[f"model.layers.{N}.shared_head.head.weight"], tiny.model.lm_head.weight)
    with pytest.raises(ValueError):
        vllm_mtp_mapping(head, family="mimo")


def test_cli_fits_and_saves_a_head_for_a_checkpoint(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0 and "--checkpoint" in capsys.readouterr().out
    corpus = write_text_page_corpus(tmp_path / "corpus")
    main(["--checkpoint", "tiny", "--out", str(tmp_path / "head"), "--corpus", corpus, "--steps", "3",
          "--batch-size", "2", "--max-new-tokens", "6"])
    assert "3 steps" in capsys.readouterr().out
    doc = json.loads((tmp_path / "head" / "mtp_config.json").read_text())
    assert doc["fit"]["steps"] == 3 and doc["head"]["depths"] == 3
    assert (tmp_path / "head" / "model.safetensors").stat().st_size > 0


def test_cli_refuses_a_value_that_can_never_run_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--checkpoint", "tiny", "--corpus", "/nonexistent", "--out", "/tmp/unused", "--steps", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == "python -m model.mtp: steps must be >= 1, got 0"


def test_fit_for_checkpoint_encodes_only_the_pages_a_fit_can_draw(tmp_path, tiny, monkeypatch):
    """Unset limit: steps x batch_size pages, a seeded uniform sample (each held page is ~2 MB of pixels
    and a verifier trace; holding the whole train split grew with the corpus)."""
    import model.mtp as mtp

    corpus = write_text_page_corpus(tmp_path / "corpus", pages=12)
    fitted = []
    monkeypatch.setattr(mtp, "fit_head", lambda model, samples, cfg: fitted.append(len(samples)))
    cfg = MTPConfig(steps=2, batch_size=2, self_distill=False)
    fit_for_checkpoint(tiny, corpus, cfg, eval_fraction=0.0)
    fit_for_checkpoint(tiny, corpus, cfg, limit=5, eval_fraction=0.0)
    assert fitted == [4, 5]
