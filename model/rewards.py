"""GRPO rewards: the multiplicative composition of Jina-OCR-v1 Table 4 (section 5.3).

Each term scores one completion against its reference transcription in [0, 1], graded, and is built
on an existing metric (nothing is re-implemented here):

=============  ==================================================================================
content        1 - normalized edit distance over the mixed Markdown/LaTeX/HTML text
               (``schemas.similarity.content_similarity``)
formula        formula string matching (``formula_match``); left out when the reference has no formula; a
               formula crop (convention ``latex_formula``) is one bare formula on both sides, read as
               one display equation (``checkable``)
table          mean of ``RewardConfig.table_signals`` (default TEDS, TEDS-S, table edit similarity);
               left out when the reference has no table; TEDS under ``RewardConfig.teds_convention``
structure      brace balance, tag closure, table integrity (``structural_validity``); under a box
               convention, of the element texts (``checkable``), not of the ``<x_..>`` box tags
unit_tests     fraction of the page's olmOCR-style tests that pass (``schemas.unit_tests``) on the
               completion as its response convention is read (``RewardItem.convention``:
               ``pipelines.instruct.conventions.checkable``); left out when the page has no tests
repetition     1 - (loop length beyond its first copy) / completion length, from the cleaning
               detector (``pipelines.clean.repeats.find_loop``) with thresholds for rollouts of a few
               hundred characters (``RewardRepeatsConfig``); 1 without a loop; never floored
format         HTML conformance (``html_conformance``); under a box convention, of the element texts
=============  ==================================================================================

Total (Table 4) = prod over applicable terms of max(term, floor[term]); floors 0.2 for structure,
unit tests and format and 0.1 for table by default, so one failed check does not zero the product
of an otherwise content-correct page. Repetition is not floored: loops are what inflates content.

``score`` runs the terms in-process. ``RewardPool`` runs every (completion, term) pair in a worker
process with a per-call timeout: a term that overruns scores 0 (failure, then floored like any
failure), its worker is killed with everything it started (a KaTeX browser) and replaced, and the
caller never waits longer than about ``timeout_s`` per term. CLI::

    python -m model.rewards --input completions.jsonl [--config rewards.yaml] [--workers 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import IO, Any

from pipelines.clean.repeats import RepeatsConfig, find_loop
from pipelines.clean.repeats_config import Bands
from pipelines.instruct.conventions import BOX_CONVENTIONS, FORMULA_CONVENTION, checkable
from schemas.config import load, option, read_yaml
from schemas.similarity import DEFAULT_TEDS_CONVENTION, METRICS, TEDS_CONVENTIONS, check_teds_convention, metrics_for
from schemas.unit_tests import UnitTest, check_all, unit_test_from_dict, unit_test_from_json

# A term: (reference, completion, parsed unit tests, config) -> score in [0, 1], or None when the
# reference lacks the structure it scores (the term is left out of the product).
Term = Callable[[str, str, Sequence[UnitTest], "RewardConfig"], "float | None"]

TABLE_SIGNALS = ("teds", "teds_s", "table_edit")


def content_term(reference: str, completion: str, tests: Sequence[UnitTest], cfg: RewardConfig) -> float | None:
    return METRICS["content"](reference, completion)[0]


def formula_term(reference: str, completion: str, tests: Sequence[UnitTest], cfg: RewardConfig) -> float | None:
    return METRICS["formula"](reference, completion)[0]


def table_term(reference: str, completion: str, tests: Sequence[UnitTest], cfg: RewardConfig) -> float | None:
    """Mean of the configured table signals; None when the reference has no table (they agree on
    that: all parse the reference with ``schemas.tables``)."""
    metrics = metrics_for(cfg.teds_convention)
    scores = [metrics[name](reference, completion)[0] for name in cfg.table_signals]
    if any(s is None for s in scores):
        return None
    return sum(scores) / len(scores)


def structure_term(reference: str, completion: str, tests: Sequence[UnitTest], cfg: RewardConfig) -> float | None:
    return METRICS["structural_validity"](reference, completion)[0]


def unit_tests_term(reference: str, completion: str, tests: Sequence[UnitTest], cfg: RewardConfig) -> float | None:
    """Passed / total; a test that raises counts as failed (``check_all``)."""
    if not tests:
        return None
    results = check_all(tests, completion)
    return sum(passed for _, passed, _ in results) / len(results)


def repetition_term(reference: str, completion: str, tests: Sequence[UnitTest], cfg: RewardConfig) -> float | None:
    """1 - (span - period) / len(completion): the share of the completion that is not a repeat of
    the loop's first copy. Graded, so a longer loop costs more; 1.0 when the detector finds none."""
    loop = find_loop(completion, cfg.repeats)
    if loop is None:
        return 1.0
    start, end = loop.span
    return max(0.0, 1.0 - (end - start - loop.period) / len(completion))


