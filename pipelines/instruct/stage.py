"""The ``instruct`` stage: each page's prompt and response convention, and the records derived from it.

Per ``parse_page`` record (Markdown response): the response convention comes from the record's
source (``assign``: one per dataset) or from a draw seeded by ``seed`` and the record id over the
``conventions`` weights, limited to the conventions that apply to the record (boxes need
``elements``, table conventions a table; ``markdown`` when none does). The response is rewritten
(``pipelines.instruct.conventions``), the unit tests keep the types the convention keeps and that
pass on the rewrite as consumers score it (``kept_tests``), and the instruction is the convention's
prompt in English or Chinese (Chinese pages always, others at ``zh_prompt_share``), or for a
``dynamic_share`` of records a dynamic per-image prompt (``pipelines.instruct.dynamic``). Then the
page's element crops, KIE and VQA records follow (``pipelines.instruct.tasks``). Every output records
its choice in ``metadata["instruct"]`` (``convention``, ``prompt_language``, ``dynamic``) and counts
``task:<task>``, ``convention:<c>``, ``prompt:<lang>`` and ``dynamic`` in the manifest's counters.
A ``parse_page`` record with a plain-text response (``response_format: text``: historical OCR and
transcriptions) keeps its response and gets the ``plain`` convention's prompt (or a dynamic one with the
``plain`` directive), counted as above with ``convention:plain``; it has no derived records. Records of other
tasks or formats pass through with their counters.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace

from pipelines.instruct.conventions import CONVENTIONS, FORMULA_CONVENTION, applicable, kept_tests, rewrite
from pipelines.instruct.dynamic import dynamic_instruction
from pipelines.instruct.tasks import CROP_TASKS, crop_records, kie_record, vqa_records
from schemas.config import check_names, option
from schemas.math_unit_tests import katex_inputs, run_cache_dir
from schemas.page import PageRecord, ProvenanceStep, params_hash
from schemas.prompts import convention_instruction

VERSION = "6"  # 2: plain keeps formulas, nested tables, unique VQA; 3: kept tests pass on the checkable
# text, a nested table's text is its outer cell's (schemas.tables); 4: plain writes <br> and block tags as
# line breaks, <sup>/<sub> as ^/_, entities as characters, strips real tags only; table cells keep bold/italic;
# 5: caption crops stop short of the caption and ask for one ("Write a caption for this figure."); crop responses
# in their task's corpus form (formulas bare LaTeX via the conventions stage's rewrite_formula, no math tests;
# no trailing newline); plain-text parse_page records get the plain convention's prompt; 6: formula crops are
# convention latex_formula and keep their formula's math tests, read as a display equation (checkable), and so
# are the corpus's own formula records (the GRPO formula term reads them so)


@dataclass(frozen=True)
class InstructConfig:
    conventions: dict[str, float] = option({"markdown": 1.0}, help="convention -> weight of the per-record "
                                           f"seeded draw; known: {', '.join(CONVENTIONS)}")
    assign: dict[str, str] = option({}, help="source name -> its one convention (per dataset; overrides the draw)")
    zh_prompt_share: float = option(0.0, help="share of non-Chinese records given the Chinese prompt")
    dynamic_share: float = option(0.0, help="share of records given a dynamic per-image instruction")
    crops: tuple[str, ...] = option(("table", "formula", "picture"),
                                    help="element classes cropped into their own records (picture: caption); "
                                         f"known: {', '.join(CROP_TASKS)}")
    max_crops: int = option(2, help="element crops per page at most (drawn seeded when a page has more)")
    kie: bool = option(True, help="a KIE record for pages with known fields (metadata.fields)")
    vqa_per_page: int = option(2, help="VQA records per page with fields or headed tables (0: none)")
    seed: int = option(0, help="seed of the draws (convention, prompt language, dynamic, VQA)")

    def __post_init__(self) -> None:
        check_names("conventions", [*self.conventions, *self.assign.values()], CONVENTIONS)
        # the element classes (schemas.layout.ELEMENT_CLASSES) that have a crop record: a misspelt one crops nothing
        check_names("crops", self.crops, CROP_TASKS)
        if not self.conventions or any(w < 0 for w in self.conventions.values()) or \
                not sum(self.conventions.values()) > 0:
            raise ValueError("conventions needs at least one positive weight and none negative")
        for name in ("zh_prompt_share", "dynamic_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        object.__setattr__(self, "crops", tuple(self.crops))


def _count(record: PageRecord, convention: str | None, language: str | None, dynamic: bool) -> PageRecord:
    counters = {f"task:{record.task}": 1, **({f"prompt:{language}": 1} if language else {}),
                **({"dynamic": 1} if dynamic else {})}
    if convention:
        counters[f"convention:{convention}"] = 1
    record.quality["instruct"] = {"counters": counters}
    record.metadata["instruct"] = {"convention": convention, "prompt_language": language, "dynamic": dynamic}
    return record


class InstructStage:
    """Each parse_page record's response convention and prompt, plus its crop, KIE and VQA records."""

    name = "instruct"

    def __init__(self, cfg: InstructConfig = InstructConfig()):
        self.cfg = cfg
        self._step = ProvenanceStep(f"instruct:{self.name}", VERSION, params_hash(asdict(cfg)))
        self._katex_cache: str | None = None  # bind_output: the run's; None: the default cache

    resolved_inputs = staticmethod(katex_inputs)  # the installed KaTeX: math tests re-checked on each rewrite

    def bind_output(self, output: str) -> None:
        """Renders of the labels' formulas (``math`` tests re-checked on a rewrite) are cached in the run's
        output (``run_cache_dir``), never the user's home. Called before any record."""
        if output:
            self._katex_cache = run_cache_dir(output)

    def _rng(self, record: PageRecord, what: str) -> random.Random:
        return random.Random(f"{what}:{self.cfg.seed}:{record.id}")

    def convention(self, record: PageRecord) -> str:
        """The record's convention: its source's assigned one, else the seeded draw among those that apply."""
        fixed = self.cfg.assign.get(record.source)
        if fixed and applicable(fixed, record.response, record.elements):
            return fixed
        if fixed:
            return "markdown"
        options = [(c, w) for c, w in self.cfg.conventions.items()
                   if w > 0 and applicable(c, record.response, record.elements)]
        if not options:
            return "markdown"
        names, weights = zip(*options)
        return self._rng(record, "convention").choices(names, weights)[0]

    def prompt_language(self, record: PageRecord) -> str:
        if record.language.split("-")[0] == "zh":
            return "zh"
        return "zh" if self._rng(record, "prompt").random() < self.cfg.zh_prompt_share else "en"

    def is_dynamic(self, record: PageRecord) -> bool:
        return self._rng(record, "dynamic").random() < self.cfg.dynamic_share

    def _instruction(self, record: PageRecord, convention: str, language: str, dynamic: bool) -> str:
        return (dynamic_instruction("parse_page", convention, language, record.language, record.elements,
                                    record.response, f"{self.cfg.seed}:{record.id}")
                if dynamic else convention_instruction(convention, language))

    def _plain_text_page(self, record: PageRecord) -> PageRecord:
        """A plain-text transcription: its response as it is, the ``plain`` convention's prompt."""
        language, dynamic = self.prompt_language(record), self.is_dynamic(record)
        page = replace(record, instruction=self._instruction(record, "plain", language, dynamic),
                       provenance=[*record.provenance, self._step])
        return _count(page, "plain", language, dynamic)

    def __call__(self, record: PageRecord) -> list[PageRecord]:
        if record.task == "parse_page" and record.response_format == "text":
            return [self._plain_text_page(record)]
        if record.task != "parse_page" or record.response_format != "markdown":
            # a formula record (LaTeX-OCR, UniMER) answers one bare formula, as a formula crop does
            convention = FORMULA_CONVENTION if record.task == "transcribe_formula" else None
            return [_count(record, convention, None, False)]
        language = self.prompt_language(record)
        derived = []
        if self.cfg.crops and record.elements:
            derived += crop_records(record, self.cfg.crops, language=language, limit=self.cfg.max_crops,
                                    seed=self.cfg.seed)
        if self.cfg.kie:
            kie = kie_record(record, language)
            derived += [kie] if kie is not None else []
        if self.cfg.vqa_per_page:
            derived += vqa_records(record, self.cfg.vqa_per_page, self.cfg.seed, language)
        convention = self.convention(record)
        out = rewrite(convention, record.response, record.elements, record.width, record.height)
        kept = record.unit_tests if convention == "markdown" else kept_tests(convention, record.unit_tests,
                                                                             out.response, self._katex_cache)
        dynamic = self.is_dynamic(record)
        instruction = self._instruction(record, convention, language, dynamic)
        page = replace(record, response=out.response, response_format=out.response_format, instruction=instruction,
                       unit_tests=kept, provenance=[*record.provenance, self._step])
        results = [_count(page, convention, language, dynamic)]
        for rec in derived:
            dyn = rec.task != "kie" and rec.task != "vqa" and self.is_dynamic(rec)
            if dyn:
                rec = replace(rec, instruction=dynamic_instruction(rec.task, None, language, rec.language, [],
                                                                   rec.response, f"{self.cfg.seed}:{rec.id}"))
            rec = replace(rec, provenance=[*record.provenance, self._step])
            convention = FORMULA_CONVENTION if rec.task == "transcribe_formula" else None
            results.append(_count(rec, convention, language, dyn))
        return results
