"""``python -m model.speculate``: speculative decoding of eval pages with a FastMTP head, or its Table 8.

The command line over `model.decode` (decoding and the Table 8 metrics) and `model.mtp` (fitting):
with ``--head`` it loads a head written by ``python -m model.mtp``, without one it fits a head first
on the corpus's train split. ``--bench`` prints Table 8 for k = 0..K on the eval split; otherwise it
decodes a few eval pages and prints them with their acceptance. The eval split is the rows written as
"eval" when the corpus has them, else 10% of its train rows (``--eval-fraction``: `model.records.cli_eval_fraction`).
"""

from __future__ import annotations

import argparse

import torch

from model.data import DataConfig, eval_samples
from model.decode import accept_stats, bench_on_corpus, format_table, generate
from model.models import load_or_exit
from model.mtp import MTPConfig, fit_for_checkpoint
from model.mtp_head import load_head
from model.records import EVAL_FRACTION_HELP, cli_eval_fraction, fraction_arg


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m model.speculate",
                                 description="Speculative decoding with a FastMTP head (lossless, greedy).")
    ap.add_argument("--checkpoint", required=True, help="verifier: local checkpoint folder, 'tiny' or 'tiny-moe'")
    ap.add_argument("--head", help="head folder written by `python -m model.mtp` (default: fit one first, on the "
                                   "corpus's train split)")
    ap.add_argument("--fit-steps", type=int, default=300, help="fitting steps when no --head is given")
    ap.add_argument("--corpus", default="out/corpus", help="eval pages come from this corpus's eval split")
    ap.add_argument("--eval-fraction", type=fraction_arg, help=EVAL_FRACTION_HELP + "; a fitted head trains on "
                                                                "the rest of the train rows")
    ap.add_argument("--bench", action="store_true", help="print Table 8 (k = 0..K) instead of decoding")
    ap.add_argument("--k", type=int, default=3, help="drafts per step when decoding")
    ap.add_argument("--ks", default="0,1,2,3", help="depths for --bench")
    ap.add_argument("--limit", type=int, help="at most this many eval pages")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    args = ap.parse_args(argv)
    loaded = load_or_exit(ap, args.checkpoint)
    loaded.model.eval()
    fraction = cli_eval_fraction(args.corpus, args.eval_fraction)
    if args.head:
        head = load_head(args.head, loaded.model)
    else:
        fit = fit_for_checkpoint(loaded, args.corpus, MTPConfig(steps=args.fit_steps), eval_fraction=fraction)
        head = fit.head
        print(f"no --head: fitted one ({fit.trainable} parameters, {args.fit_steps} steps, {fit.seconds:.0f}s)")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.bench:
        ks = tuple(int(x) for x in args.ks.split(","))
        print(format_table(bench_on_corpus(loaded, head, args.corpus, args.limit, args.max_new_tokens, ks,
                                           eval_fraction=fraction)))
        return
    for s in eval_samples(DataConfig(path=args.corpus, eval_fraction=fraction), loaded.processor,
                          limit=args.limit or 3):
        r = generate(loaded.model, [s.encoded], head, args.k, args.max_new_tokens, loaded.processor.eos_token_id,
                     loaded.processor.tokenizer.pad_token_id)
        st = accept_stats(r.accepted[0], args.k)
        print(f"--- {s.id}  tau {st.tau:.2f}, {r.verifier_passes} verifier passes for {len(r.tokens[0])} tokens")
        print(loaded.processor.decode(r.tokens[0]))


if __name__ == "__main__":
    main()