def format_term(reference: str, completion: str, tests: Sequence[UnitTest], cfg: RewardConfig) -> float | None:
    return METRICS["html_conformance"](reference, completion)[0]


def kie_term(reference: str, completion: str, tests: Sequence[UnitTest], cfg: RewardConfig) -> float | None:
    """Field-level F1 of a JSON answer (KIE records); None when the reference is not a JSON object."""
    return METRICS["kie_f1"](reference, completion)[0]


TERMS: dict[str, Term] = {
    "content": content_term,
    "formula": formula_term,
    "table": table_term,
    "structure": structure_term,
    "unit_tests": unit_tests_term,
    "repetition": repetition_term,
    "format": format_term,
    "kie": kie_term,
}
UNFLOORED = frozenset({"repetition"})
# Terms that read a response (the completion and the reference) as its unit tests do, ``checkable``, and under
# which conventions (None: all): the unit tests always; the formula term a formula crop's bare formula as one
# display equation (without delimiters it would find no formula in the reference and be left out); structure
# and format the texts of a box stream or JSON layout, not its ``<x_..><y_..>`` tags (which are not HTML). In
# any other case a term reads the completion and the reference as they are, written in the same convention.
CHECKABLE_TERMS: dict[str, frozenset[str] | None] = {
    "unit_tests": None,
    "formula": frozenset({FORMULA_CONVENTION}),
    "structure": frozenset(BOX_CONVENTIONS),
    "format": frozenset(BOX_CONVENTIONS),
}
DEFAULT_FLOORS: dict[str, float] = {"structure": 0.2, "unit_tests": 0.2, "format": 0.2, "table": 0.1}


def register_term(name: str, fn: Term) -> None:
    """Add a term. ``fn`` must be a module-level function (workers receive it by reference)."""
    if name in TERMS and TERMS[name] is not fn:
        raise ValueError(f"reward term {name!r} is already registered")
    TERMS[name] = fn


# --------------------------------------------------------------------------- config and result


@dataclass(frozen=True)
class RewardRepeatsConfig(RepeatsConfig):
    """The repetition term's loop detector: the cleaning detector (``RepeatsConfig``) with its length
    thresholds scaled from corpus labels (512 characters and more) down to rollouts of a few hundred
    characters, so that a 100-character loop is found. The copies per period band are the cleaning ones
    (a loop of a 24-character sentence needs 6 copies); a normal short answer, a table, a list, a formula
    hold no loop this finds (no reference of the test corpora does)."""

    min_length: int = option(48, help="completions shorter than this are not inspected (columns; CJK counts 3)")
    # a unit of one or two characters (a fill line of underscores, a dot leader, a rule) needs 160 copies, not 64:
    # a form's blank or a table rule ends many correct answers
    min_copies: Bands = option(((2, 160), (8, 16), (32, 6), (96, 4), (341, 3), (512, 2)),
                               help="exact/truncated: copies needed per period band")
    min_covered_chars: int = option(48, help="exact/truncated: characters of the tail the loop must cover")
    table_min_covered: int = option(96, help="characters a table-row loop must cover")
    empty_min_covered: int = option(160, help="characters an empty-unit loop (empty cells, separator rows) "
                                              "must cover")
    gapped_min_covered: int = option(96, help="gapped: characters the loop must cover")


