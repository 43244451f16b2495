"""Helpers shared by tests: small PageRecords, tiny corpora, PDFs and sample configs.

The one module tests import helpers from (test files never import each other); fixtures live in the
``conftest.py`` files, server harnesses in ``tests/object_stores.py`` and ``tests/hub_server.py``.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from PIL import Image, ImageDraw

from schemas.page import PAGE_SCHEMA, PageRecord, ProvenanceStep, page_id

REPO = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- single records


def blank_png(size: tuple[int, int] = (20, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (255, 255, 255)).save(buf, format="PNG")
    return buf.getvalue()


def page_record(**overrides) -> PageRecord:
    """A valid PageRecord (a blank PNG page, 20x30 unless ``width``/``height`` say otherwise); any field
    can be overridden."""
    width, height = overrides.get("width", 20), overrides.get("height", 30)
    image = blank_png((width, height)) if isinstance(width, int) and isinstance(height, int) and width > 0 \
        and height > 0 else blank_png()
    values = dict(
        id=page_id("src", "doc-1", 1), source="src", source_id="doc-1", page_number=1,
        domain="documents", language="en", license="odc-by", image=image,
        image_sha256=hashlib.sha256(image).hexdigest(), width=20, height=30, task="parse_page",
        instruction="Convert to Markdown.", response="Hello", provenance=[ProvenanceStep("read:x", "1", "abc")],
    )
    values.update(overrides)
    return PageRecord(**values)


def zero_page_pdf() -> bytes:
    """A syntactically valid PDF whose page tree is empty."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


# --------------------------------------------------------------------------- tiny corpora for model/

CORPUS_WORDS = "the quick brown fox jumps over a lazy dog table formula page column row".split()
TEXT_PAGE_WORDS = "page table formula column row section figure total value".split()


def corpus_png(seed: str, size: tuple[int, int] = (84, 56)) -> bytes:
    """A grey PNG with a few lines of random words, the same for the same seed."""
    r = random.Random(seed)
    image = Image.new("L", size, "white")
    draw = ImageDraw.Draw(image)
    for y in range(4, size[1] - 8, 10):
        draw.text((r.randint(2, 8), y), " ".join(r.choices(CORPUS_WORDS, k=3)), fill="black")
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def corpus_record(source: str, domain: str, n: int, image: bytes | None = None, response: str | None = None,
                  split: str = "train", unit_tests: list[str] | None = None) -> PageRecord:
    """Record ``n`` of ``source``: a ``corpus_png`` page, a few random words and one ``present`` test."""
    data = image if image is not None else corpus_png(f"{source}/{n}")
    r = random.Random(f"{source}{n}")
    text = response if response is not None else " ".join(r.choices(CORPUS_WORDS, k=r.randint(3, 12)))
    tests = unit_tests if unit_tests is not None else [
        json.dumps({"type": "present", "text": text.split()[0], "pdf": "x.pdf", "page": 1, "id": f"t{n}"})]
    return PageRecord(
        id=page_id(source, str(n), 0), source=source, source_id=str(n), page_number=0, domain=domain,
        language="en", license="cc0", image=data, image_sha256=hashlib.sha256(data).hexdigest(),
        width=84, height=56, task="parse_page", instruction="Convert the page to markdown.",
        response=text, unit_tests=tests, provenance=[ProvenanceStep("test", "1", "x")], split=split)


def write_records(root: Path, records: list[PageRecord], files: int = 2, row_group: int = 8) -> str:
    """``root/data/<split>-NNNNN-of-MMMMM.parquet`` with PAGE_SCHEMA and small row groups; returns ``root``."""
    data = root / "data"
    data.mkdir(parents=True)
    for i in range(files):
        part = records[i::files]
        table = pa.Table.from_pylist([r.to_row() for r in part], schema=PAGE_SCHEMA)
        pq.write_table(table, data / f"train-{i:05d}-of-{files:05d}.parquet", row_group_size=row_group)
    return str(root)


def text_page(seed: int, size: tuple[int, int] = (56, 56)) -> Image.Image:
    """An RGB page with a few lines of random words (MTP and decoding tests)."""
    r = random.Random(seed)
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    for y in range(2, size[1] - 8, 10):
        draw.text((r.randint(1, 6), y), " ".join(r.choices(TEXT_PAGE_WORDS, k=2)), fill="black")
    return image


def write_text_page_corpus(root: Path, pages: int = 6) -> str:
    """One shard of ``pages`` ``text_page`` records (source ``mtp``), each with the response "a page a page ..."."""
    rows = []
    for n in range(pages):
        buf = io.BytesIO()
        text_page(n).save(buf, format="PNG")
        data = buf.getvalue()
        rows.append(PageRecord(
            id=page_id("mtp", str(n), 0), source="mtp", source_id=str(n), page_number=0, domain="docs",
            language="en", license="cc0", image=data, image_sha256=hashlib.sha256(data).hexdigest(), width=56,
            height=56, task="parse_page", instruction="Convert this page to Markdown.", response="a page " * 3,
            unit_tests=[], provenance=[ProvenanceStep("test", "1", "x")], split="train").to_row())
    (root / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=PAGE_SCHEMA), root / "data" / "train-00000-of-00001.parquet")
    return str(root)


# --------------------------------------------------------------------------- corpus DAG runs

