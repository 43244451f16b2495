"""Seeded ``Table`` generator for JinaOCRSynth's table suite and the reference HTML of a table.

Categories (Jina-OCR-v1 section 4.2, failures seen on real pages):

* ``spanned``: a two-level header (a ``rowspan=2`` stub heading, ``colspan`` group headings over
  their sub-columns) and sometimes a row-spanning group label in the body;
* ``dense_numeric``: many columns of decimals, thousands separators, signs and percentages;
* ``transposed``: attributes as rows and entities as columns (the header is the first column);
* ``borderless``: a plain grid drawn without rules (``style="borderless"``);
* ``empty_cells``: blanks scattered through the body;
* ``checkbox``: ``☐``/``☑`` cells (as text) in a feature matrix.

Tables are built as full grids and then spans are carved out explicitly, so every table is
rectangular by construction; ``verify_table`` re-parses the reference HTML with
``schemas.tables.parse_html_tables`` and raises if the grid is not a full rectangle.
``localize_table`` puts a table's words and caption in Simplified Chinese for Chinese pages.
"""

from __future__ import annotations

import html
import random
import re
from collections.abc import Callable
from dataclasses import replace

from schemas.tables import parse_html_tables
from synth.blocks import Table, TableCell

CATEGORIES: tuple[str, ...] = ("spanned", "dense_numeric", "transposed", "borderless", "empty_cells", "checkbox")
CHECKED, UNCHECKED = "☑", "☐"

_REGIONS = ("North", "South", "East", "West", "Central", "Coastal", "Upland", "Delta")
_ITEMS = ("Pumps", "Valves", "Filters", "Sensors", "Cables", "Brackets", "Gaskets", "Meters", "Relays", "Fittings")
_METRICS = ("Revenue", "Cost", "Margin", "Units", "Returns", "Growth", "Share", "Backlog")
_PLANS = ("Basic", "Standard", "Premium", "Enterprise")
_FEATURES = ("Offline access", "Audit log", "Single sign-on", "Priority support", "Data export",
             "Custom domain", "API access", "Two-factor login")
_CITIES = ("Arden", "Belmont", "Carrow", "Dunmore", "Elmstead", "Fairholt", "Glenwick", "Harrowby")
_ATTRS = ("Population", "Area (km²)", "Elevation (m)", "Founded", "Rainfall (mm)", "Schools", "Parks")


def _h(text: str, rowspan: int = 1, colspan: int = 1) -> TableCell:
    return TableCell(text, rowspan=rowspan, colspan=colspan, header=True)


def _d(text: str, rowspan: int = 1) -> TableCell:
    return TableCell(text, rowspan=rowspan)


def _decimal(rng: random.Random, lo: float = 0.0, hi: float = 999.0, places: int = 2) -> str:
    return f"{rng.uniform(lo, hi):,.{places}f}"


def _years(rng: random.Random, n: int) -> list[str]:
    start = rng.randint(2012, 2020)
    return [str(start + i) for i in range(n)]


def _spanned(rng: random.Random, max_cols: int) -> Table:
    groups = sorted(rng.sample(_years(rng, 4), k=2 if max_cols < 8 else rng.choice([2, 3])))
    subs = list(rng.choice([("Q1", "Q2"), ("H1", "H2"), ("Plan", "Actual"), ("Min", "Max")]))
    n_body = rng.randint(3, 5)
    items = rng.sample(_ITEMS, n_body)
    header1 = [_h("Product", rowspan=2)] + [_h(g, colspan=len(subs)) for g in groups]
    header2 = [_h(s) for _ in groups for s in subs]
    rows = [tuple(header1), tuple(header2)]
    grouped = rng.random() < 0.5 and n_body >= 4 and 2 + len(groups) * len(subs) <= max_cols
    for item in items:
        cells = [_d(item)] + [_d(f"{rng.randint(10, 990)}") for _ in range(len(groups) * len(subs))]
        rows.append(tuple(cells))
    if grouped:
        # A row-spanning group label in front of the body: a second stub column.
        label_rows = [rows[0], rows[1]]
        label_rows[0] = (_h("Line", rowspan=2),) + rows[0]
        body = rows[2:]
        split = len(body) // 2
        new_body = []
        for i, row in enumerate(body):
            if i == 0:
                new_body.append((_d("Hydraulic", rowspan=split),) + row)
            elif i == split:
                new_body.append((_d("Electrical", rowspan=len(body) - split),) + row)
            else:
                new_body.append(row)
        rows = label_rows + new_body
    return Table(rows=tuple(rows), caption=f"Table {rng.randint(1, 9)}: Shipments by product and period",
                 style="ruled", category="spanned")


