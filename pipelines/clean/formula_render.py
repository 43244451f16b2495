"""Formula render check: drop formula labels KaTeX cannot render (reasons ``katex_error``,
``katex_timeout``, ``formula_too_large``: ``schemas.math_render`` says when).

Formula crops (LaTeX-OCR, UniMER: task ``transcribe_formula``, ``response_format: latex``) carry
labels written for LaTeX, some with macros or environments KaTeX does not know; a label that cannot
be rendered cannot be scored by the formula reward either. The check renders the label with the
project's KaTeX in Chromium (``schemas.math_render``, the renderer of the ``math`` unit test:
``displayMode``, ``throwOnError``, results cached in SQLite), after the ``conventions`` stage has
normalised it. Records of other tasks pass untouched; ``quality["formula_render"]`` holds
``{"ok": true}`` or the KaTeX message of a dropped one (in ``dropped/`` samples).

The cache holds every (untrusted) label rendered, so in a run it lives in the run's output,
``<output>/_katex/renders.sqlite3`` (``bind_output``, called by the corpus DAG and ``python -m
pipelines.stage``; an object-store output renders without a cache), never in the user's ``~/.cache``.
Unbound (a direct call), the stage uses the ``math`` unit test's default cache.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from schemas.config import check_names, option
from schemas.deadletter import Dropped, RecordError
from schemas.math_unit_tests import katex_inputs, run_cache_dir
from schemas.page import TASKS, PageRecord, ProvenanceStep, params_hash

# 2: KaTeX refuses commands needing trust (\href, \url, \includegraphics, \html...), expands macros at most
#    500 times and caps a rendering's size (formula_too_large); a formula past its deadline is katex_timeout
VERSION = "2"


@dataclass(frozen=True)
class FormulaRenderConfig:
    """Which records are render-checked."""

    tasks: tuple[str, ...] = option(("transcribe_formula",), help="tasks whose (latex) response is one formula")

    def __post_init__(self) -> None:
        check_names("tasks", self.tasks, TASKS)  # a misspelt task would check no record


class FormulaRenderStage:
    """Drops formula records whose LaTeX KaTeX cannot render (reason ``katex_error``)."""

    name = "formula_render"

    def __init__(self, cfg: FormulaRenderConfig = FormulaRenderConfig()):
        self.cfg = cfg
        self._provenance = ProvenanceStep(f"clean:{self.name}", VERSION, params_hash(asdict(cfg)))
        self._renderer: Any = None  # per worker, on first use
        self._cache_dir: str | None = None  # bind_output: the run's; None: the default cache

    # the installed KaTeX: a run without it dead-letters every formula record; a refresh after installing or
    # upgrading it must render them again, not carry the old verdicts
    resolved_inputs = staticmethod(katex_inputs)

    def bind_output(self, output: str) -> None:
        """Render behind a cache under the run's output (``<output>/_katex``), not the user's home; an
        object-store output (where SQLite cannot live) renders without a cache. Called before any record."""
        if output:
            self._cache_dir = run_cache_dir(output)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_renderer"] = None
        return state

    def _render(self, latex: str):
        if self._renderer is None:
            from schemas.math_render import default_renderer  # Chromium only where formulas are checked

            if self._cache_dir is None:
                self._renderer = default_renderer()
            else:  # the run's cache ("": in memory)
                self._renderer = default_renderer(self._cache_dir or None, use_cache=bool(self._cache_dir))
        return self._renderer.render(latex)

    def __call__(self, record: PageRecord) -> list[PageRecord]:
        if record.task not in self.cfg.tasks:
            return [record]
        if record.response_format != "latex":
            raise RecordError("bad_response_format", f"a {record.task} record must have response_format latex, "
                                                     f"got {record.response_format!r}")
        if not record.response.strip():
            raise Dropped("empty_formula")
        rendered = self._render(record.response)
        if not rendered.ok:
            record.quality[self.name] = {"ok": False, "error": rendered.error}
            # the renderer's reason: katex_error, katex_timeout (past its deadline), formula_too_large
            raise Dropped(getattr(rendered, "reason", None) or "katex_error")
        record.quality[self.name] = {"ok": True}
        record.provenance.append(self._provenance)
        return [record]
