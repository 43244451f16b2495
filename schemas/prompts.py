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
    # caption: a figure's crop (pipelines/instruct/tasks.py), answered with the caption printed under it
    ("caption", "en"): "Write a caption for this figure.",
    ("caption", "zh"): "为这幅图写一条图注。",
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


# Full-page parsing per response convention (pipelines/instruct/conventions.py), English and Chinese.
_BOX_EN = "Give each element's bounding box as <x_..><y_..> top-left and bottom-right corners on a 1024x1280 grid"
_BOX_ZH = "每个元素用 <x_..><y_..> 给出左上角和右下角坐标（1024x1280 网格）"
CONVENTION_PROMPTS: dict[tuple[str, str], str] = {
    ("markdown", "en"): PROMPTS[("parse_page", "en")],
    ("markdown", "zh"): PROMPTS[("parse_page", "zh")],
    ("plain", "en"): "Transcribe the text of this page as plain text, in reading order, without any formatting.",
    ("plain", "zh"): "按阅读顺序将此页面的文字转写为纯文本，不加任何格式。",
    ("markdown_tables", "en"): "Convert this document page to Markdown. Write equations in LaTeX with \\( \\) "
                               "and \\[ \\], and tables as Markdown pipe tables.",
    ("markdown_tables", "zh"): "将此文档页面转换为 Markdown。公式使用 \\( \\) 和 \\[ \\] 包裹的 LaTeX，"
                               "表格使用 Markdown 管道表格。",
    ("latex_tables", "en"): "Convert this document page to Markdown. Write equations in LaTeX with \\( \\) "
                            "and \\[ \\], and tables as LaTeX tabular environments.",
    ("latex_tables", "zh"): "将此文档页面转换为 Markdown。公式使用 \\( \\) 和 \\[ \\] 包裹的 LaTeX，"
                            "表格使用 LaTeX tabular 环境。",
    ("nemotron_md_bbox_cls", "en"): f"Parse this page into its elements in reading order. {_BOX_EN}, the "
                                    "element's Markdown between them, then its class as <class_..>.",
    ("nemotron_md_bbox_cls", "zh"): f"按阅读顺序将此页面解析为元素。{_BOX_ZH}，"
                                    "其间为元素的 Markdown 内容，随后用 <class_..> 给出类别。",
    ("nemotron_plain_bbox", "en"): f"Transcribe this page's text blocks in reading order as plain text. {_BOX_EN}, "
                                   "the block's text between them.",
    ("nemotron_plain_bbox", "zh"): f"按阅读顺序将此页面的文字块转写为纯文本。{_BOX_ZH}，其间为该块的文字。",
    ("nemotron_bbox_cls", "en"): f"Detect the layout elements of this page in reading order. {_BOX_EN}, then "
                                 "the element's class as <class_..>; no text.",
    ("nemotron_bbox_cls", "zh"): f"按阅读顺序检测此页面的版面元素。{_BOX_ZH}，随后用 <class_..> 给出类别，不输出文字。",
    ("json_layout", "en"): "Return this page's layout as JSON: {\"width\", \"height\", \"elements\": [{\"class\", "
                           "\"bbox\": [x0, y0, x1, y1] in pixels, \"text\"}]} in reading order.",
    ("json_layout", "zh"): "以 JSON 返回此页面的版面：{\"width\", \"height\", \"elements\": [{\"class\", "
                           "\"bbox\": [x0, y0, x1, y1]（像素）, \"text\"}]}，按阅读顺序。",
}
# CommonForms (pipelines/sources/elements.py): form-field detection, answered as
# {"fields": [{"type", "bbox"}]} on a 0-1000 grid, in reading order; the reader's default instruction.
FORM_FIELD_PROMPTS: dict[str, str] = {
    "en": "Find the fillable fields of this form. Answer with JSON only: {\"fields\": [{\"type\": \"text\" | "
          "\"checkbox\" | \"signature\", \"bbox\": [x0, y0, x1, y1]}]}, boxes on a 0-1000 grid of the page "
          "(top-left origin), fields in reading order (top to bottom, then left to right).",
    "zh": "找出此表格中所有可填写的字段。只回答 JSON：{\"fields\": [{\"type\": \"text\" | \"checkbox\" | "
          "\"signature\", \"bbox\": [x0, y0, x1, y1]}]}，坐标为页面上 0-1000 的网格（原点在左上角），"
          "字段按阅读顺序排列（从上到下，再从左到右）。",
}
# Key information extraction: the JSON schema of the fields goes where {schema} is.
KIE_PROMPTS: dict[str, str] = {
    "en": "Extract the key information from this document. Answer with JSON only, valid against this "
          "JSON schema: {schema}",
    "zh": "提取此文档中的关键信息。只回答 JSON，且须符合以下 JSON Schema：{schema}",
}


def convention_instruction(convention: str, language: str = "en") -> str:
    """The bank's full-page prompt for a response convention; ``ValueError`` when it has none."""
    try:
        return CONVENTION_PROMPTS[(convention, language)]
    except KeyError:
        raise ValueError(f"no prompt for convention {convention!r} in language {language!r}") from None
