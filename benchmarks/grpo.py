"""GRPO costs and a reward curve: reward evaluations/s per term, TEDS on 20x10 tables, rollouts/s of
the tiny model on this CPU, and ReMax against the group-mean baseline over a short run.

    python benchmarks/grpo.py [--steps 50] [--pages 20] [--corpus out/corpus] [--skip-curve]

1. Reward terms: each term of ``model.rewards`` in-process on ``--pages`` corpus pages (reference =
   the page's response, completion = a seeded perturbation of it: dropped and swapped words, a
   truncated tail), then the whole Table 4 reward through ``RewardPool`` (2 workers). Without a
   corpus, pages are generated here.
2. TEDS, TEDS-S, table edit similarity and the ``table`` term on seeded 20x10 table pairs.
3. Rollouts: ``num_rollouts`` = 8 sampled completions of ``--rollout-tokens`` tokens (no early stop)
   for a corpus page prompt on the tiny model, plus the greedy one: rollouts/s and tokens/s.
4. Reward curve: ``--steps`` GRPO steps from the same tiny model with each baseline on a toy task
   the untrained model can climb (content similarity against a one-sentence reference, 8-token
   completions, two pages): per-step mean sampled reward side by side.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from model.rewards import TERMS, RewardConfig, RewardItem, RewardPool, parse_tests  # noqa: E402
from schemas.similarity import METRICS  # noqa: E402

TOY_REFERENCE = "The quick brown fox jumps over the lazy dog near the river."


def perturb(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    out = [w for w in words if rng.random() > 0.05]
    for _ in range(max(1, len(out) // 30)):
        if len(out) > 1:
            i = rng.randrange(len(out) - 1)
            out[i], out[i + 1] = out[i + 1], out[i]
    return " ".join(out[: max(1, int(len(out) * 0.9))])


def corpus_pages(corpus: str, n: int) -> list[dict]:
    try:
        from model.records import iter_records

        rows = list(iter_records(corpus, None, ["id", "source", "domain", "response", "unit_tests", "image",
                                                "instruction"]))
    except FileNotFoundError:
        return []
    # synthetic pages first: they carry formulas, tables and unit tests
    rows.sort(key=lambda r: (r["source"] != "jinaocrsynth", r["id"]))
    return rows[:n]


def generated_pages(n: int) -> list[dict]:
    rng = random.Random(0)
    pages = []
    for i in range(n):
        table = "<table>" + "".join("<tr>" + "".join(f"<td>{rng.randint(0, 999)}</td>" for _ in range(5)) + "</tr>"
                                    for _ in range(6)) + "</table>"
        text = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "page", "value"]) for _ in range(120))
        pages.append({"id": str(i), "source": "generated", "domain": "generated", "image": None,
                      "response": f"# Page {i}\n\n{text}\n\n$x^{i} + y$\n\n{table}", "unit_tests": []})
    return pages


def bench_terms(pages: list[dict]) -> None:
    rng = random.Random(0)
    cfg = RewardConfig()
    pairs = [(p["response"], perturb(p["response"], rng), parse_tests(p["unit_tests"] or [])) for p in pages]
    chars = sum(len(r) for r, _, _ in pairs) / len(pairs)
    print(f"\n== reward terms, in-process, {len(pairs)} pages (mean reference {chars:.0f} chars, "
          f"{sum(len(t) for _, _, t in pairs)} unit tests)")
    print(f"{'term':<12}{'evals/s':>10}{'ms/eval':>10}{'applied':>9}")
    for name in cfg.terms:
        fn = TERMS[name]
        fn(*pairs[0][:2], pairs[0][2], cfg)  # warm lazy imports (and a browser for math tests)
        t = time.perf_counter()
        applied = sum(fn(ref, cand, tests, cfg) is not None for ref, cand, tests in pairs)
        dt = time.perf_counter() - t
        print(f"{name:<12}{len(pairs) / dt:>10.1f}{1000 * dt / len(pairs):>10.2f}{applied:>9}")
    items = [RewardItem(ref, cand, tests, (p["source"], p["domain"])) for (ref, cand, tests), p in zip(pairs, pages)]
    with RewardPool(RewardConfig(workers=2)) as pool:
        pool.score_many(items[:2])  # workers started and warm
        t = time.perf_counter()
        results = pool.score_many(items)
        dt = time.perf_counter() - t
    print(f"whole reward via RewardPool(workers=2): {len(items) / dt:.1f} completions/s, "
          f"mean total {sum(r.total for r in results) / len(results):.3f}, timeouts "
          f"{sum(len(r.timed_out) for r in results)}")


def bench_teds(n: int = 20) -> None:
    rng = random.Random(1)

    def table(rows: int, cols: int, edit: float) -> str:
        cells = [[f"{rng.choice(['rev', 'cost', 'n/a', 'x'])} {rng.randint(0, 9999)}" for _ in range(cols)]
                 for _ in range(rows)]
        body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in cells)
        ref = "<table>" + body + "</table>"
        cand_cells = [[c if rng.random() > edit else c[::-1] for c in row] for row in cells]
        if rng.random() < 0.5:
            cand_cells.pop(rng.randrange(rows))
        cand = "<table>" + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>"
                                   for row in cand_cells) + "</table>"
        return ref, cand

    pairs = [table(20, 10, 0.1) for _ in range(n)]
    print(f"\n== tables: {n} pairs of 20x10 tables (10% cells edited, half missing a row)")
    print(f"{'metric':<12}{'evals/s':>10}{'ms/eval':>10}")
    cfg = RewardConfig()
    fns = {name: (lambda r, c, m=METRICS[name]: m(r, c)) for name in ("teds", "teds_s", "table_edit")}
    fns["table term"] = lambda r, c: TERMS["table"](r, c, [], cfg)
    for name, fn in fns.items():
        fn(*pairs[0])
        t = time.perf_counter()
        for ref, cand in pairs:
            fn(ref, cand)
        dt = time.perf_counter() - t
        print(f"{name:<12}{n / dt:>10.1f}{1000 * dt / n:>10.2f}")


def bench_rollouts(pages: list[dict], tokens: int) -> None:
    from model.grpo import GRPOConfig, rollout
    from model.models import build_tiny
    from model.processing import to_pil

    loaded = build_tiny("tiny", seed=0)
    page = next((p for p in pages if p.get("image")), None)
    if page is not None:
        encoded = loaded.processor.encode(page["instruction"], to_pil(page["image"]))
        what = f"corpus page {page['id'][:12]}"
    else:
        from PIL import Image

        encoded = loaded.processor.encode("Convert this page to Markdown.", Image.new("RGB", (448, 448), "white"))
        what = "blank 448x448 page"
    cfg = GRPOConfig(max_completion_tokens=tokens)
    # never stop early, so every rollout costs the full completion limit
    loaded.model.generation_config.suppress_tokens = [*loaded.model.generation_config.suppress_tokens,
                                                      loaded.processor.eos_token_id]
    torch.manual_seed(0)
    rollout(loaded, encoded, 2, GRPOConfig(max_completion_tokens=2))  # warm-up
    t = time.perf_counter()
    r = rollout(loaded, encoded, 8, cfg)
    sampled = time.perf_counter() - t
    t = time.perf_counter()
    rollout(loaded, encoded, 1, cfg, greedy=True)
    greedy = time.perf_counter() - t
    n_tok = int(r.mask.sum())
    print(f"\n== rollouts, tiny model ({what}, prompt {encoded.prompt_len} tokens, {tokens} new tokens, "
          f"{torch.get_num_threads()} threads)")
    print(f"8 sampled rollouts: {sampled:.2f} s = {8 / sampled:.2f} rollouts/s, {n_tok / sampled:.0f} tokens/s")
    print(f"1 greedy rollout (ReMax baseline): {greedy:.2f} s")
    print(f"one GRPO step's rollouts per prompt (8 + greedy): {sampled + greedy:.2f} s")


def bench_curve(steps: int) -> None:
    from PIL import Image

    from model.data import Sample
    from model.grpo import GRPOConfig, train_grpo
    from model.models import build_tiny

    curves = {}
    for baseline in ("remax", "group_mean"):
        loaded = build_tiny("tiny", seed=0)
        prompts = []
        for i in range(2):
            enc = loaded.processor.encode("Read the page.", Image.new("RGB", (112, 84), (255, 255 - 40 * i, 255)))
            prompts.append(Sample(enc, f"toy{i}", "toy", "toy", TOY_REFERENCE, [], "Read the page."))
        cfg = GRPOConfig(num_rollouts=8, baseline=baseline, max_completion_tokens=8, lr=3e-2, steps=steps,
                         prompts_per_step=2, reward=RewardConfig(terms=("content",), workers=1))
        t = time.perf_counter()
        curves[baseline] = train_grpo(loaded, cfg, prompts, None)
        print(f"{baseline}: {steps} steps in {time.perf_counter() - t:.1f} s", flush=True)
    print(f"\n== reward curve: toy task (content vs {len(TOY_REFERENCE)}-char reference), tiny model, "
          f"8 rollouts x 2 prompts per step, lr 3e-2")
    print(f"{'step':>5}{'remax r':>10}{'greedy r':>10}{'remax 0-adv':>12}{'gmean r':>10}{'gmean 0-adv':>12}")
    for a, b in zip(curves["remax"], curves["group_mean"]):
        print(f"{a.step:>5}{a.reward_mean:>10.4f}{a.greedy_reward_mean:>10.4f}{a.zero_advantage_share:>12.2f}"
              f"{b.reward_mean:>10.4f}{b.zero_advantage_share:>12.2f}")
    k = max(1, steps // 5)
    for name, h in curves.items():
        first = sum(x.reward_mean for x in h[:k]) / k
        last = sum(x.reward_mean for x in h[-k:]) / k
        print(f"{name}: mean reward of the first {k} steps {first:.4f} -> last {k} steps {last:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=50, help="GRPO steps per baseline for the reward curve")
    ap.add_argument("--pages", type=int, default=20, help="corpus pages for the reward-term timings")
    ap.add_argument("--corpus", default=str(REPO / "out" / "corpus"))
    ap.add_argument("--rollout-tokens", type=int, default=64)
    ap.add_argument("--skip-curve", action="store_true")
    args = ap.parse_args()
    pages = corpus_pages(args.corpus, args.pages) or generated_pages(args.pages)
    bench_terms(pages)
    bench_teds()
    bench_rollouts(pages, args.rollout_tokens)
    if not args.skip_curve:
        bench_curve(args.steps)


if __name__ == "__main__":
    main()