def _dense_numeric(rng: random.Random, max_cols: int) -> Table:
    n_cols = min(max_cols, rng.randint(4, 6))
    metrics = rng.sample(_METRICS, n_cols - 1)
    regions = rng.sample(_REGIONS, rng.randint(4, 6))
    rows = [tuple([_h("Region")] + [_h(m) for m in metrics])]
    for region in regions:
        cells = [_d(region)]
        for m in metrics:
            if m in ("Growth", "Share", "Margin"):
                cells.append(_d(f"{rng.uniform(-12, 40):+.1f}%"))
            elif m == "Units":
                cells.append(_d(f"{rng.randint(1000, 98000):,}"))
            else:
                cells.append(_d(_decimal(rng, 10, 9999)))
        rows.append(tuple(cells))
    return Table(rows=tuple(rows), caption="Regional results (thousands)", style=rng.choice(["ruled", "grid"]),
                 category="dense_numeric")


def _transposed(rng: random.Random, max_cols: int) -> Table:
    cities = rng.sample(_CITIES, min(max_cols - 1, rng.randint(3, 4)))
    attrs = rng.sample(_ATTRS, rng.randint(3, 5))
    rows = [tuple([_h("")] + [_h(c) for c in cities])]
    for attr in attrs:
        cells = [_h(attr)]
        for _ in cities:
            if attr == "Founded":
                cells.append(_d(str(rng.randint(1650, 1950))))
            elif attr.startswith("Population") or attr in ("Schools", "Parks"):
                cells.append(_d(f"{rng.randint(2000, 250000):,}" if attr.startswith("P") and attr != "Parks"
                                else str(rng.randint(3, 90))))
            else:
                cells.append(_d(_decimal(rng, 1, 2500, rng.choice([0, 1]))))
        rows.append(tuple(cells))
    return Table(rows=tuple(rows), caption="Town profiles", style="ruled", category="transposed")


def _borderless(rng: random.Random, max_cols: int) -> Table:
    n_cols = min(max_cols, rng.randint(3, 4))
    heads = ["Item", "Qty", "Unit price", "Amount"][:n_cols]
    rows = [tuple(_h(h) for h in heads)]
    for item in rng.sample(_ITEMS, rng.randint(3, 5)):
        qty = rng.randint(1, 40)
        price = rng.uniform(1, 300)
        values = [item, str(qty), f"{price:.2f}", f"{qty * price:,.2f}"][:n_cols]
        rows.append(tuple(_d(v) for v in values))
    return Table(rows=tuple(rows), caption="", style="borderless", category="borderless")


def _empty_cells(rng: random.Random, max_cols: int) -> Table:
    n_cols = min(max_cols, rng.randint(4, 5))
    days = ["Mon", "Tue", "Wed", "Thu", "Fri"][: n_cols - 1]
    rows = [tuple([_h("Station")] + [_h(d) for d in days])]
    for city in rng.sample(_CITIES, rng.randint(3, 5)):
        cells = [_d(city)]
        for _ in days:
            cells.append(_d("" if rng.random() < 0.3 else f"{rng.uniform(0, 45):.1f}"))
        rows.append(tuple(cells))
    return Table(rows=tuple(rows), caption="Daily rainfall (mm); blank where not reported",
                 style=rng.choice(["ruled", "grid"]), category="empty_cells")


def _checkbox(rng: random.Random, max_cols: int) -> Table:
    plans = rng.sample(_PLANS, min(max_cols - 1, rng.randint(2, 4)))
    plans.sort(key=_PLANS.index)
    rows = [tuple([_h("Feature")] + [_h(p) for p in plans])]
    for feature in rng.sample(_FEATURES, rng.randint(3, 6)):
        rows.append(tuple([_d(feature)] + [_d(CHECKED if rng.random() < 0.6 else UNCHECKED) for _ in plans]))
    return Table(rows=tuple(rows), caption="Plan comparison", style="grid", category="checkbox")


_GENERATORS: dict[str, Callable[[random.Random, int], Table]] = {
    "spanned": _spanned, "dense_numeric": _dense_numeric, "transposed": _transposed,
    "borderless": _borderless, "empty_cells": _empty_cells, "checkbox": _checkbox,
}


def header_rows(table: Table) -> int:
    """Leading rows made only of header cells (the table head); 0 when every row is a header."""
    n_head = 0
    for row in table.rows:
        if row and all(c.header for c in row):
            n_head += 1
        else:
            break
    return 0 if n_head == len(table.rows) else n_head


def table_html(table: Table) -> str:
    """The reference HTML: ``<table>`` with a ``<thead>`` for leading all-header rows, ``<th>``/``<td>``
    and ``rowspan``/``colspan``; no caption (the caption is a separate line in the reference)."""
    def cell_html(cell: TableCell) -> str:
        tag = "th" if cell.header else "td"
        attrs = ""
        if cell.rowspan > 1:
            attrs += f' rowspan="{cell.rowspan}"'
        if cell.colspan > 1:
            attrs += f' colspan="{cell.colspan}"'
        return f"<{tag}{attrs}>{html.escape(cell.text, quote=False)}</{tag}>"

    n_head = header_rows(table)
    parts = ["<table>"]
    if n_head:
        parts.append("<thead>")
    for i, row in enumerate(table.rows):
        if n_head and i == n_head:
            parts.append("</thead>")
            parts.append("<tbody>")
        parts.append("<tr>" + "".join(cell_html(c) for c in row) + "</tr>")
    if n_head:
        parts.append("</tbody>")
    parts.append("</table>")
    return "\n".join(parts)


