import hashlib
import io
import json
import pickle
import random
import re
import unicodedata
from pathlib import Path

import pytest
from PIL import Image

from pipelines.clean.decontam import (
    DecontamConfig,
    DecontamIndex,
    DecontamStage,
    scan_folder,
)
from pipelines.render import RenderConfig, render_page
from pipelines.sources.base import SourcePage
from samples.make.pdfs import paragraphs, text_pdf
from schemas.deadletter import Dropped, RecordError
from schemas.page import PageRecord, ProvenanceStep, page_id

RNG = random.Random(11)
BENCH_PAGES = [paragraphs(RNG, 4), paragraphs(RNG, 4)]  # the benchmark PDF's two pages
OTHER_PAGE = paragraphs(RNG, 4)  # an unrelated corpus page


def words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


@pytest.fixture(scope="module")
def bench_pdf() -> bytes:
    return text_pdf(BENCH_PAGES)


@pytest.fixture(scope="module")
def bench(tmp_path_factory, bench_pdf) -> Path:
    """olmOCR-Bench layout: bench_data/<set>.jsonl + bench_data/pdfs/<set>/<name>.pdf."""
    root = tmp_path_factory.mktemp("bench")
    pdfs = root / "bench_data" / "pdfs" / "docs"
    pdfs.mkdir(parents=True)
    (pdfs / "doc.pdf").write_bytes(bench_pdf)
    tests = [
        {"pdf": "docs/doc.pdf", "page": 1, "id": "t1", "type": "present", "text": words(BENCH_PAGES[0][0], 20)},
        {"pdf": "docs/doc.pdf", "page": 1, "id": "t2", "type": "order",
         "before": words(BENCH_PAGES[0][1], 16), "after": words(BENCH_PAGES[0][2], 16)},
        {"pdf": "docs/doc.pdf", "page": 1, "id": "t3", "type": "math", "math": "x^2"},  # too short for 13-grams
        {"pdf": "docs/doc.pdf", "page": 2, "id": "t4", "type": "present", "text": words(BENCH_PAGES[1][0], 30)},
    ]
    (root / "bench_data" / "docs.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tests))
    return root


@pytest.fixture(scope="module")
def stage(bench) -> DecontamStage:
    return DecontamStage(DecontamConfig(folder=str(bench)))


def corpus_record(image: bytes, response: str, source_id: str = "doc") -> PageRecord:
    return PageRecord(
        id=page_id("corpus", source_id, 1), source="corpus", source_id=source_id, page_number=1, domain="d",
        language="en", license="cc0", image=image, image_sha256=hashlib.sha256(image).hexdigest(), width=1,
        height=1, task="parse_page", instruction="Convert.", response=response,
        provenance=[ProvenanceStep("read:corpus", "1", "x")],
    )


def rendered(pdf: bytes, index: int = 0) -> PageRecord:
    """A corpus page made by the corpus's own render stage (grey PNG at 1288 px)."""
    page = SourcePage(source="corpus", source_id="doc", page_number=index + 1, payload_kind="pdf", payload=pdf,
                      response="\n\n".join(OTHER_PAGE), domain="d", language="en", license="cc0",
                      instruction="Convert.", pdf_page_index=index)
    return render_page(page, RenderConfig())


@pytest.fixture(scope="module")
def unrelated_image() -> bytes:
    return rendered(text_pdf([OTHER_PAGE])).image


def drop_reason(stage: DecontamStage, record: PageRecord) -> str:
    with pytest.raises(Dropped) as info:
        stage(record)
    return info.value.reason


def test_index_of_an_olmocr_bench_folder(bench):
    items = scan_folder(bench)
    assert [(i.name, i.kind, i.page) for i in items] == [("docs/doc.pdf#page=1", "pdf", 1),
                                                         ("docs/doc.pdf#page=2", "pdf", 2)]
    assert len(items[0].texts) == 4  # text, before, after, math
    index = DecontamIndex.from_folder(bench)
    assert len(index) == 2 and len(index.exact) == 2 and index.phashes.shape == (2, 4)
    # 20 words: 8 13-grams; 16 words twice: 4 + 4; "x^2" none
    assert index.item_grams.tolist() == [16, 18]


def test_page_rendered_from_the_benchmark_pdf_is_contaminated_image(stage, bench_pdf):
    record = rendered(bench_pdf, index=1)
    assert drop_reason(stage, record) == "contaminated_image"
    found = record.quality["decontam"]
    assert found["match"] == {"kind": "image", "item": "docs/doc.pdf#page=2"}
    assert found["nearest_phash"] == {"item": "docs/doc.pdf#page=2", "distance": 0}


def test_resized_jpeg_of_a_benchmark_page_is_contaminated_phash(stage, bench_pdf):
    image = Image.open(io.BytesIO(rendered(bench_pdf).image)).convert("RGB")
    small = image.resize((image.width * 9 // 10, image.height * 9 // 10), Image.Resampling.BILINEAR)
    buf = io.BytesIO()
    small.save(buf, format="JPEG", quality=75)
    record = corpus_record(buf.getvalue(), "\n\n".join(OTHER_PAGE))
    assert drop_reason(stage, record) == "contaminated_phash"
    match = record.quality["decontam"]["match"]
    assert match["kind"] == "phash" and match["item"] == "docs/doc.pdf#page=1" and match["distance"] <= 20


def test_full_transcription_of_a_benchmark_page_is_contaminated_text(stage, unrelated_image):
    # the page's text holds every benchmark snippet: most of the item's 13-grams, few of the record's
    record = corpus_record(unrelated_image, "\n\n".join(BENCH_PAGES[0]))
    assert drop_reason(stage, record) == "contaminated_text"
    match = record.quality["decontam"]["match"]
    assert (match["kind"], match["item"], match["matched"], match["bench_overlap"]) == (
        "text", "docs/doc.pdf#page=1", 16, 1.0)
    assert match["record_overlap"] < 0.5


def test_transcription_with_soft_hyphens_and_zero_width_spaces_is_contaminated_text(stage, unrelated_image):
    # PDF text layers carry soft hyphens (U+00AD) and zero-width spaces inside words: they must not
    # split the words the 13-grams are made of
    page = "\n\n".join(BENCH_PAGES[0])
    hidden = re.sub(r"\b(\w{3})(\w{3,})", "\\1\u00ad\\2", page)
    hidden = re.sub(r"\b(\w)(\w{4,})", "\\1\u200b\\2", hidden)
    assert hidden.count("\u00ad") > 20 and hidden.count("\u200b") > 20
    record = corpus_record(unrelated_image, hidden)
    assert drop_reason(stage, record) == "contaminated_text"
    match = record.quality["decontam"]["match"]
    assert (match["item"], match["matched"], match["bench_overlap"]) == ("docs/doc.pdf#page=1", 16, 1.0)


def test_index_text_in_another_unicode_form_matches(tmp_path):
    page = ("Le comité a examiné le budget annuel et a discuté de plusieurs propositions visant à améliorer "
            "l'archive numérique de la bibliothèque. Les membres ont exprimé des inquiétudes quant aux coûts "
            "de stockage, aux formats de préservation à long terme et à l'accessibilité des manuscrits.")
    (tmp_path / "item.md").write_text(page, encoding="utf-8")  # benchmark text, NFC
    index = DecontamIndex.from_folder(tmp_path)
    found = {form: index.text_matches(unicodedata.normalize(form, page)) for form in ("NFC", "NFD")}
    assert [(m.item, m.bench_overlap) for m in found["NFD"]] == [(m.item, m.bench_overlap) for m in found["NFC"]]
    assert [m.bench_overlap for m in found["NFD"]] == [1.0]


def test_record_that_is_mostly_benchmark_text_is_contaminated_text(stage, unrelated_image):
    snippet = words(BENCH_PAGES[1][0], 30)  # 18 13-grams, all the item's
    record = corpus_record(unrelated_image, snippet + " plus a few words of its own here")  # 38 words
    assert drop_reason(stage, record) == "contaminated_text"
    assert record.quality["decontam"]["match"]["record_overlap"] == pytest.approx(18 / 26, abs=1e-6)


def test_unrelated_page_is_kept_with_its_scores(stage, unrelated_image, bench):
    # one 15-word benchmark run (3 13-grams) inside a long unrelated page: under both shares
    text = "\n\n".join(OTHER_PAGE) + " " + words(BENCH_PAGES[0][0], 15)
    kept = stage(corpus_record(unrelated_image, text))[0]
    found = kept.quality["decontam"]
    assert "match" not in found
    assert found["nearest_phash"]["distance"] > 30
    assert found["ngram"]["item"] == "docs/doc.pdf#page=1" and found["ngram"]["matched"] == 3
    assert found["ngram"]["bench_overlap"] == pytest.approx(3 / 16)
    assert kept.provenance[-1].stage == "clean:decontam"


def test_folder_of_images_and_texts(tmp_path, unrelated_image, bench_pdf):
    scan = Image.new("RGB", (1600, 2000), (250, 250, 245))
    for x in range(0, 1600, 40):
        scan.paste((20, 20, 20), (x, 300, x + 20, 1700))
    (tmp_path / "sub").mkdir()
    buf = io.BytesIO()
    scan.save(buf, format="PNG")
    (tmp_path / "sub" / "scan.png").write_bytes(buf.getvalue())
    (tmp_path / "sub" / "scan.md").write_text(" ".join(BENCH_PAGES[1]))
    (tmp_path / "notes.txt").write_text(words(BENCH_PAGES[0][0], 20))
    stage = DecontamStage(DecontamConfig(folder=str(tmp_path)))
    assert [(i.name, i.kind) for i in scan_folder(tmp_path)] == [("notes.txt", "text"), ("sub/scan.png", "image")]
    # the corpus stores the scan downscaled to 1288 px: the index normalised it the same way
    page = SourcePage(source="corpus", source_id="scan", page_number=1, payload_kind="image",
                      payload=buf.getvalue(), response="unrelated", domain="d", language="en", license="cc0",
                      instruction="Convert.")
    record = render_page(page, RenderConfig())
    assert drop_reason(stage, record) == "contaminated_image"
    assert record.quality["decontam"]["match"]["item"] == "sub/scan.png"
    text = corpus_record(unrelated_image, words(BENCH_PAGES[0][0], 20))
    assert drop_reason(stage, text) == "contaminated_text"
    assert text.quality["decontam"]["match"]["item"] == "notes.txt"


def test_missing_empty_or_malformed_folder_is_a_config_error(tmp_path, bench_pdf):
    with pytest.raises(ValueError, match="required"):
        DecontamStage(DecontamConfig())
    with pytest.raises(ValueError, match="does not exist"):
        DecontamStage(DecontamConfig(folder=str(tmp_path / "nope")))
    with pytest.raises(ValueError, match="no benchmark pages"):
        DecontamStage(DecontamConfig(folder=str(tmp_path)))
    data = tmp_path / "bench_data"
    (data / "pdfs").mkdir(parents=True)
    (data / "a.jsonl").write_text('{"pdf": "x.pdf", "page": 1, "type": "present", "text": "t"}\n')
    with pytest.raises(ValueError, match=r"a.jsonl:1: pdf 'x.pdf' not found"):
        DecontamStage(DecontamConfig(folder=str(tmp_path)))
    (data / "pdfs" / "x.pdf").write_bytes(bench_pdf)
    (data / "a.jsonl").write_text('{"pdf": "x.pdf", "page": 1}\n{not json\n')
    with pytest.raises(ValueError, match=r"a.jsonl:2: not JSON"):
        DecontamStage(DecontamConfig(folder=str(tmp_path)))
    (data / "a.jsonl").write_text('{"pdf": "../../escape.pdf", "page": 1}\n')
    with pytest.raises(ValueError, match="not found under"):
        DecontamStage(DecontamConfig(folder=str(tmp_path)))


def test_construction_is_cheap_and_pickles_small(stage, bench):
    blob = pickle.dumps(stage)
    assert len(blob) < 2000
    clone = pickle.loads(blob)
    assert clone.index is stage.index  # one index per process


@pytest.mark.parametrize("image, reason", [(b"", "corrupt_image"), (b"\x89PNG\r\n\x1a\nnot really", "corrupt_image"),
                                           (b"not an image at all", "corrupt_image")])
def test_undecodable_image_is_a_record_error(stage, image, reason):
    with pytest.raises(RecordError) as info:
        stage(corpus_record(image, "text"))
    assert info.value.reason == reason


def test_truncated_png_is_corrupt_image(stage, unrelated_image):
    with pytest.raises(RecordError) as info:
        stage(corpus_record(unrelated_image[: len(unrelated_image) // 2], "text"))
    assert info.value.reason == "corrupt_image"


def test_empty_and_ten_megabyte_responses(stage, unrelated_image):
    assert stage(corpus_record(unrelated_image, ""))[0].quality["decontam"]["ngram"] is None
    big = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
           "labore et dolore magna aliqua " * 60_000)  # 10 MB
    kept = stage(corpus_record(unrelated_image, big))[0]
    assert kept.quality["decontam"]["ngram"] is None


def test_unrenderable_benchmark_page_names_itself_in_every_dead_letter(tmp_path, bench_pdf, unrelated_image):
    data = tmp_path / "bench_data"
    (data / "pdfs").mkdir(parents=True)
    (data / "pdfs" / "x.pdf").write_bytes(bench_pdf)
    (data / "a.jsonl").write_text('{"pdf": "x.pdf", "page": 5, "type": "present", "text": "t"}\n')
    stage = DecontamStage(DecontamConfig(folder=str(tmp_path)))  # scanning does not render
    with pytest.raises(RecordError, match=r"x.pdf#page=5 cannot be read \(page_out_of_range\)") as info:
        stage(corpus_record(unrelated_image, "text"))
    assert info.value.reason == "decontam_index"


def test_a_refresh_sees_a_changed_benchmark_folder(bench, tmp_path):
    """The stage's fingerprint (what a refresh compares) follows the benchmark folder's content, not its name."""
    import shutil

    from pipelines.config import load_config
    from pipelines.refresh import stage_fingerprints

    folder = tmp_path / "bench"
    shutil.copytree(bench, folder)
    config = tmp_path / "corpus.yaml"
    config.write_text(json.dumps({
        "run": {"output": str(tmp_path / "out")}, "clean": {"stages": [{"name": "decontam", "folder": str(folder)}]},
        "sources": [{"name": "s", "kind": "local_folder", "paths": [str(tmp_path)], "license": "cc0"}]}))

    def fingerprint() -> str:
        from pipelines import io as pio

        pio.content_id.cache_clear()  # per-process cache: a refresh is a new run
        return stage_fingerprints(load_config(config))["s"]["decontam"]

    first = fingerprint()
    assert fingerprint() == first
    (folder / "bench_data" / "pdfs" / "docs" / "doc.pdf").write_bytes(b"%PDF-1.4 another benchmark page")
    assert fingerprint() != first
