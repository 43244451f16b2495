"""Exact and near duplicates: keys, grouping, components and the keep rule."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import random
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from pipelines.clean.dedup import (
    Member,
    connected_components,
    dedup_keys,
    extract_keys,
    find_duplicates,
    group_edges,
    keeper,
    resolve,
)
from pipelines.clean.dedup_config import DedupConfig, MinHashConfig
from pipelines.clean.image_hash import hamming, perceptual_hash, phash_band_keys, phash_sample_keys, pixel_hash
from pipelines.clean.minhash import band_keys, estimated_jaccard, minhash_signature, normalize_words, sketch
from schemas.deadletter import RecordError
from schemas.page import PageRecord, ProvenanceStep, page_id

REPO = Path(__file__).resolve().parents[3]
VOCAB = [
    "".join(random.Random(i).choice("abcdefghijklmnopqrstuvwxyz") for _ in range(2 + i % 8))
    for i in range(3000)
]


def text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n_words))


def edit_words(rng: random.Random, value: str, n: int) -> str:
    words = value.split()
    for i in rng.sample(range(len(words)), n):
        words[i] = rng.choice(VOCAB)
    return " ".join(words)


def page_image(seed: int, size: tuple[int, int] = (640, 820)) -> Image.Image:
    """A grey text page: same template (margins, font, line pitch), text from ``seed``."""
    rng = random.Random(seed)
    image = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=14)
    y = 50
    while y < size[1] - 60:
        if rng.random() < 0.15:  # paragraph break
            y += 18
            continue
        line = text(rng, rng.randint(6, 11))
        draw.text((48, y), line, fill=(20, 20, 20), font=font)
        y += 18
    return image


def encode(image: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kw)
    return buf.getvalue()


def record(rid: str, image: bytes, response: str, source: str = "s") -> PageRecord:
    return PageRecord(
        id=page_id(source, rid, 1), source=source, source_id=rid, page_number=1, domain="d",
        language="en", license="cc0", image=image, image_sha256=hashlib.sha256(image).hexdigest(),
        width=1, height=1, task="parse_page", instruction="Convert.", response=response,
        provenance=[ProvenanceStep("t", "1", "x")],
    )


@pytest.fixture(scope="module")
def page() -> Image.Image:
    return page_image(1)


# --------------------------------------------------------------------------- exact image


def test_reencodes_collapse_and_one_pixel_does_not(page):
    grey = page.convert("L")
    hashes = {
        "pil": pixel_hash(page),
        "png_rgb": pixel_hash(encode(page, "PNG")),
        "png_grey": pixel_hash(encode(grey, "PNG")),
        "webp_lossless": pixel_hash(encode(page, "WEBP", lossless=True)),
        "palette": pixel_hash(encode(grey.convert("P"), "PNG")),
    }
    assert len(set(hashes.values())) == 1, hashes
    assert hashes["pil"] == hashlib.sha256(b"%dx%d\x00" % page.size + page.tobytes()).hexdigest()
    for size in (8, 16):
        assert perceptual_hash(encode(grey, "PNG"), size) == perceptual_hash(grey.convert("RGB"), size)
    assert pixel_hash(grey.convert("1")) == pixel_hash(grey.convert("1").convert("RGB"))
    changed = page.copy()
    changed.putpixel((300, 400), (0, 0, 0) if page.getpixel((300, 400)) != (0, 0, 0) else (255, 255, 255))
    assert pixel_hash(encode(changed, "PNG")) != hashes["pil"]
    # same bytes, other shape: the size is part of the hash
    assert pixel_hash(Image.new("RGB", (2, 3))) != pixel_hash(Image.new("RGB", (3, 2)))


def test_exif_orientation_is_applied(page):
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated: display rotates 90 degrees clockwise
    stored = page.rotate(90, expand=True)
    data = encode(stored, "PNG", exif=exif.tobytes())
    assert pixel_hash(data) == pixel_hash(page)


@pytest.mark.parametrize("data", [b"", b"not an image", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40])
def test_undecodable_image_is_a_record_error(data):
    with pytest.raises(RecordError) as info:
        pixel_hash(data)
    assert info.value.reason == "corrupt_image"


def test_truncated_and_oversized_images(page):
    data = encode(page, "PNG")
    with pytest.raises(RecordError) as info:
        pixel_hash(data[: len(data) // 2])
    assert info.value.reason == "corrupt_image"
    with pytest.raises(RecordError) as info:
        pixel_hash(data, max_pixels=1000)
    assert info.value.reason == "image_too_large"
    with pytest.raises(RecordError):
        extract_keys(record("bad", b"garbage", "x"))


# --------------------------------------------------------------------------- near image


def test_phash_close_for_resized_jpeg_and_far_for_other_pages(page):
    small = page.resize((page.width * 2 // 3, page.height * 2 // 3), Image.Resampling.BILINEAR)
    jpeg = encode(small, "JPEG", quality=60)
    assert hamming(perceptual_hash(page), perceptual_hash(jpeg)) <= 3
    fine = perceptual_hash(page, hash_size=16)
    assert fine.bit_length() <= 256
    assert hamming(fine, perceptual_hash(jpeg, hash_size=16)) <= 20
    # other pages of the same template: the 256-bit hash tells them apart
    for seed in (2, 3, 4):
        assert hamming(fine, perceptual_hash(page_image(seed), hash_size=16)) > 20
    # a visually different page is far even in 64 bits
    blocky = Image.new("RGB", page.size, (255, 255, 255))
    ImageDraw.Draw(blocky).rectangle((40, 40, 600, 400), fill=(0, 0, 0))
    assert hamming(perceptual_hash(page), perceptual_hash(blocky)) > 10


def test_phash_sample_keys_catch_close_hashes_and_rarely_far_ones():
    rng = random.Random(1)
    near = far = 0
    for _ in range(200):
        h = rng.getrandbits(256)
        close = h
        for bit in rng.sample(range(256), 10):
            close ^= 1 << bit
        keys = phash_sample_keys(h)
        assert len(keys) == 16
        assert all(k.startswith(f"ph:{i}:") and len(k.split(":")[2]) == 8 for i, k in enumerate(keys))
        near += bool(set(keys) & set(phash_sample_keys(close)))
        far += bool(set(keys) & set(phash_sample_keys(rng.getrandbits(256))))
    assert near >= 190 and far == 0  # theory: 0.995 at distance 10
    assert phash_sample_keys(5) == phash_sample_keys(5) != phash_sample_keys(5, seed=2)


def test_phash_bands_pigeonhole():
    rng = random.Random(0)
    for _ in range(300):
        h = rng.getrandbits(64)
        other = h
        for bit in rng.sample(range(64), rng.randint(0, 3)):
            other ^= 1 << bit
        assert set(phash_band_keys(h)) & set(phash_band_keys(other))
    keys = phash_band_keys(0x0123456789ABCDEF)
    assert keys == ["ph:0:0123", "ph:1:4567", "ph:2:89ab", "ph:3:cdef"]
    assert len(phash_band_keys(1 << 255, bands=8, bits=256)) == 8


# --------------------------------------------------------------------------- MinHash


def test_near_duplicate_texts_share_a_band_and_unrelated_do_not():
    rng = random.Random(3)
    cfg = MinHashConfig()
    shared = 0
    for _ in range(20):
        original = text(rng, 330)  # ~2 KB
        copy = edit_words(rng, original, 3)
        shared += bool(set(band_keys(minhash_signature(original, cfg), cfg))
                       & set(band_keys(minhash_signature(copy, cfg), cfg)))
    assert shared >= 19
    keys = [set(band_keys(minhash_signature(text(rng, 330), cfg), cfg)) for _ in range(40)]
    assert all(not (keys[i] & keys[j]) for i in range(len(keys)) for j in range(i))


def test_signature_shape_normalisation_and_sketch_estimate():
    cfg = MinHashConfig()
    a = "The <b>Quick</b> brown fox, jumps over the lazy dog!  Again."
    b = "the quick brown fox jumps over the lazy dog again"
    assert normalize_words(a) == b.split()
    assert normalize_words("表格 abc_def x1") == ["表", "格", "abc", "def", "x1"]
    sig = minhash_signature(a, cfg)
    assert sig.dtype == np.uint64 and sig.shape == (112,)
    assert np.array_equal(sig, minhash_signature(b, cfg))
    assert band_keys(minhash_signature("", cfg), cfg) == []
    assert all(k.startswith(f"mh:{i}:") and len(k.split(":")[2]) == 16 for i, k in enumerate(band_keys(sig, cfg)))
    rng = random.Random(5)
    base = text(rng, 2000)
    copy = edit_words(rng, base, 100)
    wa, wb = base.split(), copy.split()
    sa = {tuple(wa[i:i + 5]) for i in range(len(wa) - 4)}
    sb = {tuple(wb[i:i + 5]) for i in range(len(wb) - 4)}
    jaccard = len(sa & sb) / len(sa | sb)
    estimate = estimated_jaccard(sketch(minhash_signature(base, cfg)), sketch(minhash_signature(copy, cfg)))
    assert abs(estimate - jaccard) < 0.15, (estimate, jaccard)
    assert MinHashConfig(seed=2) != cfg
    assert not np.array_equal(minhash_signature(a, MinHashConfig(seed=2)), sig)


FRENCH = ("L'été dernier, le café près de l'église était fermé à cause des rénovations. Les habitués se sont "
          "réunis à la brasserie voisine où le propriétaire, un ancien élève du lycée, leur a offert un déjeuner. ")
KOREAN = ("이 연구는 지역 수자원에 대한 기후 변화의 영향을 분석하고 "
          "삼십 년간의 기상 자료를 바탕으로 정책 제언을 제시한다. ")
ARABIC = ("تهدف هذه الدراسة إلى تحليل أثر التغير المناخي على الموارد المائية في المنطقة، "
          "وقد اعتمدنا على بيانات الأرصاد. ")
ENGLISH = ("The committee met on Tuesday to review the annual budget and discussed several proposals for improving "
           "the library's digital archive, its preservation formats and the accessibility of scanned manuscripts. ")


@pytest.mark.parametrize("original, variant", [
    (FRENCH, unicodedata.normalize("NFD", FRENCH)),                       # decomposed accents
    ("Việt Nam, Hà Nội", unicodedata.normalize("NFD", "Việt Nam, Hà Nội")),  # stacked marks
    (KOREAN, unicodedata.normalize("NFD", KOREAN)),                       # conjoining jamo
    (ENGLISH, ENGLISH.replace("committee", "com\u00admit\u00adtee").replace("manuscripts", "manu\u00adscripts")),
    (ENGLISH, ENGLISH.replace("budget", "bud\u200bget").replace("archive", "ar\u200c\u200dchive")
     .replace("library", "\ufefflibrary\u2060")),
    (ARABIC, ARABIC.replace("ل", "لـ")),                                   # tatweel (kashida) justification
    ("The office staff find it efficient. ", "The o\ufb03ce sta\ufb00 \ufb01nd it e\ufb03cient. "),  # ligatures
    ("２０２３年ＧＤＰ增长５．２％ ｺﾝﾋﾟｭｰﾀ", "2023年GDP增长5.2% コンピュータ"),          # full- and half-width forms
], ids=["nfd-french", "nfd-vietnamese", "nfd-hangul-jamo", "soft-hyphens", "zero-width", "tatweel", "ligatures",
        "width-forms"])
def test_normalisation_ignores_unicode_form_and_invisible_characters(original, variant):
    assert original != variant
    assert normalize_words(variant) == normalize_words(original)
    cfg = DedupConfig(exact_image=False, near_image=False)
    if len(normalize_words(original)) >= cfg.minhash.min_words:
        records = [record("a", b"", original * 2), record("b", b"", variant * 2)]
        assert len(find_duplicates([p for r in records for p in extract_keys(r, cfg).pairs()], cfg)) == 1


def test_combining_marks_stay_in_their_word_and_cjk_is_split_per_character():
    assert normalize_words("हिन्दी भाषा का इतिहास") == ["हिन्दी", "भाषा", "का", "इतिहास"]  # vowel signs, virama
    assert normalize_words("وَقَدْ أَظْهَرَتِ النَّتَائِجُ") == ["وَقَدْ", "أَظْهَرَتِ", "النَّتَائِجُ"]  # harakat
    assert normalize_words("שָׁלוֹם") == ["שָׁלוֹם"]  # Hebrew points
    assert normalize_words("q\u0303 x\u20dd") == ["q\u0303", "x\u20dd"]  # marks without a precomposed form
    # scripts without spaces: one character (with its marks) a word, like CJK; a run stops at CJK
    assert normalize_words("ภาษาไทย") == ["ภ", "า", "ษ", "า", "ไ", "ท", "ย"]
    assert normalize_words("น้ำ") == ["น้ํ", "า"]  # NFKC splits SARA AM
    assert normalize_words("2023年GDP增长 ㅋㅋ") == ["2023", "年", "gdp", "增", "长", "ᄏ", "ᄏ"]
    assert normalize_words("😂 👨\u200d👩\u200d👧 ★ and") == ["and"]  # symbols are not words


def test_signature_is_deterministic_across_processes():
    value = "Deterministic across processes: word five grams of this label, hashed without salt. " * 5
    here = minhash_signature(value, MinHashConfig()).tolist()
    code = ("import json,sys; from pipelines.clean.minhash import minhash_signature, MinHashConfig; "
            "print(json.dumps(minhash_signature(sys.argv[1], MinHashConfig()).tolist()))")
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code, value], cwd=REPO, capture_output=True, text=True,
                             check=True, env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"})
        assert json.loads(out.stdout) == here


# --------------------------------------------------------------------------- grouping and keep rule


def members(n: int, rng: random.Random) -> list[Member]:
    return [Member(f"id{i:03d}", "s", float(rng.choice((0, 0, 1))), rng.getrandbits(64)) for i in range(n)]


def test_components_and_keep_rule_ignore_order():
    rng = random.Random(11)
    nodes = members(60, rng)
    edges = [(rng.choice(nodes), rng.choice(nodes)) for _ in range(45)]
    components = connected_components(edges)
    losers = resolve(components, "px")
    for _ in range(5):
        shuffled = [(b, a) if rng.random() < 0.5 else (a, b) for a, b in edges]
        rng.shuffle(shuffled)
        again = connected_components(shuffled)
        assert again == components
        reordered = [set(rng.sample(sorted(c, key=lambda m: m.id), len(c))) for c in reversed(again)]
        assert resolve(reordered, "px") == losers
    for component in components:
        kept = [m for m in component if m not in {x for x, _ in losers}]
        assert len(kept) == 1 and kept[0] == keeper(component)
        assert kept[0].rank == max(m.rank for m in component)
    assert all(reason == "duplicate_image" for _, reason in losers)


def test_group_edges_are_order_independent_and_linear():
    rng = random.Random(2)
    group = members(30, rng)
    edges = group_edges("px:abc", group, DedupConfig())
    assert len(edges) == 29
    best = keeper(group)
    assert all(a == best for a, _ in edges)
    shuffled = group[:]
    rng.shuffle(shuffled)
    assert group_edges("px:abc", shuffled + shuffled[:5], DedupConfig()) == edges
    assert group_edges("px:abc", group[:1], DedupConfig()) == []


def test_near_groups_verify_the_real_distance():
    cfg = DedupConfig()
    far = Member("b", "s", phash=(1 << 256) - 1)
    near = Member("c", "s", phash=(1 << 20) - 1)
    base = Member("a", "s", phash=0)
    assert group_edges("ph:0:0000", [far, near, base], cfg) == [(base, near)]
    assert group_edges("ph:0:0000", [Member("x", "s", phash=0), Member("y", "s", phash=(1 << 21) - 1)], cfg) == []
    assert group_edges("ph:0:0000", [Member("x", "s", phash=0), Member("y", "s")], cfg) == []
    # a band collision between dissimilar texts is rejected by the sketches
    s1 = bytes(range(112))
    s2 = bytes(255 - i for i in range(112))
    assert group_edges("mh:0:00", [Member("a", "s", sketch=s1), Member("b", "s", sketch=s2)], cfg) == []
    assert len(group_edges("mh:0:00", [Member("a", "s", sketch=s1), Member("b", "s", sketch=s1)], cfg)) == 1
    trusting = DedupConfig(minhash={"verify_jaccard": None})
    assert len(group_edges("mh:0:00", [Member("a", "s", sketch=s1), Member("b", "s", sketch=s2)], trusting)) == 1


def test_hot_near_group_is_bounded_by_centres(monkeypatch):
    from pipelines.clean import dedup

    rng = random.Random(4)
    calls = []
    monkeypatch.setattr(dedup, "hamming", lambda a, b: calls.append(1) or (a ^ b).bit_count())
    # 200 distinct pages sharing a band: random 256-bit hashes are ~128 bits apart
    group = [Member(f"m{i:03d}", "s", phash=rng.getrandbits(256)) for i in range(200)]
    assert group_edges("ph:1:0000", group, DedupConfig(max_centres=4)) == []
    assert len(calls) <= 200 * 4
    twin = Member("a-twin", "s", phash=group[0].phash ^ 0b101)
    assert group_edges("ph:1:0000", group + [twin], DedupConfig(max_centres=4)) == [(twin, group[0])]


def test_member_and_config_validation():
    with pytest.raises(ValueError):
        Member("a", "s", rank=float("nan"))
    assert Member("a", "s", rank=1.0) == Member("a", "t", rank=1.0, phash=5)
    with pytest.raises(ValueError):
        DedupConfig(phash_max_distance=300)
    with pytest.raises(ValueError):
        DedupConfig(phash_band_bits=0)
    with pytest.raises(TypeError):
        DedupConfig(minhash={"bogus": 1})
    cfg = DedupConfig(source_priority={"b": 2, "a": 1})
    assert cfg.source_priority == (("a", 1.0), ("b", 2.0)) and cfg.rank("b") == 2.0 and cfg.rank("z") == 0.0


# --------------------------------------------------------------------------- records end to end


def test_records_end_to_end(page):
    rng = random.Random(9)
    label = text(rng, 330)
    other_page = page_image(2)
    records = [
        record("png", encode(page.convert("L"), "PNG"), text(rng, 200), source="low"),
        record("webp", encode(page, "WEBP", lossless=True), text(rng, 200), source="high"),
        record("jpeg", encode(page.resize((500, 640)), "JPEG", quality=70), text(rng, 200)),
        record("t1", encode(other_page, "PNG"), label),
        record("t2", encode(page_image(3), "PNG"), edit_words(rng, label, 4)),
        record("short", encode(page_image(4), "PNG"), "Page 3"),
        record("short2", encode(page_image(5), "PNG"), "Page 3"),
        record("other", encode(page_image(6), "PNG"), text(rng, 300)),
    ]
    cfg = DedupConfig(source_priority={"high": 1.0})
    extracted = [extract_keys(r, cfg) for r in records]
    assert records[0].quality["dedup"]["pixel_sha256"] == records[1].quality["dedup"]["pixel_sha256"]
    assert records[5].quality["dedup"]["text_keys"] == 0
    assert len(records[3].quality["dedup"]["phash"]) == 16
    assert len(records[3].quality["dedup"]["phash256"]) == 64
    assert json.dumps(records[0].quality)  # small and serialisable
    assert dedup_keys(records[3], cfg) == extracted[3].keys
    assert [k.split(":")[0] for k in extracted[3].keys] == ["px"] + ["ph"] * 16 + ["mh"] * 14
    pairs = [p for e in extracted for p in e.pairs()]
    slim = {key.split(":")[0]: m for key, m in extracted[3].pairs()}
    assert slim["px"].phash is None and slim["px"].sketch is None
    assert slim["ph"].phash == extracted[3].member.phash and slim["ph"].sketch is None
    assert slim["mh"].sketch == extracted[3].member.sketch and slim["mh"].phash is None
    restored = pickle.loads(pickle.dumps(extracted[3].member))
    assert (restored.id, restored.rank, restored.phash, restored.sketch) == (
        extracted[3].member.id, extracted[3].member.rank, extracted[3].member.phash, extracted[3].member.sketch)
    drops = find_duplicates(pairs, cfg)
    ids = {r.source_id: r.id for r in records}
    best_t = min(ids["t1"], ids["t2"])
    worst_t = max(ids["t1"], ids["t2"])
    assert drops == dict(sorted({
        ids["png"]: "duplicate_image",        # same pixels as webp, whose source ranks higher
        ids["jpeg"]: "near_duplicate_image",  # resized JPEG of the same page
        worst_t: "near_duplicate_text",       # equal ranks: the smaller id stays
    }.items()))
    assert best_t not in drops
    rng.shuffle(pairs)
    assert find_duplicates(pairs, cfg) == drops
    only_exact = DedupConfig(near_image=False, near_text=False)
    assert extract_keys(records[3], only_exact).keys[0].startswith("px:")
    assert find_duplicates([p for r in records for p in extract_keys(r, only_exact).pairs()], only_exact) == {
        max(ids["png"], ids["webp"]): "duplicate_image"}


def test_the_dags_steps_give_one_loser_per_record_whatever_the_order(page):
    """What the corpus DAG runs, step by step in plain Python: keys per record (carrying the split and
    bytes the record was written with), edges per key group, losers per kind, then one loser per
    record id from a combine, which must not depend on the order the kinds' losers arrive in."""
    from collections import defaultdict

    from pipelines.clean.dedup_stage import (
        Loser,
        dedup_edges,
        dedup_key_members,
        dedup_losers,
        excluded_stat,
        merge_losers,
        strongest_loser,
    )
    from pipelines.write import bucket_of, record_bytes

    rng = random.Random(10)
    label = text(rng, 200)
    records = [record(f"copy{i}", encode(page, "PNG"), label) for i in range(4)]  # px, ph and mh all agree
    records.append(record("near", encode(page.resize((500, 640)), "JPEG", quality=70), text(rng, 200)))
    records[1].split = "eval"
    cfg = DedupConfig()
    groups = defaultdict(list)
    for r in records:
        pairs = dedup_key_members(cfg, r)
        assert {(m.split, m.size) for _, m in pairs} == {(r.split, record_bytes(r))}
        for key, member in pairs:
            groups[key].append(member)
    edges = defaultdict(list)
    for key, members in groups.items():
        for kind, edge in dedup_edges(cfg, key, members):
            edges[kind].append(edge)
    losers = [loser for kind, kind_edges in edges.items() for loser in dedup_losers(cfg, kind, kind_edges)]
    assert len(losers) > len({x.id for x in losers})  # several kinds drop the same records
    by_id = defaultdict(list)
    for loser in losers:
        by_id[loser.id].append(loser)
    merged = {i: strongest_loser(group) for i, group in by_id.items()}
    for group in by_id.values():
        for _ in range(5):
            rng.shuffle(group)
            assert strongest_loser(group) == merged[group[0].id]
    assert merge_losers(losers) == merged
    expected = find_duplicates([p for r in records for p in dedup_key_members(cfg, r)], cfg)
    assert {i: x.reason for i, x in merged.items()} == expected
    by_record = {r.id: r for r in records}
    keeper = min(r.id for r in records[:4])
    for loser in merged.values():
        assert (loser.split, loser.size) == (by_record[loser.id].split, record_bytes(by_record[loser.id]))
        key, stat = excluded_stat(loser, 256)
        assert key == (loser.split, bucket_of(loser.id, 256)) and (stat.rows, stat.bytes) == (1, loser.size)
        if loser.reason == "duplicate_image":
            assert loser.kept == keeper
    # a tie on the reason goes to the smaller kept id, not to the first to arrive
    a, b = Loser("x", "s", "near_duplicate_text", "k2"), Loser("x", "s", "near_duplicate_text", "k1")
    assert strongest_loser([a, b]) == strongest_loser([b, a]) == b
    assert strongest_loser([a, Loser("x", "s", "duplicate_image", "k9")]).reason == "duplicate_image"


def test_empty_and_huge_labels(page):
    data = encode(page_image(7, (200, 260)), "PNG")
    empty = extract_keys(record("empty", data, ""))
    assert [k[:2] for k in empty.keys] == ["px"] + ["ph"] * 16 and empty.member.sketch is None
    rng = random.Random(8)
    huge = text(rng, 350_000)  # ~2 MB
    keys = extract_keys(record("huge", data, huge)).keys
    assert len([k for k in keys if k.startswith("mh:")]) == 14
