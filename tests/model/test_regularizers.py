import math
from types import SimpleNamespace

import pytest
import torch

from model.regularizers import (
    RegularizerConfig,
    chunk_ids,
    contrastive,
    gate_entropy,
    load_balance,
    regularizer_loss,
    router_losses,
    router_probs,
    sequence_keys,
    z_loss,
)

R2 = 1 / math.sqrt(2)


def close(a, b, tol=1e-6):
    value = lambda x: float(x.detach()) if isinstance(x, torch.Tensor) else float(x)  # noqa: E731
    return abs(value(a) - value(b)) < tol


# --------------------------------------------------------------------------- router probabilities

def test_router_probs_softmax_and_normalised_sigmoid():
    logits = torch.tensor([[0.0, math.log(3.0)]])
    assert torch.allclose(router_probs(logits, "softmax"), torch.tensor([[0.25, 0.75]]))
    # sigmoid(ln 3) = 3/4, sigmoid(0) = 1/2 -> normalised 0.6, 0.4
    assert torch.allclose(router_probs(logits, "sigmoid"), torch.tensor([[0.4, 0.6]]))
    with pytest.raises(ValueError):
        router_probs(logits, "sparsemax")


# --------------------------------------------------------------------------- load balancing

def test_load_balance_top1_by_hand():
    probs = torch.tensor([[0.7, 0.1, 0.1, 0.1],
                          [0.1, 0.6, 0.2, 0.1]])
    # f = [1/2, 1/2, 0, 0]; P = [0.4, 0.35, 0.15, 0.1]; N * sum f P = 4 * (0.2 + 0.175)
    assert close(load_balance(probs, top_k=1), 1.5)


def test_load_balance_top2_by_hand():
    probs = torch.tensor([[0.6, 0.25, 0.1, 0.05],
                          [0.1, 0.5, 0.3, 0.1]])
    # top-2: {0,1} and {1,2}; f = [.5, 1, .5, 0]; P = [.35, .375, .2, .075]; 4 * (.175 + .375 + .1)
    assert close(load_balance(probs, top_k=2), 2.6)


def test_load_balance_uniform_router_gives_k():
    probs = torch.full((5, 8), 1 / 8)
    assert close(load_balance(probs, top_k=2), 2.0)


def test_load_balance_gradient_flows_through_p_only():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]], requires_grad=True)
    load_balance(router_probs(logits), top_k=1).backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


# --------------------------------------------------------------------------- gate entropy

def test_gate_entropy_by_hand():
    uniform = [0.25] * 4
    assert close(gate_entropy(torch.tensor([uniform, [1.0, 0, 0, 0]])), 0.5)  # (log4 + 0) / (2 log4)
    assert close(gate_entropy(torch.tensor([[0.5, 0.5, 0, 0], uniform])), 0.75)  # (log2 + log4) / (2 log4)


# --------------------------------------------------------------------------- aggregation over layers / sequences

def test_sequence_keys_split_rows_and_segments():
    seg = torch.tensor([[0, 0, 1], [0, 0, -1]])
    keys = sequence_keys(seg, (2, 3))
    assert keys.tolist() == [0, 0, 1, 2, 2, -1]
    assert sequence_keys(None, (2, 2)).tolist() == [0, 0, 1, 1]


def test_router_losses_per_sequence_then_mean_over_sequences_and_layers():
    a = [[0.6, 0.25, 0.1, 0.05], [0.1, 0.5, 0.3, 0.1]]  # L_bal 2.6 at k=2
    u = [[0.25] * 4] * 2  # uniform: L_bal = k = 2, entropy 1
    pad = [[0.97, 0.01, 0.01, 0.01]]  # padding, must not count
    layer1 = torch.tensor(a + u + pad).log()  # softmax(log p) = p
    layer2 = torch.tensor(u + u + pad).log()
    keys = sequence_keys(torch.tensor([[0, 0, 1, 1, -1]]), (1, 5))
    bal, ent = router_losses((layer1, layer2), keys, top_k=2, kind="softmax")
    assert close(bal, ((2.6 + 2.0) / 2 + 2.0) / 2)
    h_a = sum(-p * math.log(p) for row in a for p in row) / (2 * math.log(4))
    assert close(ent, ((h_a + 1.0) / 2 + 1.0) / 2)


def test_router_losses_reject_length_mismatch():
    with pytest.raises(ValueError):
        router_losses((torch.zeros(3, 4),), torch.tensor([0, 0]), top_k=1)


# --------------------------------------------------------------------------- z-loss

def test_z_loss_by_hand_masked():
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0], [50.0, 50.0]])
    mask = torch.tensor([True, True, False])
    # logsumexp: log2 and log4 = 2 log2 -> mean of squares 2.5 (log2)^2
    assert close(z_loss(logits, mask, 0.1), 0.1 * 2.5 * math.log(2) ** 2)


# --------------------------------------------------------------------------- SimCTG

def test_contrastive_one_chunk_by_hand():
    h = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # s12 = 0, s13 = s23 = 1/sqrt2; with m = 0.5 only the four (i,3)/(3,i) pairs are positive: s - 0.5
    expected = 4 * (R2 - 0.5) / 6
    assert close(contrastive(h, torch.tensor([0, 0, 0]), margin=0.5), expected)


def test_chunk_ids_follow_segments_chunk_length_and_mask():
    keys = torch.tensor([0, 0, 0, 0, 0, 1, 1, -1])
    assert chunk_ids(keys, 2).tolist() == [0, 0, 1, 1, 2, 3, 3, -1]