@dataclass(frozen=True)
class RewardConfig:
    """Which terms, their floors, and how the pool runs them.

    ``terms_by_dataset`` maps a dataset key (a record's ``source`` or ``domain``) to the terms
    enabled for it; datasets not listed use ``terms``."""

    terms: tuple[str, ...] = option(tuple(TERMS), help=f"terms multiplied into the reward; known: {', '.join(TERMS)}")
    floors: dict[str, float] = option(default_factory=lambda: dict(DEFAULT_FLOORS),
                                      help="term -> floor in [0, 1] its score is raised to (repetition: never)")
    terms_by_dataset: dict[str, tuple[str, ...]] = option(
        {}, help="dataset key (a record's source or domain) -> its terms; datasets not listed use terms")
    table_signals: tuple[str, ...] = option(TABLE_SIGNALS, help=f"table term signals, a subset of {TABLE_SIGNALS}")
    teds_convention: str = option(DEFAULT_TEDS_CONVENTION, help=f"TEDS/TEDS-S convention of the table term, one of "
                                  f"{TEDS_CONVENTIONS} (docs/judging.md)")
    timeout_s: float = option(10.0, help="seconds per (completion, term) call in RewardPool")
    workers: int = option(2, help="RewardPool worker processes")
    repeats: RewardRepeatsConfig = option(default_factory=RewardRepeatsConfig,
                                          help="loop detector of the repetition term (RewardRepeatsConfig: the "
                                               "cleaning RepeatsConfig with min_length 48, min_covered_chars 48, "
                                               "table_min_covered 96, empty_min_covered 160, gapped_min_covered "
                                               "96, 160 copies of a 1-2 character unit, for rollouts of a few "
                                               "hundred characters)")

    def __post_init__(self) -> None:
        object.__setattr__(self, "terms", tuple(self.terms))
        object.__setattr__(self, "table_signals", tuple(self.table_signals))
        object.__setattr__(self, "terms_by_dataset", {k: tuple(v) for k, v in self.terms_by_dataset.items()})
        for where, names in [("terms", self.terms), *((f"terms_by_dataset[{k!r}]", v)
                                                       for k, v in self.terms_by_dataset.items())]:
            unknown = [n for n in names if n not in TERMS]
            if unknown:
                raise ValueError(f"rewards: {where} has unknown terms {unknown}; known: {sorted(TERMS)}")
        for name, floor in self.floors.items():
            if name not in TERMS:  # floors replace the defaults: a typo would drop every real floor silently
                raise ValueError(f"rewards: floors has an unknown term {name!r}; known: {sorted(TERMS)}")
            if name in UNFLOORED:
                raise ValueError(f"rewards: the {name} term is never floored (Jina-OCR-v1 5.3)")
            if not 0.0 <= floor <= 1.0:
                raise ValueError(f"rewards: floor for {name!r} must lie in [0, 1], got {floor}")
        bad = [s for s in self.table_signals if s not in TABLE_SIGNALS]
        if bad or not self.table_signals:
            raise ValueError(f"rewards: table_signals must be a non-empty subset of {TABLE_SIGNALS}, got {bad}")
        try:
            check_teds_convention(self.teds_convention)
        except ValueError as exc:
            raise ValueError(f"rewards: teds_convention: {exc}") from None
        if self.timeout_s <= 0 or self.workers < 1:
            raise ValueError("rewards: timeout_s must be > 0 and workers >= 1")

    def terms_for(self, dataset: str | Sequence[str] | None = None) -> tuple[str, ...]:
        """Enabled terms for a dataset key, or the first listed of several keys (source, domain)."""
        keys = [dataset] if isinstance(dataset, str) else list(dataset or ())
        for key in keys:
            if key in self.terms_by_dataset:
                return tuple(self.terms_by_dataset[key])
        return self.terms


@dataclass
class RewardResult:
    """``terms``: raw score per enabled term (None = left out, 0.0 for a timeout or an error);
    ``total`` = ``combine(terms, floors)``."""

    total: float
    terms: dict[str, float | None]
    left_out: list[str]
    timed_out: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class RewardItem:
    """One completion to score. ``unit_tests``: JSON strings (as in ``PageRecord.unit_tests``),
    dicts, or parsed tests; ``dataset``: key(s) into ``RewardConfig.terms_by_dataset``;
    ``convention``: the record's response convention (``metadata["instruct"]``), which says what
    text its unit tests read."""

    reference: str
    completion: str
    unit_tests: Sequence[str | Mapping[str, Any] | UnitTest] = ()
    dataset: str | Sequence[str] | None = None
    convention: str | None = None


def term_inputs(name: str, reference: str, completion: str, convention: str | None) -> tuple[str, str]:
    """What term ``name`` reads of a reference and a completion of ``convention``: both ``checkable``
    texts where ``CHECKABLE_TERMS`` says so, else both as they are."""
    if name in CHECKABLE_TERMS:
        conventions = CHECKABLE_TERMS[name]
        if conventions is None or convention in conventions:
            return checkable(convention, reference), checkable(convention, completion)
    return reference, completion


