"""Train the project's byte-level BPE tokenizer and write ``assets/tokenizer/tokenizer.json``.

The short-sample filter (``pipelines/clean/short.py``) counts response tokens with a Hugging Face
``tokenizer.json``. Until a model's own tokenizer is configured, this is the one it uses: a GPT-2
style byte-level BPE (``tokenizers``' ``BPE`` model with a ``ByteLevel`` pre-tokenizer and decoder,
no normaliser, all 256 byte symbols in the initial alphabet, so every string encodes without an
unknown token).

Training text, in this order:

1. the ``response`` of every page the project's own source readers yield for the sources of
   ``configs/corpus.yaml`` (``pipelines.config.load_config()``, then ``build_source(settings)``,
   ``plan`` and ``read``; readers only parse, nothing is rendered), i.e. the bundled ``samples/``;
2. every ``--extra`` text file, whole (UTF-8, undecodable bytes replaced).

The bundled samples are only ~30 KB of text from a small word list, too little for an 8,000-entry
vocabulary, so the committed file (vocabulary 7,962: 256 bytes, 1 special token, 7,705 merges seen at
least twice) was trained with the project's reference papers and notes as extra text (354 KB in all)::

    .venv/bin/python scripts/train_tokenizer.py --extra ../shared/seeds/*.txt ../shared/reference/*.md ../shared/*.md

Training is deterministic: inputs are read in sorted order and the BPE trainer breaks count ties
by symbol ids, so the same inputs give a byte-identical ``tokenizer.json`` (``--check`` verifies
that by training twice).
"""

from __future__ import annotations

import argparse
import glob
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

DEFAULT_OUTPUT = REPO / "assets" / "tokenizer" / "tokenizer.json"
SPECIAL_TOKENS = ("<|endoftext|>",)


def sample_responses(config: str | None = None) -> Iterator[str]:
    """The responses of every page the configured sources read (the bundled samples by default)."""
    from pipelines.config import load_config
    from pipelines.sources import build_source

    cfg = load_config(config)
    for settings in cfg.sources:
        source = build_source(settings)
        for pattern in settings.paths:
            uris = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
            for uri in uris:
                for unit in source.plan(uri):
                    for row in source.read(unit):
                        for page in row.pages:
                            if page.response.strip():
                                yield page.response


def extra_texts(paths: list[str]) -> Iterator[str]:
    for path in sorted(paths):
        yield Path(path).read_bytes().decode("utf-8", errors="replace")


def train(texts: list[str], vocab_size: int, min_frequency: int):
    """A byte-level BPE tokenizer trained on ``texts`` (a ``tokenizers.Tokenizer``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tokenizer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None,
                        help="corpus config whose sources give the sample texts (default configs/corpus.yaml)")
    parser.add_argument("--extra", nargs="*", default=[], help="extra UTF-8 text files to train on")
    parser.add_argument("--no-samples", action="store_true", help="train on the --extra files only")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--min-frequency", type=int, default=2)
    parser.add_argument("--output", default=str(DEFAULT_OUTPUT))
    parser.add_argument("--check", action="store_true", help="train twice and fail unless both are identical")
    args = parser.parse_args(argv)

    texts = [] if args.no_samples else list(sample_responses(args.config))
    n_samples = len(texts)
    texts += list(extra_texts(args.extra))
    if not texts:
        parser.error("no training text: no sample responses and no --extra files")
    tokenizer = train(texts, args.vocab_size, args.min_frequency)
    blob = tokenizer.to_str(pretty=True)
    if args.check and train(texts, args.vocab_size, args.min_frequency).to_str(pretty=True) != blob:
        sys.exit("training is not deterministic: two runs gave different tokenizers")
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(blob + "\n", encoding="utf-8")
    chars = sum(len(t) for t in texts)
    print(f"trained on {n_samples} sample responses and {len(args.extra)} extra files ({chars:,} characters); "
          f"vocab size {tokenizer.get_vocab_size()}; wrote {output}")


if __name__ == "__main__":
    main()
