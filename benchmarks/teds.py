"""TEDS speed and exactness: ``schemas.similarity.teds`` against an ``apted``-based reference.

    python benchmarks/teds.py [--pairs 200] [--seed 0] [--no-structure] [--convention {omnidocbench,pubtabnet,both}]

Generates ``--pairs`` seeded table pairs from 3x3 to 30x12 cells with row and column spans; the
candidate is a perturbed copy (edited cell texts, dropped and added rows, changed spans, header
cells turned into data cells). Both implementations parse the same HTML with
``schemas.tables.parse_tables`` and build the same ``table -> tr -> td/th`` tree; the reference
computes the tree edit distance with the ``apted`` package (APTED, pure Python) and PubTabNet's
``CustomConfig`` rename rule, ours with ``schemas.tree_edit.table_tree_distance``. It prints the
max |TEDS difference| (must be <= 1e-6), total times and the speedup (target >= 10x; totals
include the shared HTML parsing, also shown without it), for TEDS and (unless ``--no-structure``)
TEDS-S, and exits 1 if a check fails.

With ``--convention pubtabnet`` (or ``both``, the default) the same pairs are also scored under the
PubTabNet convention (``schemas.teds_pubtabnet``: lxml trees with thead/tbody, tags as written,
whitespace kept) against ``tests.helpers.pubtabnet_reference_teds`` (apted + PubTabNet's tree
rules), which must agree to 1e-9; it prints the times and the largest gap between the two
conventions on the same pair.

``apted`` is installed into the running interpreter's environment with pip if it is missing; it
is a benchmark-only dependency, not a project one.
"""

from __future__ import annotations

import argparse
import html
import importlib
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rapidfuzz.distance import Levenshtein  # noqa: E402

from schemas.similarity import table_node_count, teds  # noqa: E402
from schemas.tables import Cell, Table, parse_tables  # noqa: E402
from tests.helpers import pubtabnet_reference_teds  # noqa: E402

WORDS = ("total", "revenue", "2023", "2024", "n/a", "12.5", "0.031", "Model", "Score", "±0.4", "季度", "収益",
         "mean", "std", "—", "x", "Δ", "95%", "Table", "cost")


def _ensure_apted():
    try:
        return importlib.import_module("apted")
    except ModuleNotFoundError:
        print("installing apted (benchmark only) ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "apted"], check=True)
        importlib.invalidate_caches()
        return importlib.import_module("apted")


# --------------------------------------------------------------------------- generation


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.choice((0, 1, 1, 1, 2, 3))))


def _table(rng: random.Random, n_rows: int, n_cols: int) -> list[list[Cell]]:
    """A rectangular table whose cells sometimes span rows and columns; row 0 is the header."""
    taken: set[tuple[int, int]] = set()
    rows: list[list[Cell]] = []
    for r in range(n_rows):
        row: list[Cell] = []
        for c in range(n_cols):
            if (r, c) in taken:
                continue
            colspan = rowspan = 1
            if rng.random() < 0.12:
                while colspan < 3 and c + colspan < n_cols and (r, c + colspan) not in taken and rng.random() < 0.6:
                    colspan += 1
            if r > 0 and rng.random() < 0.1:
                while rowspan < 3 and r + rowspan < n_rows and rng.random() < 0.6 and not any(
                        (r + rowspan, c + k) in taken for k in range(colspan)):
                    rowspan += 1
            for dr in range(rowspan):
                for dc in range(colspan):
                    taken.add((r + dr, c + dc))
            row.append(Cell(_text(rng), rowspan, colspan, header=r == 0))
        rows.append(row)
    return rows


