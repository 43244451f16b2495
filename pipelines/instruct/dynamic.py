"""Dynamic per-image instructions: composed from what the page actually shows (Jina-OCR-v1 4.3).

``dynamic_instruction`` writes a prompt for one record from its content and its response
convention: a sentence naming the page's language and the elements it holds (from its
``elements``, or its response's tables and display formulas when it has no boxes, formulas as
``pipelines.clean.conventions`` finds them: ``\\[12\\]`` is a citation, not math) or, for an element
crop, the element kind (GLM-OCR's region prompts ``Table Recognition:`` / ``Formula Recognition:``
among the variants), then the convention's directive. Seeded by the record id, so a rerun writes
the same prompt; which records get one is drawn by ``pipelines.instruct.stage`` (``dynamic_share``).
"""

from __future__ import annotations

import random

from pipelines.clean.conventions import find_formulas
from schemas.layout import Element
from schemas.prompts import CONVENTION_PROMPTS, PROMPTS

# page languages by their ISO 639-1 code (a record's BCP 47 tag up to its first "-": zh-Hant is zh)
_LANG = {"en": {"en": "English", "zh": "Chinese", "fr": "French", "de": "German", "ja": "Japanese",
                "es": "Spanish", "it": "Italian", "pt": "Portuguese", "nl": "Dutch", "ru": "Russian", "ko": "Korean"},
         "zh": {"en": "英文", "zh": "中文", "fr": "法文", "de": "德文", "ja": "日文", "es": "西班牙文",
                "it": "意大利文", "pt": "葡萄牙文", "nl": "荷兰文", "ru": "俄文", "ko": "韩文"}}
_NAMES = {"en": {"table": ("table", "tables"), "formula": ("formula", "formulas"), "picture": ("figure", "figures"),
                 "list_item": ("list item", "list items"), "section_header": ("section heading", "section headings"),
                 "footnote": ("footnote", "footnotes")},
          "zh": {"table": "表格", "formula": "公式", "picture": "插图", "list_item": "列表项",
                 "section_header": "小节标题", "footnote": "脚注"}}
_REGION = {"transcribe_table": ("Table Recognition:", "表格识别："),
           "transcribe_formula": ("Formula Recognition:", "公式识别：")}


def _counts(elements: list[Element], response: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    if elements:
        for el in elements:
            counts[el.cls] = counts.get(el.cls, 0) + 1
    else:
        counts["table"] = response.lower().count("<table")
        counts["formula"] = sum(f.display for f in find_formulas(response))
    return {k: v for k, v in counts.items() if v and k in _NAMES["en"]}


def _content_sentence(counts: dict[str, int], language: str, page_language: str, rng: random.Random) -> str:
    if language == "zh":
        lang = _LANG["zh"].get(page_language.split("-")[0], "")
        parts = [f"{n} 个{_NAMES['zh'][k]}" for k, n in counts.items()]
        head = f"这是一页{lang}文档" if lang else "这是一页文档"
        return head + ("，包含" + "、".join(parts) if parts else "") + "。"
    lang = _LANG["en"].get(page_language.split("-")[0], "")
    parts = [f"{n} {_NAMES['en'][k][n != 1]}" for k, n in counts.items()]
    opener = rng.choice(["This document page is in {lang}", "The image shows a page in {lang}",
                         "Here is a page written in {lang}"]).format(lang=lang) if lang else "This is a document page"
    return opener + ("; it holds " + ", ".join(parts) if parts else "") + "."


def dynamic_instruction(task: str, convention: str | None, language: str, page_language: str,
                        elements: list[Element], response: str, seed: str) -> str:
    """A per-image prompt for a record (see the module docstring)."""
    rng = random.Random(f"dynamic:{seed}")
    zh = language == "zh"
    if task in _REGION:
        base = PROMPTS[(task, language)]
        return rng.choice([_REGION[task][zh], base, f"{_REGION[task][zh]} {base}"])
    if task == "caption":
        # the response is the figure's printed caption, so every variant asks for a caption
        return rng.choice(["为这幅图写一条图注。", "这幅图的图注应当怎么写？"] if zh else
                          ["Write a caption for this figure.", "Write the caption this figure would have.",
                           "What caption belongs under this figure?"])
    directive = CONVENTION_PROMPTS[(convention or "markdown", language)]
    return _content_sentence(_counts(elements, response), language, page_language, rng) + " " + directive