def combine(terms: Mapping[str, float | None], floors: Mapping[str, float]) -> float:
    """Table 4: total = prod_k max(r_k, floor_k) over the terms that apply (None = left out);
    a term without a floor enters as is. An empty product is 1."""
    total = 1.0
    for name, value in terms.items():
        if value is not None:
            total *= max(float(value), floors.get(name, 0.0))
    return total


def parse_tests(unit_tests: Iterable[str | Mapping[str, Any] | UnitTest]) -> list[UnitTest]:
    """Validate tests at the boundary; a malformed test raises ``ValueError`` naming it."""
    out: list[UnitTest] = []
    for i, t in enumerate(unit_tests):
        where = f"unit_tests[{i}]"
        out.append(t if isinstance(t, UnitTest) else
                   unit_test_from_json(t, where) if isinstance(t, str) else unit_test_from_dict(t, where))
    return out


def _finish(terms: dict[str, float | None], timed_out: list[str], errors: dict[str, str],
            cfg: RewardConfig) -> RewardResult:
    left_out = [n for n, v in terms.items() if v is None]
    return RewardResult(combine(terms, cfg.floors), terms, left_out, timed_out, errors)


def _run_term(name: str, fn: Term, reference: str, completion: str, tests: Sequence[UnitTest],
              cfg: RewardConfig) -> tuple[float | None, str | None]:
    try:
        value = fn(reference, completion, tests, cfg)
    except Exception as exc:  # a reward loop must not die on one odd completion: failure, reason kept
        return 0.0, f"{type(exc).__name__}: {exc}"
    return (None if value is None else float(value)), None


def score(reference: str, completion: str, unit_tests: Iterable[Any] = (), cfg: RewardConfig | None = None,
          dataset: str | Sequence[str] | None = None, convention: str | None = None) -> RewardResult:
    """All enabled terms in this process (no timeout: use ``RewardPool`` inside training)."""
    cfg = cfg or RewardConfig()
    tests = parse_tests(unit_tests)
    terms: dict[str, float | None] = {}
    errors: dict[str, str] = {}
    for name in cfg.terms_for(dataset):
        terms[name], error = _run_term(name, TERMS[name], *term_inputs(name, reference, completion, convention),
                                       tests, cfg)
        if error:
            errors[name] = error
    return _finish(terms, [], errors, cfg)


# --------------------------------------------------------------------------- worker pool

STARTUP_TIMEOUT_S = 120.0  # a worker that cannot import this module in this long is a broken setup


def _warm_up(cfg: RewardConfig) -> None:
    """Run the built-in terms once, so lazy imports (scipy for formula matching) are not charged
    to the first call's timeout. Unit tests are skipped: math tests would start a browser."""
    page = "# A\n\n$x^2$\n\n<table><tr><td>a</td></tr></table>"
    for name in ("content", "formula", "table", "structure", "repetition", "format"):
        _run_term(name, TERMS[name], page, page, [], cfg)


def _serve(read_fd: int, write_fd: int) -> None:
    """Worker process: receive the config, say ready, then run (key, term, inputs) tasks until None."""
    conn_in, conn_out = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    cfg = conn_in.recv()
    _warm_up(cfg)
    conn_out.send("ready")
    while True:
        try:
            task = conn_in.recv()
        except EOFError:
            return
        if task is None:
            return
        key, name, fn, reference, completion, tests = task
        conn_out.send((key, *_run_term(name, fn, reference, completion, tests, cfg)))


@dataclass
class _Worker:
    process: subprocess.Popen
    send: Connection
    recv: Connection
    started: float
    ready: bool = False
    task: tuple[int, str] | None = None
    deadline: float = 0.0


