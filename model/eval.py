"""Greedy evaluation on the eval split, scored with the `schemas` unit tests and similarity metrics.

Each eval page is decoded greedily; the prediction is scored against the reference with the
normalized edit distance (`schemas.similarity`) and against the page's olmOCR-style unit tests
(`schemas.unit_tests`), which read the prediction as the record's response convention has them read
it (`pipelines.instruct.conventions.checkable`: a box stream's texts, say). The report keeps one row
per page (the input of `model.errors`) and a table per domain and per test type. Pages are read with no
sample-token cap (`model.data.uncapped`); pages skipped all the same (a corrupt image, a bad record) are
counted in the summary with their unit tests (``skipped_pages``, ``skipped_tests``, ``skipped``). Quantities
with nothing to average (the pass rate of pages without tests) are NaN in memory and null in the JSON
(``json_safe``, ``dumps``). ``python -m model.eval --help``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from tqdm import tqdm

from model.models import Loaded, load_or_exit
from model.processing import Encoded
from pipelines.instruct.conventions import checkable
from schemas.similarity import normalized_edit_distance
from schemas.unit_tests import unit_test_from_json


@dataclass
class EvalRow:
    id: str
    source: str
    domain: str
    task: str
    prediction: str
    reference: str
    edit_distance: float
    tests: list[dict] = field(default_factory=list)  # {"type", "passed", "explanation"}
    nll: float | None = None  # teacher-forced mean negative log-likelihood per response token; None: not measured


@dataclass
class EvalReport:
    rows: list[EvalRow]
    summary: dict[str, float]
    by_domain: dict[str, dict[str, float]]
    by_test_type: dict[str, dict[str, float]]
    by_domain_test_type: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"summary": self.summary, "by_domain": self.by_domain, "by_test_type": self.by_test_type,
                "by_domain_test_type": self.by_domain_test_type, "rows": [asdict(r) for r in self.rows]}


def prompt_inputs(encoded: Encoded, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Model inputs for the prompt part of an encoded sample (batch of one)."""
    ids = encoded.input_ids[: encoded.prompt_len][None].to(device)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": encoded.mm_token_type_ids[: encoded.prompt_len][None].to(device),
        "pixel_values": encoded.pixel_values.to(device),
        "image_grid_thw": encoded.image_grid_thw.to(device),
    }


@torch.no_grad()
def greedy(loaded: Loaded, encoded: Encoded, max_new_tokens: int) -> list[int]:
    """The verifier's plain greedy continuation of the prompt (transformers' generate)."""
    model = loaded.model
    device = next(model.parameters()).device
    inputs = prompt_inputs(encoded, device)
    out = model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens,
                         eos_token_id=loaded.processor.eos_token_id,
                         pad_token_id=loaded.processor.tokenizer.pad_token_id)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


@torch.no_grad()
def greedy_batch(loaded: Loaded, encoded: list[Encoded], max_new_tokens: int) -> list[list[int]]:
    """Plain greedy continuations of several prompts in one ``generate`` call (left padding).

    Each row is cut after its first end-of-turn token, so it equals what `greedy` returns for that
    prompt alone (tests/model/test_eval.py checks it token for token)."""
    if len(encoded) == 1:
        return [greedy(loaded, encoded[0], max_new_tokens)]
    model, proc = loaded.model, loaded.processor
    device = next(model.parameters()).device
    pad, eos = proc.tokenizer.pad_token_id, proc.eos_token_id
    width = max(e.prompt_len for e in encoded)
    ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    mm = torch.zeros_like(ids)
    for i, e in enumerate(encoded):
        n = e.prompt_len
        ids[i, width - n:] = e.input_ids[:n]
        mask[i, width - n:] = 1
        mm[i, width - n:] = e.mm_token_type_ids[:n]
    out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), mm_token_type_ids=mm.to(device),
                         pixel_values=torch.cat([e.pixel_values for e in encoded]).to(device),
                         image_grid_thw=torch.cat([e.image_grid_thw for e in encoded]).to(device),
                         do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad)
    rows = []
    for row in out[:, width:].tolist():
        rows.append(row[: row.index(eos) + 1] if eos in row else row)
    return rows


NLL_CHUNK = 1024  # response positions whose logits response_nll holds at once


@torch.no_grad()
def response_nll(loaded: Loaded, encoded: Encoded) -> float:
    """Mean next-token NLL of the reference response given the page (teacher forcing).

    Greedy transcriptions of a tiny model are all poor, and normalized edit distance then rewards
    long junk over short text; the likelihood of the reference says directly whether training moved
    the model towards the data.
    """
    from model.models import rope_index
    from model.sft import target_positions

    model = loaded.model
    device = next(model.parameters()).device
    ids = encoded.input_ids[None].to(device)
    mm = encoded.mm_token_type_ids[None].to(device)
    labels = ids.clone()
    labels[:, : encoded.prompt_len] = -100
    keep = target_positions(labels)
    # The decoder's hidden states, then the vocabulary projection NLL_CHUNK positions at a time: eval reads pages
    # of any length, and one pass over all logits (positions x vocabulary, in fp32) of a 20k-token page with a
    # 152k vocabulary would take ~12 GB.
    hidden = model.model(input_ids=ids, mm_token_type_ids=mm, pixel_values=encoded.pixel_values.to(device),
                         image_grid_thw=encoded.image_grid_thw.to(device),
                         position_ids=rope_index(model, ids, mm, encoded.image_grid_thw.to(device))
                         ).last_hidden_state[0, keep]
    targets = labels[0, keep + 1]
    total = 0.0
    for start in range(0, len(keep), NLL_CHUNK):
        logits = model.lm_head(hidden[start:start + NLL_CHUNK]).float()
        total += float(torch.nn.functional.cross_entropy(logits, targets[start:start + NLL_CHUNK], reduction="sum"))
    return total / max(1, len(keep))