def _edit(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        pos = rng.randint(0, len(chars))
        if op < 0.4 or not chars:
            chars.insert(pos, rng.choice("abcdefghij0123456789 .,"))
        elif op < 0.7:
            del chars[min(pos, len(chars) - 1)]
        else:
            chars[min(pos, len(chars) - 1)] = rng.choice("xyz789")
    return "".join(chars)


def _perturb(rng: random.Random, rows: list[list[Cell]]) -> list[list[Cell]]:
    rows = [list(r) for r in rows]
    p_edit = rng.choice((0.0, 0.05, 0.15, 0.3))
    for row in rows:
        for k, cell in enumerate(row):
            if rng.random() < p_edit:
                row[k] = Cell(_edit(rng, cell.text), cell.rowspan, cell.colspan, cell.header)
    for _ in range(rng.choice((0, 0, 1, 2))):
        if len(rows) > 1:
            del rows[rng.randrange(1, len(rows))]
    width = max(len(r) for r in rows)
    for _ in range(rng.choice((0, 0, 1, 2))):
        rows.insert(rng.randint(1, len(rows)), [Cell(_text(rng)) for _ in range(width)])
    for _ in range(rng.choice((0, 1, 2, 3))):
        row = rows[rng.randrange(len(rows))]
        if row:
            k = rng.randrange(len(row))
            c = row[k]
            if rng.random() < 0.5:
                row[k] = Cell(c.text, c.rowspan, max(1, c.colspan + rng.choice((-1, 1))), c.header)
            else:
                row[k] = Cell(c.text, max(1, c.rowspan + rng.choice((-1, 1))), c.colspan, c.header)
    if rng.random() < 0.2:
        rows[0] = [Cell(c.text, c.rowspan, c.colspan, False) for c in rows[0]]
    return rows


def to_html(rows: list[list[Cell]], rng: random.Random) -> str:
    """HTML with the header row in <thead> (as <th>, or <td> inside thead) and varied spacing."""
    out = ["<table>\n"]
    for r, row in enumerate(rows):
        if r == 0:
            out.append("<thead>")
        if r == 1:
            out.append("<tbody>")
        out.append("<tr>" + (" " if rng.random() < 0.3 else ""))
        for cell in row:
            tag = "th" if cell.header and rng.random() < 0.8 else "td"
            attrs = (f' colspan="{cell.colspan}"' if cell.colspan > 1 else "") + (
                f' rowspan="{cell.rowspan}"' if cell.rowspan > 1 else "")
            out.append(f"<{tag}{attrs}>{html.escape(cell.text)}</{tag}>")
        out.append("</tr>\n")
        if r == 0:
            out.append("</thead>")
    out.append("</tbody></table>" if len(rows) > 1 else "</table>")
    return "".join(out)


def make_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        rows = _table(rng, rng.randint(3, 30), rng.randint(3, 12))
        pairs.append((to_html(_perturb(rng, rows), rng), to_html(rows, rng)))
    return pairs


# --------------------------------------------------------------------------- apted reference


def reference_teds_factory(apted):
    class TableTree:
        """PubTabNet's ``TableTree``: tag, spans, content (cells) and children."""

        def __init__(self, tag, colspan=None, rowspan=None, content=None, children=()):
            self.tag, self.colspan, self.rowspan, self.content = tag, colspan, rowspan, content
            self.children = list(children)

    class CustomConfig(apted.Config):
        """PubTabNet ``metric.py`` rename rule; insert and delete keep APTED's default cost 1."""

        def rename(self, node1, node2):
            if node1.tag != node2.tag or node1.colspan != node2.colspan or node1.rowspan != node2.rowspan:
                return 1.0
            if node1.tag in ("td", "th") and (node1.content or node2.content):
                return Levenshtein.normalized_distance(node1.content, node2.content)
            return 0.0

        def children(self, node):
            return node.children

    def tree(table: Table, structure_only: bool) -> TableTree:
        return TableTree("table", children=[
            TableTree("tr", children=[
                TableTree("th" if c.header else "td", c.colspan, c.rowspan, "" if structure_only else c.text)
                for c in row])
            for row in table.rows])

    def reference_teds(pred: str, ref: str, structure_only: bool = False) -> float:
        a, b = parse_tables(pred)[0], parse_tables(ref)[0]
        n = max(table_node_count(a), table_node_count(b))
        distance = apted.APTED(tree(a, structure_only), tree(b, structure_only), CustomConfig()).compute_edit_distance()
        return min(1.0, max(0.0, 1.0 - distance / n))

    return reference_teds


# --------------------------------------------------------------------------- main


def parse_seconds(pairs: list[tuple[str, str]]) -> float:
    """Time spent in ``parse_tables`` alone: shared by both implementations."""
    t0 = time.perf_counter()
    for pred, ref in pairs:
        parse_tables(pred)
        parse_tables(ref)
    return time.perf_counter() - t0


def run(pairs: list[tuple[str, str]], reference_teds, structure_only: bool) -> tuple[float, float, float]:
    ours_s = ref_s = 0.0
    worst = 0.0
    for pred, ref in pairs:
        t0 = time.perf_counter()
        a = teds(pred, ref, structure_only=structure_only)
        t1 = time.perf_counter()
        b = reference_teds(pred, ref, structure_only=structure_only)
        t2 = time.perf_counter()
        ours_s += t1 - t0
        ref_s += t2 - t1
        worst = max(worst, abs(a - b))
    return worst, ours_s, ref_s


def run_pubtabnet(pairs: list[tuple[str, str]], structure_only: bool) -> bool:
    """The PubTabNet convention against the apted reference; prints one line, True when exact."""
    ours_s = ref_s = worst = gap = 0.0
    for pred, ref in pairs:
        t0 = time.perf_counter()
        a = teds(pred, ref, structure_only=structure_only, convention="pubtabnet")
        t1 = time.perf_counter()
        b = max(0.0, pubtabnet_reference_teds(pred, ref, structure_only))
        t2 = time.perf_counter()
        ours_s, ref_s = ours_s + t1 - t0, ref_s + t2 - t1
        worst = max(worst, abs(a - b))
        gap = max(gap, abs(a - teds(pred, ref, structure_only=structure_only)))
    name = "TEDS-S" if structure_only else "TEDS"
    print(f"{name:<6} pubtabnet max|diff| {worst:.2e}  ours {ours_s:7.3f} s ({1000 * ours_s / len(pairs):6.2f} ms/pair)"
          f"  apted {ref_s:7.2f} s  speedup {ref_s / max(ours_s, 1e-9):6.1f}x"
          f"  max|pubtabnet - omnidocbench| {gap:.3f}")
    if worst > 1e-9:
        print(f"FAIL: {name} (pubtabnet) differs from the apted reference by {worst:.3g} > 1e-9")
    return worst <= 1e-9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-structure", action="store_true", help="skip the TEDS-S run")
    parser.add_argument("--convention", choices=("omnidocbench", "pubtabnet", "both"), default="both")
    args = parser.parse_args(argv)

    reference_teds = reference_teds_factory(_ensure_apted())
    pairs = make_pairs(args.pairs, args.seed)
    sizes = [sum(len(r) for r in parse_tables(ref)[0].rows) for _, ref in pairs]
    print(f"{len(pairs)} pairs, seed {args.seed}: reference tables of {min(sizes)}-{max(sizes)} cells "
          f"(mean {sum(sizes) / len(sizes):.0f}), spans included")
    parse_s = parse_seconds(pairs)
    print(f"parsing alone (HTML -> Table, in both totals): {parse_s:.3f} s")
    ok = True
    for structure_only in ([False] if args.no_structure else [False, True]):
        if args.convention != "omnidocbench":
            ok = run_pubtabnet(pairs, structure_only) and ok
        if args.convention == "pubtabnet":
            continue
        name = "TEDS-S" if structure_only else "TEDS"
        worst, ours_s, ref_s = run(pairs, reference_teds, structure_only)
        speedup = ref_s / ours_s if ours_s else float("inf")
        print(f"{name:<6} max|diff| {worst:.2e}  ours {ours_s:7.3f} s ({1000 * ours_s / len(pairs):6.2f} ms/pair)"
              f"  apted {ref_s:7.2f} s ({1000 * ref_s / len(pairs):7.1f} ms/pair)  speedup {speedup:6.1f}x"
              f"  (excluding parsing {(ref_s - parse_s) / max(1e-9, ours_s - parse_s):.0f}x)")
        if worst > 1e-6:
            print(f"FAIL: {name} differs from the apted reference by {worst:.3g} > 1e-6")
            ok = False
        if speedup < 10:
            print(f"FAIL: {name} speedup {speedup:.1f}x < 10x")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