class RewardPool:
    """Worker processes scoring (completion, term) pairs with a per-call timeout.

    Use as a context manager (or call ``close``). Workers are fresh interpreters (not forks: the
    caller may be a training process with torch threads), each in its own session so a kill also
    ends what a term started; the caller's ``sys.path`` is passed on, so a term registered from any
    importable module runs in them. The timeout counts from when a ready worker takes the call."""

    def __init__(self, cfg: RewardConfig | None = None):
        self.cfg = cfg or RewardConfig()
        self.timeouts = 0  # calls that ran out of time since the pool started
        self.replaced = 0  # workers killed or lost and started again
        self._workers: list[_Worker] = []
        self._workers = [self._start() for _ in range(self.cfg.workers)]

    def _start(self) -> _Worker:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        code = "import sys; from model.rewards import _serve; _serve(int(sys.argv[1]), int(sys.argv[2]))"
        process = subprocess.Popen([sys.executable, "-c", code, str(to_child_r), str(from_child_w)],
                                   pass_fds=(to_child_r, from_child_w), env=env, start_new_session=True)
        os.close(to_child_r)
        os.close(from_child_w)
        worker = _Worker(process, Connection(to_child_w, readable=False),
                         Connection(from_child_r, writable=False), time.monotonic())
        worker.send.send(self.cfg)
        return worker

    @staticmethod
    def _kill(worker: _Worker) -> None:
        try:
            os.killpg(worker.process.pid, signal.SIGKILL)  # its session: the worker and its children
        except (ProcessLookupError, PermissionError):
            pass
        worker.process.kill()
        worker.process.wait()
        worker.send.close()
        worker.recv.close()

    def _replace(self, k: int) -> None:
        self._kill(self._workers[k])
        self.replaced += 1
        self._workers[k] = self._start()

    def score_many(self, items: Sequence[RewardItem]) -> list[RewardResult]:
        """Score every item; results in input order. Malformed unit tests raise ``ValueError``
        before any work starts."""
        cfg = self.cfg
        parsed = [parse_tests(item.unit_tests) for item in items]
        terms: list[dict[str, float | None]] = []
        pending: list[tuple[int, str]] = []
        for i, item in enumerate(items):
            names = cfg.terms_for(item.dataset)
            terms.append({name: None for name in names})
            # no tests: the term is left out without a round trip to a worker
            pending += [(i, n) for n in names if not (n == "unit_tests" and not parsed[i])]
        pending.reverse()  # pop() from the end keeps the input order
        timed_out: list[list[str]] = [[] for _ in items]
        errors: list[dict[str, str]] = [{} for _ in items]

        def record(key: tuple[int, str], value: float | None, error: str | None) -> None:
            terms[key[0]][key[1]] = value
            if error:
                errors[key[0]][key[1]] = error

        while pending or any(w.task for w in self._workers):
            for w in self._workers:
                if w.ready and w.task is None and pending:
                    i, name = pending.pop()
                    item = items[i]
                    w.send.send(((i, name), name, TERMS[name],
                                 *term_inputs(name, item.reference, item.completion, item.convention), parsed[i]))
                    w.task, w.deadline = (i, name), time.monotonic() + cfg.timeout_s
            waiting = [w for w in self._workers if w.task or not w.ready]
            deadlines = [w.deadline if w.ready else w.started + STARTUP_TIMEOUT_S for w in waiting]
            ready = wait([w.recv for w in waiting], timeout=max(0.0, min(deadlines) - time.monotonic()))
            for k, w in enumerate(list(self._workers)):
                if w.recv in ready:
                    try:
                        message = w.recv.recv()
                    except (EOFError, OSError):  # the worker died (out of memory, a crash)
                        if not w.ready:
                            raise RuntimeError("rewards: a worker process exited while starting") from None
                        record(w.task, 0.0, "worker died")
                        self._replace(k)
                        continue
                    if not w.ready:
                        w.ready = True
                        continue
                    key, value, error = message
                    record(key, value, error)
                    w.task = None
                elif w.task and time.monotonic() >= w.deadline:
                    record(w.task, 0.0, None)
                    timed_out[w.task[0]].append(w.task[1])
                    self.timeouts += 1
                    self._replace(k)
                elif not w.ready and time.monotonic() >= w.started + STARTUP_TIMEOUT_S:
                    raise RuntimeError(f"rewards: a worker did not start within {STARTUP_TIMEOUT_S} s")
        return [_finish(t, to, e, cfg) for t, to, e in zip(terms, timed_out, errors)]

    def close(self) -> None:
        for w in self._workers:
            try:
                w.send.send(None)
            except OSError:
                pass
        for w in self._workers:
            try:
                w.process.wait(2)
            except subprocess.TimeoutExpired:
                pass
            self._kill(w)  # also ends a browser the worker left behind
        self._workers = []

    def __del__(self) -> None:
        if getattr(self, "_workers", None):
            self.close()

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- CLI


