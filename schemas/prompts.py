"""Instructions: the prompt bank, English and Chinese, one assigned prompt per dataset (Jina 4.3).

Read by the corpus config (a source's default ``instruction``), by ``synth`` (synthetic pages) and
by the model's tests; a leaf module so that none of them imports another for it.
"""

from __future__ import annotations

PROMPTS: dict[tuple[str, str], str] = {
    ("parse_page", "en"): "Convert this document page to Markdown. "
                          "Write equations in LaTeX with \\( \\) and \\[ \\], and tables in HTML.",
    ("parse_page", "zh"): "将此文档页面转换为 Markdown。公式使用 \\( \\) 和 \\[ \\] 包裹的 LaTeX，表格使用 HTML。",
    ("transcribe_table", "en"): "Transcribe the table in this image as an HTML table.",
    ("transcribe_table", "zh"): "将图中的表格转写为 HTML 表格。",
    ("transcribe_formula", "en"): "Transcribe the formula in this image in LaTeX.",
    ("transcribe_formula", "zh"): "将图中的公式转写为 LaTeX。",
    ("caption", "en"): "Describe this image in one paragraph.",
    ("caption", "zh"): "用一段话描述这张图片。",
    # chart_to_table and kie: the element-level readers' defaults (pipelines/sources/elements.py)
    ("chart_to_table", "en"): "Extract the data shown in this chart as an HTML table.",
    ("chart_to_table", "zh"): "将图表中的数据提取为 HTML 表格。",
    ("kie", "en"): "Extract the key information from this document as JSON.",
    ("kie", "zh"): "以 JSON 格式提取此文档中的关键信息。",
}


def default_instruction(task: str, language: str = "en") -> str:
    """The bank's prompt for ``task`` in ``language``; ``ValueError`` when it has none."""
    try:
        return PROMPTS[(task, language)]
    except KeyError:
        raise ValueError(f"no default prompt for task {task!r} in language {language!r}") from None