def image_gap(loaded: Loaded, samples: list) -> float:
    """Mean reference NLL with the next sample's image minus with the sample's own: 0 for a model that
    does not look at the page, however low its NLL (issue 22). The samples' images must share one size
    (a curriculum level), so the image tokens line up."""
    from dataclasses import replace

    with torch.no_grad():
        own = [response_nll(loaded, s.encoded) for s in samples]
        other = [response_nll(loaded, replace(s.encoded, pixel_values=samples[(i + 1) % len(samples)]
                                              .encoded.pixel_values)) for i, s in enumerate(samples)]
    return (sum(other) - sum(own)) / len(samples)


def score_prediction(prediction: str, reference: str, unit_tests: Iterable[str],
                     convention: str | None = None) -> tuple[float, list[dict]]:
    """Edit distance to the reference and each unit test's result. The tests read the prediction's
    ``checkable`` text under the record's response ``convention`` (a box stream's texts, ...)."""
    tests = []
    text = checkable(convention, prediction)
    for raw in unit_tests:
        test = unit_test_from_json(raw)
        passed, why = test.check(text)
        tests.append({"type": str(getattr(test, "type", type(test).__name__)), "passed": bool(passed),
                      "explanation": why})
    return normalized_edit_distance(prediction, reference), tests


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (NaN: nothing to average; inf) as None, through dicts,
    lists and tuples: JSON has no NaN, and ``json.dumps`` would write a bare ``NaN`` no strict parser reads."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """Strict JSON of ``value`` (``json_safe``: NaN and inf as null; ``allow_nan=False``)."""
    return json.dumps(json_safe(value), allow_nan=False, **kwargs)


def skip_summary(sources: Sequence) -> dict[str, Any]:
    """Pages skipped by ``sources`` (``model.data.SampleSource``) and their unit tests, in all and per reason."""
    pages: dict[str, int] = defaultdict(int)
    tests: dict[str, int] = defaultdict(int)
    for src in sources:
        for reason, n in src.skipped.items():
            pages[reason] += n
            tests[reason] += src.skipped_tests.get(reason, 0)
    return {"skipped_pages": sum(pages.values()), "skipped_tests": sum(tests.values()),
            "skipped": {r: {"pages": pages[r], "tests": tests[r]} for r in sorted(pages)}}


def evaluate(loaded: Loaded, samples: Iterable, max_new_tokens: int = 256, progress: bool = True,
             batch_size: int = 1, sources: Sequence = ()) -> EvalReport:
    """Decode and score every sample (``model.data.Sample``), ``batch_size`` prompts per ``generate``.

    The report's ``summary`` carries ``pages_per_s`` (decoding and scoring, wall time) and the pages the
    ``sources`` that produced ``samples`` skipped, with their unit tests (``skip_summary``)."""
    import time

    loaded.model.eval()
    rows = []
    pending = iter(samples)  # one batch of encoded pages in memory at a time (~2 MB of pixels a page)
    t0 = time.perf_counter()
    bar = tqdm(desc="eval", disable=not progress, leave=False)
    while chunk := list(itertools.islice(pending, max(1, batch_size))):
        for s, ids in zip(chunk, greedy_batch(loaded, [s.encoded for s in chunk], max_new_tokens)):
            prediction = loaded.processor.decode(ids)
            ed, tests = score_prediction(prediction, s.response, s.unit_tests or [], s.convention)
            rows.append(EvalRow(s.id, s.source, s.domain, s.task, prediction, s.response,
                                ed, tests, response_nll(loaded, s.encoded)))
        bar.update(len(chunk))
    bar.close()
    report = summarize(rows)
    report.summary["pages_per_s"] = len(rows) / max(1e-9, time.perf_counter() - t0)
    report.summary.update(skip_summary(sources))
    return report


def summarize(rows: list[EvalRow]) -> EvalReport:
    def agg(selected: list[EvalRow]) -> dict[str, float]:
        tests = [t for r in selected for t in r.tests]
        nlls = [r.nll for r in selected if r.nll is not None]
        return {"pages": len(selected),
                "nll": sum(nlls) / len(nlls) if nlls else float("nan"),
                "edit_distance": sum(r.edit_distance for r in selected) / max(1, len(selected)),
                "tests": len(tests),
                "unit_test_pass_rate": sum(t["passed"] for t in tests) / len(tests) if tests else float("nan")}

    by_domain = defaultdict(list)
    for r in rows:
        by_domain[r.domain].append(r)
    by_type: dict[str, list[bool]] = defaultdict(list)
    by_domain_type: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        for t in r.tests:
            by_type[t["type"]].append(t["passed"])
            by_domain_type[r.domain][t["type"]].append(t["passed"])

    def rates(groups: dict[str, list[bool]]) -> dict[str, dict[str, float]]:
        return {t: {"tests": len(v), "unit_test_pass_rate": sum(v) / len(v)} for t, v in sorted(groups.items())}

    return EvalReport(
        rows=rows,
        summary=agg(rows),
        by_domain={d: agg(rs) for d, rs in sorted(by_domain.items())},
        by_test_type=rates(by_type),
        by_domain_test_type={d: rates(g) for d, g in sorted(by_domain_type.items())},
    )


def format_report(report: EvalReport, title: str = "eval") -> str:
    s = report.summary
    lines = [f"{title}: {s['pages']} pages, response NLL {s['nll']:.3f}, edit distance {s['edit_distance']:.3f}, "
             f"unit tests {_rate(s)} of {s['tests']}",
             f"  {'domain':<26}{'pages':>6}{'NLL':>8}{'edit dist':>11}{'tests':>7}{'pass':>8}"]
    for d, a in report.by_domain.items():
        lines.append(f"  {d:<26}{a['pages']:>6}{a['nll']:>8.3f}{a['edit_distance']:>11.3f}{a['tests']:>7}{_rate(a):>8}")
    if report.by_test_type:
        lines.append(f"  {'test type':<26}{'':>6}{'':>8}{'':>11}{'tests':>7}{'pass':>8}")
        for t, a in report.by_test_type.items():
            lines.append(f"  {t:<26}{'':>6}{'':>8}{'':>11}{a['tests']:>7}{_rate(a):>8}")
    if len(report.by_domain_test_type) > 1:
        lines.append("  pass rate by domain and test type:")
        for d, types in report.by_domain_test_type.items():
            lines.append(f"    {d:<24}" + "  ".join(f"{t} {_rate(a)}" for t, a in types.items()))
    if s.get("skipped_pages"):
        lines.append(f"  skipped: {s['skipped_pages']} pages holding {s['skipped_tests']} unit tests (not scored): "
                     + ", ".join(f"{r} {a['pages']} pages / {a['tests']} tests" for r, a in s["skipped"].items()))
    if "pages_per_s" in s:
        lines.append(f"  decoding: {s['pages_per_s']:.2f} pages/s (batched greedy)")
    return "\n".join(lines)


def compare(before: EvalReport, after: EvalReport) -> str:
    """One line: does the trained model beat the untrained one on the eval pages, metric by metric."""
    b, a = before.summary, after.summary
    nll = a["nll"] < b["nll"]
    ed = a["edit_distance"] < b["edit_distance"]
    tests = a.get("unit_test_pass_rate", 0) > b.get("unit_test_pass_rate", 0)
    verdict = "beats" if nll else "does NOT beat"
    return (f"trained model {verdict} the untrained one on reference likelihood: response NLL {b['nll']:.3f} -> "
            f"{a['nll']:.3f}; greedy edit distance {b['edit_distance']:.3f} -> {a['edit_distance']:.3f} "
            f"({'better' if ed else 'not better'}), unit tests {_rate(b)} -> {_rate(a)} "
            f"({'better' if tests else 'not better'})")


def _rate(a: dict) -> str:
    r = a.get("unit_test_pass_rate", float("nan"))
    return "-" if r != r else f"{r:.0%}"


def main(argv: list[str] | None = None) -> None:
    from model.data import DataConfig, eval_samples, uncapped
    from model.records import EVAL_FRACTION_HELP, cli_eval_fraction, fraction_arg

    ap = argparse.ArgumentParser(prog="python -m model.eval",
                                 description="Greedy-decode the eval split and score it with schemas tests.")
    ap.add_argument("--model", required=True, help="'tiny', 'tiny-moe' or a local checkpoint folder")
    ap.add_argument("--corpus", default="out/corpus", help="corpus folder with data/*.parquet")
    ap.add_argument("--eval-fraction", type=fraction_arg, help=EVAL_FRACTION_HELP)
    ap.add_argument("--limit", type=int, default=None, help="at most this many eval pages")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--out", help="write the report JSON here")
    args = ap.parse_args(argv)
    loaded = load_or_exit(ap, args.model)
    fraction = cli_eval_fraction(args.corpus, args.eval_fraction)
    sources: list = []
    samples = eval_samples(uncapped(DataConfig(path=args.corpus, eval_fraction=fraction)), loaded.processor,
                           limit=args.limit, sources=sources)
    report = evaluate(loaded, samples, args.max_new_tokens, sources=sources)
    print(format_report(report, f"eval {args.model} (eval_fraction {fraction:g})"))
    if args.out:
        Path(args.out).write_text(dumps(report.to_json(), indent=2))


if __name__ == "__main__":
    main()