def read_items(lines: Iterable[str]) -> list[RewardItem]:
    """JSON lines ``{"completion", "reference", "unit_tests"?, "dataset"?, "convention"?}``; blank lines skipped;
    a bad line raises ``ValueError`` naming its number."""
    items = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number}: not JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise ValueError(f"line {number}: not a JSON object")
        missing = [k for k in ("completion", "reference") if not isinstance(data.get(k), str)]
        if missing:
            raise ValueError(f"line {number}: {' and '.join(missing)} missing or not a string")
        if not isinstance(data.get("convention"), str | None):
            raise ValueError(f"line {number}: convention is not a string")
        tests = data.get("unit_tests") or []
        try:
            parse_tests(tests)
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
        items.append(RewardItem(data["reference"], data["completion"], tests, data.get("dataset"),
                                data.get("convention")))
    return items


def format_table(results: Sequence[RewardResult]) -> str:
    """One row per completion (``-`` left out or not enabled, ``T`` timed out, ``E`` error) and a mean row; the
    mean of a term is over the completions it applied to."""
    names: list[str] = []
    for r in results:
        names += [n for n in r.terms if n not in names]
    width = max([10, *(len(n) + 1 for n in names)])
    lines = ["line".ljust(6) + "total".rjust(8) + "".join(n.rjust(width) for n in names)]
    for k, r in enumerate(results, start=1):
        cells = []
        for n in names:
            v = r.terms.get(n)
            mark = "T" if n in r.timed_out else "E" if n in r.errors else ""
            cells.append(("-" if v is None else f"{v:.4f}{mark}").rjust(width))
        lines.append(str(k).ljust(6) + f"{r.total:8.4f}" + "".join(cells))
    mean_cells = []
    for n in names:
        vals = [r.terms[n] for r in results if r.terms.get(n) is not None]
        mean_cells.append((f"{sum(vals) / len(vals):.4f}" if vals else "-").rjust(width))
    total = sum(r.total for r in results) / len(results) if results else float("nan")
    lines.append("mean".ljust(6) + f"{total:8.4f}" + "".join(mean_cells))
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m model.rewards",
        description="Score completions against reference transcriptions with the GRPO reward terms of "
                    "Jina-OCR-v1 Table 4 (content, formula, table, structure, unit_tests, repetition, "
                    "format, kie; total = product with floors). Input: JSON lines with `completion`, "
                    "`reference`, optional `unit_tests` (olmOCR-Bench tests, JSON strings or objects) "
                    "`dataset` (key into terms_by_dataset) and `convention` (the response convention, "
                    "which says what text the unit tests read). Prints one row per line and the mean "
                    "('-' left out or not enabled, 'T' timed out, 'E' error).")
    parser.add_argument("--input", metavar="FILE.jsonl", help="input JSON lines (default: stdin)")
    parser.add_argument("--config", metavar="FILE.yaml",
                        help="RewardConfig as YAML (terms, floors, terms_by_dataset, table_signals, "
                             "timeout_s, workers, repeats)")
    parser.add_argument("--terms", help="comma-separated terms (overrides the config)")
    parser.add_argument("--workers", type=int, help="worker processes (overrides the config; default 2)")
    parser.add_argument("--timeout", type=float, help="seconds per term call (overrides the config; default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON result per line instead of a table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        values: dict[str, Any] = (read_yaml(args.config) or {}) if args.config else {}
        for key, value in (("terms", args.terms and args.terms.split(",")), ("workers", args.workers),
                           ("timeout_s", args.timeout)):
            if value is not None:
                values[key] = value
        cfg = load(RewardConfig, values, "rewards")
        source: IO[str] = open(args.input, encoding="utf-8") if args.input else sys.stdin
        with source:
            items = read_items(source)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with RewardPool(cfg) as pool:
        results = pool.score_many(items)
    if args.json:
        for r in results:
            print(json.dumps(r.to_dict()))
    else:
        print(format_table(results))
    return 0


if __name__ == "__main__":
    # Run the imported module's main: workers unpickle RewardConfig as model.rewards.RewardConfig,
    # which does not exist under the name __main__.
    from model.rewards import main as _main

    sys.exit(_main())
