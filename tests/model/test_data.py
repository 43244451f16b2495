"""model/data.py: corpus streaming, split assignment, skipping, domain-balanced sampling, packing,
the position-ID shift of Jina-OCR-v1 5.1 and exact resume; all on a tiny corpus written here."""

from __future__ import annotations

import hashlib
import json
import logging
import random

import numpy as np
import pytest
import torch
from PIL import Image

from model.attention import use_segment_attention
from model.batches import IGNORE_INDEX, BatchStream, pack, shift_positions, single
from model.data import DataConfig, SampleSource, eval_samples
from model.models import build_tiny, rope_index
from model.records import assigned_split, iter_records
from model.sampler import DomainSampler, domain_probabilities
from schemas.config import load
from tests.helpers import corpus_png, corpus_record, write_records

# (domain, source, rows): "docs" has 10x the rows of each other domain, and its sources are 3:1.
LAYOUT = [("docs", "docs-a", 30), ("docs", "docs-b", 10), ("news", "news-a", 4), ("formula", "synth", 4)]
BAD_CORRUPT = ("garbage", "truncated")
BAD_LONG = "long"
CFG = dict(max_length=160, max_sample_tokens=120, eval_fraction=0.2, seed=3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    records = [corpus_record(s, d, n) for d, s, k in LAYOUT for n in range(k)]
    good = corpus_png("good")
    bad = [corpus_record("news-a", "news", 100, image=b"\x89PNG\r\n\x1a\nnot a png at all"),
           corpus_record("news-a", "news", 101, image=good[: len(good) // 2]),
           corpus_record("synth", "formula", 102, response=" ".join(["fox"] * 400))]
    assert all(assigned_split(r.id, "train", CFG["eval_fraction"]) == "train" for r in bad)
    test_row = corpus_record("docs-a", "docs", 200, split="test")
    records += bad + [test_row]
    random.Random(0).shuffle(records)  # streams spread over files and row groups
    root = write_records(tmp_path_factory.mktemp("corpus"), records)
    return {"path": root, "records": records, "corrupt": {bad[0].id, bad[1].id}, "long": bad[2].id,
            "test_id": test_row.id, "by_id": {r.id: r for r in records}}


@pytest.fixture(scope="module")
def tiny():
    return build_tiny("tiny")


def cfg_for(corpus, **kw) -> DataConfig:
    return load(DataConfig, {**CFG, "path": corpus["path"], **kw}, "data")


def good_samples(corpus, tiny, n: int) -> list:
    src = SampleSource(tiny.processor, cfg_for(corpus), records=iter_records(corpus["path"]))
    return [s for _, s in zip(range(n), src)]


# -- split assignment and streaming ----------------------------------------------------------

def test_split_assignment_is_a_deterministic_hash_of_the_id(corpus) -> None:
    path = corpus["path"]
    all_ids = [r["id"] for r in iter_records(path, columns=["id"])]
    assert sorted(all_ids) == sorted(corpus["by_id"])
    train = [r["id"] for r in iter_records(path, "train", ["id", "split"], eval_fraction=0.2)]
    evals = [r["id"] for r in iter_records(path, "eval", ["id", "split"], eval_fraction=0.2)]
    test = [r["id"] for r in iter_records(path, "test", ["id"], eval_fraction=0.2)]
    assert test == [corpus["test_id"]]  # a non-train split keeps its value
    assert sorted(train + evals + test) == sorted(all_ids)
    assert evals == [r["id"] for r in iter_records(path, "eval", ["id"], eval_fraction=0.2)]  # rerun: same rows
    assert 0 < len(evals) < len(train)
    for rid in evals:
        digest = hashlib.sha256(f"pagemill:eval-split\x1f{rid}".encode()).digest()
        assert int.from_bytes(digest[:8], "big") / 2**64 < 0.2
    assert all(assigned_split(rid, "train", 0.2) == "train" for rid in train)
    assert assigned_split(corpus["test_id"], "test", 1.0) == "test"
    assert not list(iter_records(path, "eval", ["id"], eval_fraction=0.0))


def test_iter_records_yields_plain_dicts_with_image_bytes(corpus) -> None:
    rows = iter_records(corpus["path"], "train", ["id", "image", "split"], eval_fraction=0.2)
    first = next(rows)
    assert set(first) == {"id", "image", "split"} and first["split"] == "train"
    assert first["image"] == corpus["by_id"][first["id"]].image


# -- bad input -------------------------------------------------------------------------------

def test_corrupt_and_too_long_records_are_skipped_counted_and_logged_once(corpus, tiny, caplog) -> None:
    cfg = cfg_for(corpus)
    rows = list(iter_records(corpus["path"]))
    src = SampleSource(tiny.processor, cfg, records=rows)
    with caplog.at_level(logging.WARNING, logger="model.data"):
        samples = list(src)
        for r in rows:  # the same bad records again: counted again, logged once
            if r["id"] in corpus["corrupt"]:
                assert src.encode(r) is None
    bad = corpus["corrupt"] | {corpus["long"]}
    assert sorted(s.id for s in samples) == sorted(r["id"] for r in rows if r["id"] not in bad)
    assert src.skipped == {"corrupt_image": 4, "too_long": 1}
    for rid in bad:
        assert sum(rid in m for m in caplog.messages) == 1
    assert all(s.length <= cfg.max_sample_tokens for s in samples)


def test_records_without_a_usable_label_are_skipped_with_a_reason(corpus, tiny) -> None:
    """A null response would train on nothing and score as a perfect page; a unit test that does not parse
    would stop model.eval and the GRPO rewards: each is skipped and counted instead."""
    good = next(r for r in iter_records(corpus["path"], "train", eval_fraction=0.2) if r["id"] not in corpus["corrupt"])
    test = '{"pdf": "p.pdf", "page": 1, "id": "t", "type": "present", "text": "x"}'
    bad = {"missing_response": {"response": None}, "missing_instruction": {"instruction": "  "},
           "bad_unit_tests": {"unit_tests": [test, "{not json"]}, "bad_metadata": {"metadata": '["a list"]'}}
    src = SampleSource(tiny.processor, cfg_for(corpus))
    for reason, change in bad.items():
        assert src.encode({**good, **change}) is None, reason
    assert src.skipped == dict.fromkeys(bad, 1)
    assert src.encode({**good, "unit_tests": [test]}).unit_tests == [test]
    unknown = {**good, "unit_tests": ['{"pdf": "p.pdf", "page": 1, "id": "t", "type": "nope"}']}
    assert src.encode(unknown) is None and src.skipped["bad_unit_tests"] == 2
    assert src.encode(good).task == good["task"]


def test_skips_are_logged_for_the_first_records_per_reason_then_only_counted(corpus, tiny, caplog, monkeypatch) -> None:
    import model.data

    monkeypatch.setattr(model.data, "LOGGED_SKIPS", 1)
    corrupt = [r for r in iter_records(corpus["path"]) if r["id"] in corpus["corrupt"]]
    src = SampleSource(tiny.processor, cfg_for(corpus), records=corrupt)
    with caplog.at_level(logging.WARNING, logger="model.data"):
        for _ in range(3):
            assert list(src) == []
    assert src.skipped == {"corrupt_image": 3 * len(corrupt)} and len(corrupt) == 2
    assert [m.split(":")[1].strip() for m in caplog.messages] == [
        f"skipping record {corrupt[0]['id']}", "more records skipped as corrupt_image;"
        " counted in .skipped, not logged"]
    assert sum(len(ids) for ids in src._logged.values()) == 2  # bounded, whatever the corpus holds


def test_batch_stream_runs_through_bad_records(corpus, tiny) -> None:
    stream = BatchStream(cfg_for(corpus, domain_rates={"news": 1.0, "formula": 1.0}), tiny.processor, tiny.model)
    seen = set()
    for _ in range(12):
        seen.update(next(stream).sample_ids)
    assert stream.skipped["corrupt_image"] >= 2 and stream.skipped["too_long"] >= 1
    assert not seen & (corpus["corrupt"] | {corpus["long"]})
    assert {corpus["by_id"][i].domain for i in seen} == {"news", "formula"}


# -- packing ---------------------------------------------------------------------------------

def test_labels_cover_exactly_the_response_and_end_of_turn(corpus, tiny) -> None:
    samples = good_samples(corpus, tiny, 3)
    batch = pack(samples, np.random.default_rng(0), cfg_for(corpus, shift_prob=0.0), tiny.model)
    ids, labels, seg = batch.input_ids[0], batch.labels[0], batch.segment_ids[0]
    assert ids.shape == labels.shape == seg.shape == batch.mm_token_type_ids[0].shape
    assert (labels[batch.mm_token_type_ids[0] == 1] == IGNORE_INDEX).all()  # image tokens
    assert batch.n_samples == 3 and batch.sample_ids == [s.id for s in samples]
    for i, s in enumerate(samples):
        lab, tok = labels[seg == i], ids[seg == i]
        p = s.encoded.prompt_len
        assert (lab[:p] == IGNORE_INDEX).all()
        assert torch.equal(lab[p:], tok[p:])
        assert int(lab[-1]) == tiny.processor.eos_token_id
        assert tiny.processor.decode(lab[p:]) == s.response
    assert batch.n_response_tokens == sum(s.length - s.encoded.prompt_len for s in samples)
    assert batch.pixel_values.shape[0] == sum(s.encoded.pixel_values.shape[0] for s in samples)
    assert batch.image_grid_thw.shape == (3, 3)


def test_block_mask_is_causal_inside_each_sample_only(corpus, tiny) -> None:
    samples = good_samples(corpus, tiny, 3)
    batch = pack(samples, np.random.default_rng(0), cfg_for(corpus), tiny.model)
    mask, seg = batch.attention_mask[0, 0], batch.segment_ids[0]
    L = seg.numel()
    assert mask.shape == (L, L) and mask.dtype == torch.bool
    i, j = torch.meshgrid(torch.arange(L), torch.arange(L), indexing="ij")
    assert torch.equal(mask, (j <= i) & (seg[i] == seg[j]))
    first_end = samples[0].length
    assert not mask[first_end, first_end - 1]  # sample 2's first token cannot see sample 1


@pytest.mark.parametrize("segments", [False, True], ids=["block-mask", "segment-sdpa"])
@pytest.mark.parametrize("kind", ["tiny", "tiny-moe"])
def test_packed_logits_equal_unpacked_logits(corpus, kind, segments) -> None:
    loaded = build_tiny(kind)
    model = loaded.model.eval()
    if segments:
        assert use_segment_attention(model)
    cfg = cfg_for(corpus, shift_prob=0.0, max_length=400)
    src = SampleSource(loaded.processor, cfg, records=iter_records(corpus["path"]))
    samples = [s for _, s in zip(range(3), src)]
    rng = np.random.default_rng(0)
    batch = pack(samples, rng, cfg, model)
    kwargs = batch.model_kwargs(segments=segments)
    assert (kwargs["attention_mask"] is None) == segments
    with torch.no_grad():
        packed = model(**kwargs).logits[0]
        for i, s in enumerate(samples):
            alone = model(**single(s, rng, cfg, model).model_kwargs()).logits[0]
            torch.testing.assert_close(packed[batch.segment_ids[0] == i], alone, atol=1e-4, rtol=0)


def test_segment_attention_refuses_segments_that_do_not_cover_the_row(corpus) -> None:
    loaded = build_tiny("tiny")
    assert use_segment_attention(loaded.model)
    cfg = cfg_for(corpus, shift_prob=0.0, max_length=400)
    src = SampleSource(loaded.processor, cfg, records=iter_records(corpus["path"]))
    samples = [s for _, s in zip(range(2), src)]
    kwargs = pack(samples, np.random.default_rng(0), cfg, loaded.model).model_kwargs(segments=True)
    kwargs["segment_lengths"] = kwargs["segment_lengths"][:1]
    with pytest.raises(ValueError, match="segments sum to its length"):
        loaded.model(**kwargs)


# -- position-ID shift (5.1) ------------------------------------------------------------------

def mrope_like(L: int) -> torch.Tensor:
    """(3, L) positions whose rows differ on the 'image' part, as M-RoPE's do."""
    pos = torch.arange(L).repeat(3, 1)
    pos[1, 2:6] = torch.tensor([2, 2, 3, 3])
    pos[2, 2:6] = torch.tensor([2, 3, 2, 3])
    return pos


def test_shift_moves_only_the_response_by_one_offset_in_range() -> None:
    L, prompt_len, L_train = 40, 10, 100  # upper bound min(5*40, 100 // 4) = 25
    pos = mrope_like(L)
    before = pos.clone()
    rng = np.random.default_rng(1)
    offsets = []
    for _ in range(4000):
        out = shift_positions(pos, prompt_len, L, L_train, rng, 0.4, 32768)
        assert torch.equal(out[:, :prompt_len], pos[:, :prompt_len])
        diff = out[:, prompt_len:] - pos[:, prompt_len:]
        assert (diff == diff[0, 0]).all()  # one common offset over all tokens and all 3 rows
        offsets.append(int(diff[0, 0]))
    assert torch.equal(pos, before)  # pure: input untouched
    shifted = [o for o in offsets if o]
    assert abs(len(shifted) / len(offsets) - 0.4) < 0.03
    assert min(shifted) == 1 and max(shifted) == 25


def test_shift_bound_uses_five_times_length_for_short_samples_and_cap_holds() -> None:
    rng = np.random.default_rng(2)
    pos = torch.arange(4).repeat(3, 1)  # L = 4: bound min(20, 10_000 // 4) = 20
    offs = {int((shift_positions(pos, 1, 4, 10_000, rng, 1.0, 32768) - pos)[0, -1]) for _ in range(800)}
    assert min(offs) == 1 and max(offs) == 20
    near_cap = torch.arange(32760, 32770).repeat(3, 1)
    out = shift_positions(near_cap, 2, 10, 8192, rng, 1.0, 32768)
    assert int(out.max()) == 32767 and torch.equal(out[:, :2], near_cap[:, :2])
    assert torch.equal(shift_positions(pos, 1, 4, 100, rng, 0.0, 32768), pos)


def test_pack_shifts_each_sample_response_from_its_own_rope_positions(corpus, tiny) -> None:
    samples = good_samples(corpus, tiny, 3)
    cfg = cfg_for(corpus, shift_prob=1.0)
    batch = pack(samples, np.random.default_rng(5), cfg, tiny.model)
    seg = batch.segment_ids[0]
    for i, s in enumerate(samples):
        e = s.encoded
        base = rope_index(tiny.model, e.input_ids[None], e.mm_token_type_ids[None], e.image_grid_thw)[:, 0]
        got = batch.position_ids[:, 0, seg == i]
        p = e.prompt_len
        assert torch.equal(got[:, :p], base[:, :p])
        offset = got[:, p:] - base[:, p:]
        assert (offset == offset[0, 0]).all() and 1 <= int(offset[0, 0]) <= min(5 * e.length, cfg.max_length // 4)


# -- domain-balanced sampling ----------------------------------------------------------------

def domain_shares(sampler: DomainSampler, n: int) -> tuple[dict, dict]:
    domains, sources = {}, {}
    for _ in range(n):
        r = sampler.next_record()
        domains[r["domain"]] = domains.get(r["domain"], 0) + 1
        sources[r["source"]] = sources.get(r["source"], 0) + 1
    return {d: c / n for d, c in domains.items()}, {s: c / n for s, c in sources.items()}


def test_uniform_domain_rates_hold_on_a_skewed_corpus(corpus) -> None:
    sampler = DomainSampler(corpus["path"], "train", seed=1, eval_fraction=0.2, columns=["id", "domain", "source"])
    shares, sources = domain_shares(sampler, 3000)
    assert set(shares) == {"docs", "news", "formula"}  # "docs" holds 10x the rows of each other domain
    for d in shares:
        assert abs(shares[d] - 1 / 3) < 0.04, shares
    assert abs(sources["docs-a"] - sources["docs-b"]) < 0.05, sources  # sources uniform within a domain


def test_configured_rates_and_upweight_are_followed(corpus) -> None:
    sampler = DomainSampler(corpus["path"], "train", domain_rates={"docs": 2, "news": 1, "formula": 1},
                            upweight={"news": 2}, seed=2, eval_fraction=0.2, columns=["domain", "source"])
    assert sampler.rates == pytest.approx({"docs": 0.4, "news": 0.4, "formula": 0.2})
    shares, _ = domain_shares(sampler, 3000)
    for d, want in sampler.rates.items():
        assert abs(shares[d] - want) < 0.04, shares
    assert domain_probabilities(["a", "b"], {"a": 1.0, "*": 3.0}, {}) == {"a": 0.25, "b": 0.75}
    assert domain_probabilities(["a", "b"], {"a": 1.0}, {}) == {"a": 1.0}


def test_each_stream_yields_every_row_once_per_epoch_in_a_new_order(corpus) -> None:
    sampler = DomainSampler(corpus["path"], "train", domain_rates={"docs": 1.0}, seed=4, eval_fraction=0.2)
    stream = next(s for k, s in sampler.streams.items() if (k[0], k[-1]) == ("docs", "docs-b"))
    n = stream.n_rows
    first = [stream.next()["id"] for _ in range(n)]
    second = [stream.next()["id"] for _ in range(n)]
    expected = {r["id"] for r in iter_records(corpus["path"], "train", ["id", "source"], 0.2)
                if r["source"] == "docs-b"}
    assert set(first) == set(second) == expected and len(set(first)) == n
    assert first != second


# -- exact resume ----------------------------------------------------------------------------

def test_sampler_resume_is_exact(corpus) -> None:
    def make():
        return DomainSampler(corpus["path"], "train", seed=7, eval_fraction=0.2, columns=["id", "domain", "source"])

    n, m = 70, 50  # crosses several epochs of the small streams
    whole = make()
    full = [whole.next_record()["id"] for _ in range(n + m)]
    first = make()
    head = [first.next_record()["id"] for _ in range(n)]
    state = json.loads(json.dumps(first.state_dict()))
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [resumed.next_record()["id"] for _ in range(m)] == full
    with pytest.raises(ValueError):
        DomainSampler(corpus["path"], "eval", eval_fraction=0.2).load_state_dict(state)


@pytest.mark.parametrize("packed", [True, False])
def test_batch_stream_resume_is_exact(corpus, tiny, packed) -> None:
    cfg = cfg_for(corpus, pack=packed, degrade_prob=0.5, shift_prob=0.5)
    m = 2
    whole = BatchStream(cfg, tiny.processor, tiny.model)
    full = [next(whole) for _ in range(5 + m)]
    first = BatchStream(cfg, tiny.processor, tiny.model)
    carried = 0
    for n in range(1, 6):  # save after each of several batches, with and without a carried-over sample
        next(first)
        carried += first._carry is not None  # white-box: make sure the carry path is exercised
        state = json.loads(json.dumps(first.state_dict()))
        resumed = BatchStream(cfg, tiny.processor, tiny.model)
        resumed.load_state_dict(state)
        for want in full[n:n + m]:
            got = next(resumed)
            assert got.sample_ids == want.sample_ids
            for name in ("input_ids", "labels", "position_ids", "attention_mask", "pixel_values", "image_grid_thw"):
                assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert resumed.skipped == whole.skipped  # same position (batch 5 + m), same counts
    if packed:
        assert carried >= 2
        assert any(b.n_samples > 1 for b in full) and all(b.input_ids.shape[1] <= cfg.max_length for b in full)
    else:
        assert all(b.n_samples == 1 for b in full)


# -- robustness SFT --------------------------------------------------------------------------

def test_degrade_prob_one_changes_the_pixels(corpus, tiny) -> None:
    record = next(r for r in iter_records(corpus["path"], "train", eval_fraction=0.2) if r["domain"] == "docs")
    clean = SampleSource(tiny.processor, cfg_for(corpus)).encode(record, np.random.default_rng(0))
    degraded = SampleSource(tiny.processor, cfg_for(corpus, degrade_prob=1.0)).encode(record, np.random.default_rng(0))
    a, b = clean.encoded.pixel_values, degraded.encoded.pixel_values
    assert a.shape != b.shape or not torch.equal(a, b)
    assert torch.equal(clean.encoded.input_ids[clean.encoded.prompt_len:],
                       degraded.encoded.input_ids[degraded.encoded.prompt_len:])  # same target
    other_domain = SampleSource(tiny.processor, cfg_for(corpus, degrade_prob=1.0, degrade_domains=["news"]))
    assert torch.equal(other_domain.encode(record, np.random.default_rng(0)).encoded.pixel_values, a)
    # no RNG (eval): never degraded
    no_rng = SampleSource(tiny.processor, cfg_for(corpus, degrade_prob=1.0)).encode(record)
    assert torch.equal(no_rng.encoded.pixel_values, a)


def test_a_label_with_boxes_is_degraded_without_moving_the_pixels(corpus, tiny, monkeypatch) -> None:
    """A box-convention label (instruct's Nemotron or JSON layout answers) holds positions the image must keep:
    only photometric ops are drawn for it; other pages still get the geometric ones. The spy calls the real
    ``degrade`` and only records what it applied."""
    import json

    import synth.augment as augment

    applied: list[str] = []
    real = augment.degrade

    def spy(*args, **kwargs):
        image, ops = real(*args, **kwargs)
        applied.extend(op["op"] for op in ops)
        return image, ops

    monkeypatch.setattr(augment, "degrade", spy)
    record = next(r for r in iter_records(corpus["path"], "train", eval_fraction=0.2) if r["domain"] == "docs")
    source = SampleSource(tiny.processor, cfg_for(corpus, degrade_prob=1.0))
    boxed = {**record, "metadata": json.dumps({"instruct": {"convention": "nemotron_bbox_cls"}})}
    for seed in range(30):
        source.encode(dict(boxed), np.random.default_rng(seed))
    assert applied and not set(applied) & set(augment.GEOMETRIC_OPS)
    applied.clear()
    for seed in range(30):
        source.encode(dict(record), np.random.default_rng(seed))
    assert set(applied) & set(augment.GEOMETRIC_OPS)


def test_a_sample_carries_its_records_response_convention(corpus, tiny) -> None:
    """What its unit tests read in a completion (``model.eval``, ``model.rewards``) follows the convention."""
    import json

    record = next(r for r in iter_records(corpus["path"], "train", eval_fraction=0.2) if r["domain"] == "docs")
    source = SampleSource(tiny.processor, cfg_for(corpus))
    boxed = {**record, "metadata": json.dumps({"instruct": {"convention": "nemotron_plain_bbox"}})}
    assert source.encode(boxed).convention == "nemotron_plain_bbox"
    assert source.encode({**record, "metadata": None}).convention == "-"  # no instruct stage: read as it is


# -- config and eval -------------------------------------------------------------------------

def test_config_load_validates() -> None:
    cfg = load(DataConfig, {"upweight": {"historical-newspaper": 2}, "degrade_prob": 0.25, "pack": False}, "data")
    assert cfg.upweight == {"historical-newspaper": 2.0} and cfg.max_length == 2048 and cfg.shift_prob == 0.4
    with pytest.raises(ValueError, match="unknown"):
        load(DataConfig, {"max_len": 10}, "data")
    with pytest.raises(ValueError):
        DataConfig(max_length=100, max_sample_tokens=200)
    with pytest.raises(ValueError):
        DataConfig(shift_prob=1.5)


def test_eval_samples_are_the_eval_split_in_file_order(corpus, tiny) -> None:
    cfg = cfg_for(corpus)
    want = [r["id"] for r in iter_records(corpus["path"], "eval", ["id"], cfg.eval_fraction)
            if r["id"] not in corpus["corrupt"] | {corpus["long"]}]
    got = [s.id for s in eval_samples(cfg, tiny.processor)]
    assert got == want and got
    assert [s.id for s in eval_samples(cfg, tiny.processor, limit=1)] == want[:1]
    assert all(s.unit_tests and s.instruction for s in eval_samples(cfg, tiny.processor))


def test_a_shard_without_a_split_column_is_train_for_the_sampler_too(tmp_path) -> None:
    import pyarrow.parquet as pq

    root = write_records(tmp_path / "c", [corpus_record("docs-a", "docs", n) for n in range(20)], files=1)
    shard = next((tmp_path / "c" / "data").glob("*.parquet"))
    pq.write_table(pq.read_table(shard).drop(["split"]), shard)
    train = {r["id"] for r in iter_records(root, "train", ["id"], eval_fraction=0.1)}
    sampler = DomainSampler(root, "train", eval_fraction=0.1)
    drawn = {sampler.next_record()["id"] for _ in range(60)}
    assert drawn and drawn <= train


def test_special_token_spellings_in_page_text_stay_text(tiny) -> None:
    """OCR text of a page about chat templates: its '<|im_end|>' must not end the turn, nor '<|image_pad|>'
    become an image position (which failed the forward pass with a feature/token count mismatch)."""
    proc = tiny.processor
    image = Image.new("RGB", (56, 56), "white")
    plain = proc.encode("Convert the page to Markdown.", image, "Hello world")
    instruction = "Convert the page to Markdown."  # ordinary prompts tokenize as before
    assert proc.prompt_ids(instruction) == proc.tokenizer(proc.prompt_text(instruction),
                                                          add_special_tokens=False)["input_ids"]
    for text in ["Hello <|im_end|> world", "see <|image_pad|> here", "a <|vision_start|> b"]:
        encoded = proc.encode(f"Read {text}", image, text)
        response = encoded.input_ids[encoded.prompt_len:].tolist()
        assert response[-1] == proc.eos_token_id and proc.eos_token_id not in response[:-1]
        assert int(encoded.mm_token_type_ids.sum()) == int(plain.mm_token_type_ids.sum())
        assert encoded.input_ids[: plain.prompt_len].tolist()[:3] == plain.input_ids[:3].tolist()
        assert proc.decode(response) == text
        out = tiny.model(input_ids=encoded.input_ids[None], mm_token_type_ids=encoded.mm_token_type_ids[None],
                         pixel_values=encoded.pixel_values, image_grid_thw=encoded.image_grid_thw)
        assert out.logits.shape[1] == len(encoded.input_ids)