def verify_table(table: Table) -> None:
    """Raise ``ValueError`` unless the reference HTML parses to exactly one rectangular table."""
    parsed = parse_html_tables(table_html(table))
    if len(parsed) != 1 or not parsed[0].is_rectangular or parsed[0].problems:
        problems = parsed[0].problems if parsed else ["no table parsed"]
        raise ValueError(f"table ({table.category}) is not rectangular: {problems}")


def generate_table(rng: random.Random, category: str | None = None, *, max_cols: int = 7) -> Table:
    """One verified table of ``category`` (random when ``None``); ``max_cols`` caps the width (use about
    4 in narrow newspaper columns), except for ``spanned`` tables, which are at least 5 wide (a stub
    column and two groups of two): they still fit a narrow column, and in one of at most 4 cells they
    are the only tables that reach ``LARGE_TABLE_CELLS`` (synth.content's large_table)."""
    if category is None:
        category = rng.choice(CATEGORIES)
    if category not in _GENERATORS:
        raise ValueError(f"unknown table category {category!r}; expected one of {list(CATEGORIES)}")
    table = _GENERATORS[category](rng, max(3, max_cols))
    verify_table(table)
    return table


# -- Chinese pages ---------------------------------------------------------------------------------
# Every word a generator puts in a cell, in Simplified Chinese; numbers, years, dates and checkboxes
# stay as they are. Captions are matched whole (``_ZH_CAPTIONS``, with their table number).
_ZH_WORDS: dict[str, str] = {
    "North": "华北", "South": "华南", "East": "华东", "West": "西部", "Central": "华中", "Coastal": "沿海",
    "Upland": "山区", "Delta": "三角洲", "Pumps": "水泵", "Valves": "阀门", "Filters": "过滤器", "Sensors": "传感器",
    "Cables": "电缆", "Brackets": "支架", "Gaskets": "垫片", "Meters": "仪表", "Relays": "继电器", "Fittings": "管件",
    "Revenue": "营业收入", "Cost": "成本", "Margin": "利润率", "Units": "数量", "Returns": "退货", "Growth": "增长率",
    "Share": "占比", "Backlog": "积压订单", "Basic": "基础版", "Standard": "标准版", "Premium": "高级版",
    "Enterprise": "企业版", "Offline access": "离线访问", "Audit log": "审计日志", "Single sign-on": "单点登录",
    "Priority support": "优先支持", "Data export": "数据导出", "Custom domain": "自定义域名", "API access": "接口访问",
    "Two-factor login": "双重认证", "Arden": "安登", "Belmont": "贝尔蒙", "Carrow": "卡罗", "Dunmore": "邓莫尔",
    "Elmstead": "榆树镇", "Fairholt": "费尔霍", "Glenwick": "格伦威", "Harrowby": "哈罗比", "Population": "人口",
    "Area (km²)": "面积（km²）", "Elevation (m)": "海拔（m）", "Founded": "建镇年份", "Rainfall (mm)": "降雨量（mm）",
    "Schools": "学校", "Parks": "公园", "Product": "产品", "Region": "地区", "Station": "站点", "Feature": "功能",
    "Item": "项目", "Qty": "数量", "Unit price": "单价", "Amount": "金额", "Line": "产品线", "Hydraulic": "液压",
    "Electrical": "电气", "Q1": "一季度", "Q2": "二季度", "H1": "上半年", "H2": "下半年", "Plan": "计划",
    "Actual": "实际", "Min": "最小", "Max": "最大", "Mon": "周一", "Tue": "周二", "Wed": "周三", "Thu": "周四",
    "Fri": "周五",
}
_ZH_CAPTIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^Table (\d+): Shipments by product and period$"), r"表\1：各产品分期出货量"),
    (re.compile(r"^Regional results \(thousands\)$"), "各地区经营结果（千元）"),
    (re.compile(r"^Town profiles$"), "城镇概况"),
    (re.compile(r"^Daily rainfall \(mm\); blank where not reported$"), "每日降雨量（mm）；空白表示未报告"),
    (re.compile(r"^Plan comparison$"), "版本功能对比"),
)


def localize_table(table: Table, language: str) -> Table:
    """The table with its words and caption in ``language`` (``zh``: Simplified Chinese; ``en``: as is).
    Spans, numbers and the grid are unchanged, so the table stays verified."""
    if language != "zh":
        return table
    rows = tuple(tuple(replace(c, text=_ZH_WORDS.get(c.text, c.text)) for c in row) for row in table.rows)
    caption = table.caption
    for pattern, repl in _ZH_CAPTIONS:
        caption = pattern.sub(repl, caption)
    return replace(table, rows=rows, caption=caption)
