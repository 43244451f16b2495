"""Local-folder sample: PDFs and scans with sidecar labels, in the layout ``local_folder`` reads.

``build(root)`` writes ``root/local/``::

    report.pdf + report.md            2-page PDF; the label's pages are separated by a form feed
    letters/letter-1791.pdf + .md     1-page PDF
    scans/deed.jpg + scans/deed.txt   JPEG stored rotated with EXIF orientation 6 (render uprights it)
    unlabelled.png                    no sidecar: response "" and quality {"unlabelled": true}

Expected ``LocalFolderSource`` rows (sorted by path): ``letters/letter-1791.pdf`` (1 page),
``report.pdf`` (2 pages), ``scans/deed.jpg`` (1 page, response_format ``text``),
``unlabelled.png`` (1 page). Seeded and byte-identical across reruns.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from samples.make.pdfs import paragraphs, scan_image, text_pdf

SEED = 4242


def build(root: Path) -> None:
    """Write the local-folder sample under ``root/local``."""
    rng = random.Random(SEED)
    out = Path(root) / "local"
    (out / "letters").mkdir(parents=True, exist_ok=True)
    (out / "scans").mkdir(parents=True, exist_ok=True)

    report = [paragraphs(rng, 3), paragraphs(rng, 2)]
    (out / "report.pdf").write_bytes(text_pdf(report, title="Quarterly report"))
    # One label part per PDF page, separated by form feeds, each faithful to its page's text.
    label = "\f".join("\n\n".join(p) + "\n" for p in report)
    (out / "report.md").write_text(label, encoding="utf-8")

    letter = [paragraphs(rng, 2)]
    (out / "letters" / "letter-1791.pdf").write_bytes(text_pdf(letter, title="Letter"))
    (out / "letters" / "letter-1791.md").write_text("\n\n".join(letter[0]) + "\n", encoding="utf-8")

    deed = " ".join(paragraphs(rng, 2, (15, 25)))
    (out / "scans" / "deed.jpg").write_bytes(scan_image(rng, deed, size=(600, 800), exif_rotate=True))
    (out / "scans" / "deed.txt").write_text(deed + "\n", encoding="utf-8")

    blank_text = " ".join(paragraphs(rng, 1, (10, 20)))
    (out / "unlabelled.png").write_bytes(scan_image(rng, blank_text, size=(400, 520), fmt="PNG"))


if __name__ == "__main__":
    build(Path(sys.argv[1] if len(sys.argv) > 1 else "samples/data"))
