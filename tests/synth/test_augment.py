"""synth/augment.py: seeded page degradations and the per-record AugmentStage."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from PIL import Image, ImageDraw

from schemas.deadletter import RecordError
from schemas.page import PageRecord, ProvenanceStep, page_id, validate
from synth.augment import OPS, STAGE, VERSION, AugmentConfig, AugmentStage, degrade


def text_page(width: int = 160, height: int = 200, mode: str = "L") -> Image.Image:
    """Black-on-white 'text': default-font lines plus a few thick strokes."""
    image = Image.new(mode, (width, height), "white")
    draw = ImageDraw.Draw(image)
    for y in range(10, height - 20, 16):
        draw.text((8, y), "The quick brown fox 0123", fill="black")
    draw.rectangle((20, height - 18, width - 20, height - 14), fill="black")
    return image


def png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def record(i: int, image: Image.Image | None = None) -> PageRecord:
    data = png(image if image is not None else text_page())
    return PageRecord(
        id=page_id("synth-test", str(i), 0), source="synth-test", source_id=str(i), page_number=0,
        domain="test", language="en", license="cc0", image=data,
        image_sha256=hashlib.sha256(data).hexdigest(), width=160, height=200, task="parse_page",
        instruction="Read the page.", response="The quick brown fox", provenance=[ProvenanceStep("render", "1", "x")],
    )


def test_forced_ops_change_the_image_as_documented() -> None:
    page = text_page(mode="L")
    base = np.asarray(page, dtype=float)
    cfg = AugmentConfig()

    out, applied = degrade(page, 1, cfg, ops=["rotate90"])
    turn = applied[0]["degrees_clockwise"]
    assert out.size == ((200, 160) if turn in (90, 270) else (160, 200))

    out, applied = degrade(page, 1, AugmentConfig(rotations=(90,)), ops=["rotate90"])
    assert out.size == (200, 160)
    assert np.array_equal(np.asarray(out), np.rot90(np.asarray(page), k=-1))

    out, applied = degrade(page, 1, cfg, ops=["downscale"])
    assert out.size == (80, 100) and applied == [{"op": "downscale", "mode": "shrink", "factor": 0.5}]
    out, _ = degrade(page, 1, AugmentConfig(downscale_mode="down_up"), ops=["downscale"])
    assert out.size == page.size and not np.array_equal(np.asarray(out), base)

    out, applied = degrade(page, 1, cfg, ops=["erode"])
    assert out.size == page.size and np.asarray(out).mean() < base.mean()  # strokes thicken (ink bleed)
    thick = page.resize((320, 400), Image.Resampling.NEAREST)  # 2 px strokes: a max filter may take 1 off
    out, applied = degrade(thick, 1, cfg, ops=["dilate"])
    assert out.size == thick.size and np.asarray(out).mean() > np.asarray(thick).mean()  # strokes thin (faded print)
    out, applied = degrade(page, 1, cfg, ops=["dilate"])
    assert applied == [] and np.array_equal(np.asarray(out), base)  # 1 px strokes would vanish: skipped

    out, applied = degrade(page, 1, AugmentConfig(skew_degrees=3.0), ops=["skew"])
    assert out.size == page.size and abs(applied[0]["degrees"]) <= 3.0
    arr = np.asarray(out)
    assert arr[0, 0] == 255 and not np.array_equal(arr, base)  # white fill in the corners

    out, applied = degrade(page, 1, AugmentConfig(salt_pepper_amount=(0.05, 0.05)), ops=["salt_pepper"])
    changed = np.asarray(out) != np.asarray(page)
    assert 0.005 < changed.mean() < 0.06 and applied[0]["amount"] == 0.05

    out, applied = degrade(page, 1, AugmentConfig(jpeg_quality=(20, 20)), ops=["jpeg"])
    assert applied == [{"op": "jpeg", "quality": 20}] and not np.array_equal(np.asarray(out), base)


def test_degrade_is_deterministic_and_draws_bounded_ops() -> None:
    page = text_page().resize((320, 400), Image.Resampling.NEAREST)  # 2 px strokes: dilate applies too
    cfg = AugmentConfig(max_ops=3)
    seen: set[str] = set()
    for seed in range(40):
        a, applied_a = degrade(page, seed, cfg)
        b, applied_b = degrade(page, np.random.default_rng(seed), cfg)
        assert applied_a == applied_b and png(a) == png(b)
        names = [op["op"] for op in applied_a]
        assert 1 <= len(names) <= 3 and not {"erode", "dilate"} <= set(names)
        assert names == [op for op in OPS if op in names]  # canonical order
        seen.update(names)
    assert seen == set(OPS)


def test_grey_in_grey_out_and_colour_stays_colour() -> None:
    grey, _ = degrade(text_page(mode="L"), 3, AugmentConfig(), ops=list(OPS[:3]) + ["salt_pepper", "jpeg"])
    assert grey.mode == "L"
    achromatic_rgb, _ = degrade(text_page(mode="RGB"), 3, AugmentConfig(), ops=["skew", "salt_pepper"])
    assert achromatic_rgb.mode == "L"
    colour = text_page(mode="RGB")
    ImageDraw.Draw(colour).rectangle((0, 0, 30, 30), fill=(200, 30, 30))
    out, _ = degrade(colour, 3, AugmentConfig(), ops=["skew", "erode"])
    assert out.mode == "RGB"


def test_stage_probability_determinism_and_provenance() -> None:
    stage = AugmentStage(AugmentConfig())
    page = text_page()
    records = [record(i, page) for i in range(400)]
    outputs = [stage(r)[0] for r in records]
    degraded = [r for r in outputs if any(p.stage == STAGE for p in r.provenance)]
    assert 0.18 <= len(degraded) / len(records) <= 0.32
    for r in outputs:
        assert validate(r) == []
        if r in degraded:
            assert r.quality["augment"]["applied"]
            assert Image.open(io.BytesIO(r.image)).mode == "L"  # grey in, grey PNG out
            assert r.image.startswith(b"\x89PNG") and (r.width, r.height) == Image.open(io.BytesIO(r.image)).size
            assert r.image_sha256 == hashlib.sha256(r.image).hexdigest()
        else:
            assert "augment" not in r.quality and r.image == png(page) and len(r.provenance) == 1
    # same ids, reverse order, fresh stage: identical bytes and provenance
    again = [AugmentStage(AugmentConfig())(record(i, page))[0] for i in reversed(range(400))][::-1]
    assert [r.image for r in again] == [r.image for r in outputs]
    assert [r.provenance for r in again] == [r.provenance for r in outputs]
    # a different seed picks a different set
    other = AugmentStage(AugmentConfig(seed=1))
    assert [other.selected(r.id) for r in records] != [stage.selected(r.id) for r in records]


BLOCKS = [(20, 30, 140, 44), (30, 90, 90, 150), (100, 160, 150, 190)]  # x0, y0, x1, y1 of solid ink


def _ink_box(image: Image.Image, near: tuple[float, float, float, float], pad: int = 4) -> tuple[int, ...]:
    """The bounding box of the dark pixels within ``near`` (grown by ``pad``)."""
    ink = np.asarray(image.convert("L")) < 128
    x0, y0 = max(0, int(near[0]) - pad), max(0, int(near[1]) - pad)
    ys, xs = np.nonzero(ink[y0:int(near[3]) + pad, x0:int(near[2]) + pad])
    return (xs.min() + x0, ys.min() + y0, xs.max() + 1 + x0, ys.max() + 1 + y0)


@pytest.mark.parametrize("op, extra", [("skew", {"skew_degrees": 8.0}), ("rotate90", {"rotations": (90,)}),
                                       ("rotate90", {"rotations": (180,)}), ("rotate90", {"rotations": (270,)}),
                                       ("downscale", {}), ("jpeg", {})])
def test_the_stage_moves_the_elements_with_the_pixels(op: str, extra: dict) -> None:
    from schemas.layout import element

    image = Image.new("L", (160, 200), "white")
    for box in BLOCKS:
        ImageDraw.Draw(image).rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill="black")
    page = record(0, image)
    page.elements = [element("text", box, i, f"block {i}") for i, box in enumerate(BLOCKS)]
    cfg = AugmentConfig(probability=1.0, weights={op: 1.0}, max_ops=1, **extra)
    (out,) = AugmentStage(cfg)(page)
    assert [a["op"] for a in out.quality["augment"]["applied"]] == [op]
    assert validate(out) == [] and [e.text for e in out.elements] == ["block 0", "block 1", "block 2"]
    degraded = Image.open(io.BytesIO(out.image))
    for e in out.elements:  # each box is where its block's ink now is (anti-aliased edges: 2 px)
        assert np.allclose(e.box, _ink_box(degraded, e.box), atol=2.0), (e.text, e.box)


def test_stage_params_hash_tracks_applied_ops() -> None:
    stage = AugmentStage(AugmentConfig(probability=1.0, max_ops=3))
    out = [stage(record(i))[0] for i in range(12)]
    hashes = {r.provenance[-1].params_hash for r in out}
    assert all(r.provenance[-1] == ProvenanceStep(STAGE, VERSION, r.provenance[-1].params_hash) for r in out)
    assert len(hashes) > 1  # different draws, different params hashes


def test_probability_zero_passes_everything_and_corrupt_image_dead_letters() -> None:
    r = record(0)
    before = r.image
    assert AugmentStage(AugmentConfig(probability=0.0))(r)[0].image == before
    bad = record(1)
    bad.image = b"\x89PNG\r\n\x1a\n garbage"
    with pytest.raises(RecordError) as err:
        AugmentStage(AugmentConfig(probability=1.0))(bad)
    assert err.value.reason == "corrupt_image"


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError):
        AugmentConfig(probability=1.5)
    with pytest.raises(ValueError):
        AugmentConfig(weights={"blur": 1.0})
    with pytest.raises(ValueError):
        AugmentConfig(downscale_mode="half")
    assert AugmentConfig(jpeg_quality=[40, 60]).jpeg_quality == (40, 60)  # YAML lists accepted


def test_dilate_thins_strokes_but_keeps_them() -> None:
    """A max filter wider than a stroke erases it: after a shrink (1-2 px strokes) a 3 px kernel left
    pages with almost no ink. The kernel is capped by the stroke width, or the op skipped."""
    page = Image.new("L", (320, 400), "white")
    draw = ImageDraw.Draw(page)
    for y in range(12, 380, 24):
        for x in range(12, 300, 10):
            draw.rectangle((x, y, x + 1, y + 14), fill="black")  # 2 px stems, as in small text
    ink = (np.asarray(page) < 128).sum()
    out, applied = degrade(page, 1, AugmentConfig(morph_kernel=(3,)), ops=["dilate"])
    assert applied == [{"op": "dilate", "kernel": 2}]
    assert 0.2 * ink < (np.asarray(out) < 128).sum() < ink
    out, applied = degrade(page, 1, AugmentConfig(morph_kernel=(3,)), ops=["downscale", "dilate"])
    kept = (np.asarray(out) < 128).sum() / (ink / 4)
    assert [a["op"] for a in applied] == ["downscale"] and kept > 0.5  # 1 px strokes: nothing to take off
