"""olmOCR-mix samples in the published layouts (1025 parquet + tarballs, 0225 JSON, training dir).

Includes a few bad records on purpose so ``make corpus`` shows the dead-letter path: a row whose
tarball member is missing, a row whose ``pdf_relpath`` tries ``..``, a tarball member named
``../../escape.pdf`` that must never be extracted, a bad ``response`` JSON (0225), and training
pairs with invalid front matter and invalid UTF-8. The first 0225 row repeats the first 1025
page, so the dedup stage has a duplicate to drop.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import tarfile
from pathlib import Path

import pandas as pd
from reportlab.lib.pagesizes import letter
from reportlab.pdfgen import canvas

from samples.make.pdfs import _wrap, paragraphs, text_pdf

SEED = 1025


def rotated_pdf(paras: list[str]) -> bytes:
    """A page whose content is turned 90 degrees counter-clockwise (needs a 90 CW correction)."""
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=letter, invariant=1)
    c.translate(letter[0], 0)
    c.rotate(90)
    y = letter[0] - 72
    c.setFont("Helvetica", 10)
    for para in paras:  # every word of the label is on the page: paragraphs wrapped, not cut
        for line in _wrap(para, 95):
            c.drawString(72, y, line)
            y -= 13
        y -= 8
    c.showPage()
    c.save()
    return buf.getvalue()


def table_markdown(rng: random.Random) -> tuple[str, list[str]]:
    rows = [[f"{rng.randint(10, 999)}" for _ in range(3)] for _ in range(4)]
    html = "<table><tr><th>Year</th><th>Count</th><th>Total</th></tr>" + "".join(
        "<tr>" + "".join(f"<td>{v}</td>" for v in r) + "</tr>" for r in rows
    ) + "</table>"
    lines = ["Year   Count   Total"] + ["   ".join(r) for r in rows]
    return html, lines


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    """A deterministic .tar.gz (fixed mtimes and owners)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = 0
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))


def _response(text: str | None, **flags) -> dict:
    base = {"primary_language": "en", "is_rotation_valid": True, "rotation_correction": 0,
            "is_table": False, "is_diagram": False, "natural_text": text}
    base.update(flags)
    return base


def build_1025(root: Path, rng: random.Random) -> tuple[bytes, str]:
    """Writes the 1025 layout; returns the first document's (PDF, text) for planting a duplicate."""
    out = root / "olmocr-mix-1025"
    first: tuple[bytes, str] | None = None
    for subset, n_docs in (("00_documents", 8), ("01_books", 4)):
        tar_name = f"{subset}_train_00000.tar.gz"
        rows, members = [], []
        for i in range(n_docs):
            doc_id = f"rg_{100 + i}/{subset[:2]}{rng.randrange(16**8):08x}"
            paras = paragraphs(rng, rng.randint(2, 4))
            if subset == "00_documents" and i == 4:
                # label conventions to rewrite: a comma-joined formula and LaTeX bold outside math
                paras.append("The pairs $a+b,c+d$ are equal and \\textbf{bold} marks them.")
            flags: dict = {}
            text = "\n\n".join(paras)
            if subset == "00_documents" and i == 2:
                pdf = rotated_pdf(paras)
                flags = {"is_rotation_valid": False, "rotation_correction": 90}
            elif subset == "00_documents" and i == 3:
                html, lines = table_markdown(rng)
                pdf = text_pdf([lines])
                text = html
                flags = {"is_table": True}
            else:
                pdf = text_pdf([paras])
            members.append((f"{doc_id}.pdf", pdf))
            first = first or (pdf, text)
            resp = _response(text, **flags)
            rows.append({
                "id": doc_id,
                "url": f"https://example.org/{doc_id}.pdf",
                "page_number": rng.randint(1, 40),
                "pdf_relpath": f"pdf_tarballs/{tar_name}:{doc_id}.pdf",
                **{k: resp[k] for k in ("primary_language", "is_rotation_valid", "rotation_correction",
                                        "is_table", "is_diagram", "natural_text")},
                "extras": json.dumps({"source": subset}),
            })
        if subset == "00_documents":
            # Bad on purpose: a member the tarball lacks, and a relpath that tries to escape.
            for doc_id, rel in (("rg_900/missing", f"pdf_tarballs/{tar_name}:rg_900/missing.pdf"),
                                ("rg_901/escape", f"pdf_tarballs/{tar_name}:../../escape.pdf")):
                rows.append({**rows[0], "id": doc_id, "pdf_relpath": rel})
            members.append(("../../escape.pdf", text_pdf([["escaped"]])))
        write_tar(out / "pdf_tarballs" / tar_name, members)
        frame = pd.DataFrame(rows).set_index("id")
        frame["page_number"] = frame["page_number"].astype("Int64")
        frame.to_parquet(out / f"{subset}_train.parquet", compression="snappy")
    assert first is not None
    return first


def build_0225(root: Path, rng: random.Random, duplicate: tuple[bytes, str]) -> None:
    """The 0225 layout; its first row is the same page as a 1025 row (the dedup stage drops one)."""
    out = root / "olmocr-mix-0225"
    rows, members = [], []
    for i in range(4):
        doc_id = f"{rng.randrange(16**12):012x}-{i}"
        paras = paragraphs(rng, 2)
        pdf, text = duplicate if i == 0 else (text_pdf([paras]), "\n\n".join(paras))
        members.append((f"{doc_id}.pdf", pdf))
        response = json.dumps(_response(text))
        if i == 3:
            response = response[:-5]  # bad on purpose: truncated JSON
        rows.append({"id": doc_id, "url": f"https://example.org/{i}.pdf", "page_number": 1, "response": response})
    write_tar(out / "pdf_tarballs" / "s2pdf_00000.tar.gz", members)
    pd.DataFrame(rows).set_index("id").to_parquet(out / "train-s2pdf.parquet", compression="snappy")


def build_train_dir(root: Path, rng: random.Random) -> None:
    out = root / "olmocr-train" / "processed_00_documents_train"
    for i in range(4):
        doc_id = f"{rng.randrange(16**8):08x}"
        folder = out / doc_id[:4]
        folder.mkdir(parents=True, exist_ok=True)
        paras = paragraphs(rng, 2)
        (folder / f"{doc_id[4:]}.pdf").write_bytes(text_pdf([paras]))
        front = ("---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
                 "is_table: False\nis_diagram: False\n---\n")
        body = "\n\n".join(paras)
        if i == 2:
            front = front.replace("is_diagram: False\n", "is_diagram: False\nmystery: 1\n")  # bad: extra field
        data = (front + body).encode("utf-8")
        if i == 3:
            data = data + b"\xff\xfe broken"  # bad: not UTF-8
        (folder / f"{doc_id[4:]}.md").write_bytes(data)


def build(root: Path) -> None:
    rng = random.Random(SEED)
    first = build_1025(root, rng)
    build_0225(root, rng, duplicate=first)
    build_train_dir(root, rng)