# One process, one worker: fast and deterministic for tests that run the whole DAG.
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def sample_config(samples_root: Path, tmp_path: Path, **write) -> Path:
    """configs/corpus.yaml with its sample paths pointed at a freshly built copy."""
    text = (REPO / "configs" / "corpus.yaml").read_text().replace("samples/", f"{samples_root}/")
    text = text.replace("assets/", f"{REPO}/assets/")
    raw = yaml.safe_load(text)
    raw["run"]["output"] = str(tmp_path / "out")
    # the relabel stages need a server (python -m relabel.serve); tests/relabel runs them against one
    raw["clean"]["stages"] = [s for s in raw["clean"]["stages"] if s["name"] not in ("relabel", "audit", "preference")]
    for source in raw["sources"]:
        if source["kind"] == "jinaocrsynth":  # a few pages keep the suite fast; synth/ has its own tests
            source["options"].update(pages=3, pages_per_unit=3)
    raw["write"].update(write)
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


# A few cheap sources of the samples, for corpus runs repeated in one test module (incremental refresh,
# the report): olmOCR-mix tarball units (a 1025 page loses to a 0225 page in dedup), a parquet file,
# local files and two synthetic pages (with unit tests).
SMALL_CORPUS_SOURCES = ("olmocr-mix-1025", "olmocr-mix-0225", "europeana-newspapers", "local-pdfs", "jinaocrsynth")
SMALL_CORPUS_SAMPLES = ("olmocr-mix-1025", "olmocr-mix-0225", "europeana", "local")


def small_corpus_config(samples_root: Path, work: Path, edit=None) -> Path:
    """``sample_config`` cut to ``SMALL_CORPUS_SOURCES``; ``edit(raw)`` may change the parsed YAML."""
    work.mkdir(parents=True, exist_ok=True)
    path = sample_config(samples_root, work)
    raw = yaml.safe_load(path.read_text())
    raw["sources"] = [s for s in raw["sources"] if s["name"] in SMALL_CORPUS_SOURCES]
    for source in raw["sources"]:
        if source["kind"] == "jinaocrsynth":
            source["options"].update(pages=2, pages_per_unit=1)
    if edit:
        edit(raw)
    from pipelines.config import drop_missing_source_names

    path.write_text(yaml.safe_dump(drop_missing_source_names(raw)))
    return path


def run_small_corpus(samples_root: Path, work: Path, previous: Path | None = None, edit=None):
    """(manifest, output folder) of a small corpus run, incremental from ``previous`` when given."""
    from pipelines import corpus
    from pipelines.config import load_config

    cfg = load_config(small_corpus_config(samples_root, work, edit))
    manifest = corpus.run(cfg, IN_MEMORY, previous=str(previous) if previous else None)
    return manifest, Path(cfg.run.output)


# --------------------------------------------------------------------------- PubTabNet TEDS reference
# Written from PubTabNet's src/metric.py (github.com/ibm-aur-nlp/PubTabNet), independently of
# schemas/teds_pubtabnet.py, for tests/schemas/test_teds_conventions.py and benchmarks/teds.py:
# lxml.html parsing of <html><body>TABLE</body></html> as PubTabNet's data is given, body/table,
# every element a node; td a leaf carrying tag/text/tail tokens; APTED with the CustomConfig rule;
# a plain Levenshtein over token lists; 1 - TED / len(table.xpath('.//*')).


def _levenshtein(a: list[str], b: list[str]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


class _RefNode:
    def __init__(self, tag, colspan=None, rowspan=None, content=None):
        self.tag, self.colspan, self.rowspan, self.content, self.children = tag, colspan, rowspan, content, []


def _ref_config():
    from apted import Config  # dev extra

    class RefConfig(Config):
        def rename(self, a, b):
            if (a.tag, a.colspan, a.rowspan) != (b.tag, b.colspan, b.rowspan):
                return 1.0
            if a.tag == "td" and (a.content or b.content):
                return _levenshtein(a.content, b.content) / max(len(a.content), len(b.content))
            return 0.0

        def children(self, node):
            return node.children

    return RefConfig()


def _ref_tokens(el, top: bool) -> list[str]:
    toks = [] if top else ["<%s>" % el.tag]
    toks += list(el.text or "")
    for child in el.getchildren():
        toks += _ref_tokens(child, False)
    if not top and el.tag != "unk":
        toks.append("</%s>" % el.tag)
    if not top and el.tag != "td":
        toks += list(el.tail or "")
    return toks


def _ref_tree(el, structure_only: bool) -> _RefNode:
    if el.tag == "td":
        return _RefNode("td", int(el.get("colspan", "1")), int(el.get("rowspan", "1")),
                        [] if structure_only else _ref_tokens(el, True))
    node = _RefNode(el.tag)
    node.children = [_ref_tree(c, structure_only) for c in el.getchildren()]
    return node


def pubtabnet_reference_teds(pred: str, true: str, structure_only: bool = False) -> float:
    """PubTabNet's TEDS of two single-table HTML strings, unclamped, via ``apted``."""
    from apted import APTED  # dev extra
    from lxml import html as lxml_html

    parser = lxml_html.HTMLParser(remove_comments=True, encoding="utf-8")
    tables = []
    for s in (pred, true):
        root = lxml_html.fromstring("<html><body>" + s + "</body></html>", parser=parser)
        tables.append(root.xpath("body/table")[0])
    n = max(len(t.xpath(".//*")) for t in tables)
    d = APTED(_ref_tree(tables[0], structure_only), _ref_tree(tables[1], structure_only),
              _ref_config()).compute_edit_distance()
    return 1.0 - d / n


def loopback_server(handler) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1 (a free port: ``server.server_address[1]``) answering with ``handler``, one
    daemon thread per request, served from a daemon thread; ``shutdown()`` and ``server_close()`` end it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