def test_contrastive_pairs_never_cross_segments_or_chunks():
    h = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    seg = torch.tensor([[0, 0, 0, 1]])
    keys = sequence_keys(seg, (1, 4))
    # chunk_len 2: {h1,h2}, {h3}, {h4} (h4 is another sample); m = 1.5 -> pair loss 0.5 + s
    assert close(contrastive(h, chunk_ids(keys, 2), 1.5), 0.5 + R2)
    # masking h2 leaves the chunk {h1, h3}: s = 0
    keys[1] = -1
    assert close(contrastive(h, chunk_ids(keys, 2), 1.5), 0.5)


def test_contrastive_without_pairs_is_zero_and_differentiable():
    h = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    loss = contrastive(h, torch.tensor([0, 1]), 0.5)
    loss.backward()
    assert float(loss.detach()) == 0.0 and h.grad is not None


# --------------------------------------------------------------------------- regularizer_loss

def test_config_validates_and_reports_needs():
    cfg = RegularizerConfig()
    assert not cfg.enabled and not cfg.needs_router and not cfg.needs_hidden
    assert RegularizerConfig(entropy=-0.1).needs_router
    assert RegularizerConfig(contrastive=1.0).needs_hidden
    with pytest.raises(ValueError):
        RegularizerConfig(router_kind="relu")
    with pytest.raises(ValueError):
        RegularizerConfig(chunk_len=1)


def test_regularizer_loss_off_is_zero():
    out = SimpleNamespace(logits=torch.randn(1, 3, 5))
    total, parts = regularizer_loss(RegularizerConfig(), out, None, None, None)
    assert float(total) == 0.0 and parts == {}


def test_regularizer_loss_z_uses_logits_that_predict_targets():
    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0], [50.0, 50.0]]])
    mask = torch.tensor([[False, True, True]])  # targets at 1 and 2 -> logits at 0 and 1
    total, parts = regularizer_loss(RegularizerConfig(z_loss=0.1), SimpleNamespace(logits=logits), mask,
                                    None, None)
    assert close(total, 0.1 * 2.5 * math.log(2) ** 2) and close(parts["z_loss"], total)


def test_regularizer_loss_contrastive_uses_mask_and_segments():
    h = torch.tensor([[[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0]]])
    out = SimpleNamespace(logits=torch.zeros(1, 4, 3))
    cfg = RegularizerConfig(contrastive=2.0, margin=1.5, chunk_len=2)
    total, parts = regularizer_loss(cfg, out, torch.tensor([[True, False, True, True]]),
                                    torch.tensor([[0, 0, 0, 1]]), h)
    assert close(parts["contrastive"], 0.5) and close(total, 1.0)


def test_regularizer_loss_router_terms_need_router_logits():
    out = SimpleNamespace(logits=torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="router_logits"):
        regularizer_loss(RegularizerConfig(balance=0.01, top_k=2, router_kind="softmax"), out, None, None, None)


@pytest.fixture(scope="module")
def tiny_moe():
    from model.models import build_tiny

    return build_tiny("tiny-moe").model


def test_for_model_reads_glm_gate(tiny_moe):
    cfg = RegularizerConfig(balance=0.01).for_model(tiny_moe)
    assert cfg.top_k == 2 and cfg.router_kind == "sigmoid"
    assert RegularizerConfig(balance=0.01, router_kind="softmax").for_model(tiny_moe).router_kind == "softmax"


def test_tiny_moe_router_terms_match_model_routing_and_backpropagate(tiny_moe):
    model = tiny_moe
    torch.manual_seed(0)
    ids = torch.randint(20, 600, (2, 6))
    seg = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, -1, -1]])
    chosen = []
    hooks = [m.register_forward_hook(lambda mod, inp, outp: chosen.append(outp[2]))
             for name, m in model.named_modules() if name.endswith("mlp.gate")]
    try:
        out = model(input_ids=ids, output_router_logits=True, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    assert len(out.router_logits) == 3 and out.router_logits[0].shape == (12, 8)
    # The experts our f_i counts are the experts the GLM gate actually chose.
    for logits, idx in zip(out.router_logits, chosen):
        ours = router_probs(logits, "sigmoid").topk(2).indices.sort(-1).values
        assert torch.equal(ours, idx.sort(-1).values)

    cfg = RegularizerConfig(balance=0.01, entropy=0.001, z_loss=1e-4, contrastive=0.1, chunk_len=4).for_model(model)
    mask = torch.ones(2, 6, dtype=torch.bool)
    total, parts = regularizer_loss(cfg, out, mask, seg, out.hidden_states[-1])
    assert set(parts) == {"balance", "entropy", "z_loss", "contrastive"}
    weighted = (0.01 * parts["balance"] + 0.001 * parts["entropy"] + parts["z_loss"] + 0.1 * parts["contrastive"])
    assert close(total, weighted, 1e-5)
    # The balance term equals the per-sequence definition applied to the three real sequences.
    keys = sequence_keys(seg, (2, 6))
    per_layer = []
    for logits in out.router_logits:
        p = router_probs(logits, "sigmoid")
        per_layer.append(sum(float(load_balance(p[keys == k], 2).detach()) for k in keys.unique() if k >= 0) / 3)
    assert close(parts["balance"], sum(per_layer) / 3, 1e-5)

    model.zero_grad()
    total.backward()
    gates = [p for n, p in model.named_parameters() if n.endswith("mlp.gate.weight")]
    assert gates and all(g.grad is not None and g.grad.abs().sum() > 0 for g in gates)
