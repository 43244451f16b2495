"""Issue 6 figures: packed alignment SFT against TRL's SFTTrainer, and peak RSS as the corpus grows.

    python benchmarks/train.py [--steps 24] [--model tiny] [--corpus out/corpus]
    python benchmarks/train.py --hidden 512 --layers 8     # a "small" model (~34M parameters)

1. Response tokens per second: `model.sft` (packed rows, per-sample attention) versus TRL's
   `SFTTrainer` on the same model and the same encoded samples, unpacked (the only mode TRL allows
   for VLMs), one sample per step. TRL's collator gets samples already encoded, so our steps are
   timed without the data stream too (``StepLog.data_seconds``). TRL is installed for this script
   only, into ``.cache/bench-trl`` (``pip --target``, no dependencies: its requirements are already
   in the venv), so the project's environment stays as ``make`` built it.
2. Peak RSS (and peak GPU memory on CUDA) of the packed SFT run on the corpus and on the corpus
   repeated 4x (new ids, same pages): streaming keeps it flat.

On a GPU machine both trainers run on CUDA with bf16 autocast (``--device auto``); run it for the
tiny model and for a small one (``--hidden 512 --layers 8``).

Each measurement runs in a fresh subprocess so RSS and warm-up do not leak between them.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRL_DIR = ROOT / ".cache" / "bench-trl"
sys.path.insert(0, str(ROOT))


def ensure_trl() -> None:
    if not (TRL_DIR / "trl").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        "--target", str(TRL_DIR), "trl==1.16.0", "accelerate>=1.10,<2"], check=True)


def _device(name: str):
    import torch

    return torch.device("cuda" if name == "auto" and torch.cuda.is_available() else
                        ("cpu" if name == "auto" else name))


def _gpu_peak(device) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


def run_ours(model: str, corpus: str, steps: int, max_length: int, sizes: dict, device: str) -> dict:
    from model.models import build_tiny
    from model.sft import SFTConfig, train_sft
    from schemas.config import load as load_config

    dev = _device(device)
    loaded = build_tiny(model, **sizes)
    loaded.model.to(dev)
    cfg = load_config(SFTConfig, {"steps": steps, "log_every": 0, "optim": {"lr": 1e-3, "warmup_steps": 1},
                                  "data": {"path": corpus, "max_length": max_length}}, "sft")
    out = ROOT / ".cache" / "bench-train-ours"
    history = train_sft(loaded, cfg, out, progress=False)
    timed = history[1:]  # step 1 includes one-off warm-up
    tokens = sum(h.response_tokens for h in timed)
    # TRL below gets samples already decoded and encoded, so time our steps without the data
    # stream's decode/encode/pack too (reported beside it).
    seconds = sum(h.response_tokens / h.tokens_per_s - h.data_seconds for h in timed)
    data = sum(h.data_seconds for h in timed)
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "data_seconds": data,
            "peak_gpu_mib": _gpu_peak(dev)}


def run_trl(model: str, corpus: str, steps: int, sizes: dict, device: str) -> dict:
    sys.path.insert(0, str(TRL_DIR))
    import torch
    from transformers import TrainerCallback
    from trl import SFTConfig as TRLConfig
    from trl import SFTTrainer

    from model.data import DataConfig, SampleSource
    from model.models import build_tiny

    dev = _device(device)
    loaded = build_tiny(model, **sizes)
    loaded.model.to(dev)
    source = SampleSource(loaded.processor, DataConfig(path=corpus), split="train")
    samples = []
    for s in source:
        samples.append(s)
        if len(samples) >= steps:
            break

    from datasets import Dataset

    rows = Dataset.from_dict({"idx": list(range(len(samples)))})  # the collator looks samples up by index

    def collate(batch):
        (row,) = batch
        e = samples[row["idx"]].encoded
        labels = e.input_ids.clone()
        labels[: e.prompt_len] = -100
        return {"input_ids": e.input_ids[None], "attention_mask": torch.ones_like(e.input_ids)[None],
                "labels": labels[None], "pixel_values": e.pixel_values, "image_grid_thw": e.image_grid_thw,
                "mm_token_type_ids": e.mm_token_type_ids[None]}

    times: list[tuple[float, int]] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append((time.perf_counter() - self.t, 0))

    args = TRLConfig(output_dir=str(ROOT / ".cache" / "bench-train-trl"), per_device_train_batch_size=1,
                     max_steps=len(samples), learning_rate=1e-3, logging_steps=1000, save_strategy="no",
                     report_to=[], remove_unused_columns=False, dataset_kwargs={"skip_prepare_dataset": True},
                     use_cpu=dev.type == "cpu", bf16=dev.type == "cuda", dataloader_num_workers=0)
    trainer = SFTTrainer(model=loaded.model, args=args, train_dataset=rows, data_collator=collate,
                         processing_class=loaded.processor.tokenizer, callbacks=[Clock()])
    trainer.train()
    response = [s.encoded.length - s.encoded.prompt_len for s in samples]
    tokens = sum(response[1:])
    seconds = sum(t for t, _ in times[1:])
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "peak_gpu_mib": _gpu_peak(dev)}


def grow_corpus(src: str, factor: int, dst: Path) -> str:
    """``factor`` copies of every row with distinct ids: the same pages, ``factor`` times the rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from model.records import shard_files

    (dst / "data").mkdir(parents=True, exist_ok=True)
    n = 0
    for f in shard_files(src):
        table = pq.read_table(f)
        for i in range(factor):
            ids = pa.array([f"{x}-copy{i}" for x in table.column("id").to_pylist()])
            pq.write_table(table.set_column(table.schema.get_field_index("id"), "id", ids),
                           dst / "data" / f"train-{n:05d}-of-99999.parquet", row_group_size=16)
            n += 1
    return str(dst)


def child(argv: list[str]) -> dict:
    """Run one measurement in a subprocess; return its JSON result plus its peak RSS."""
    proc = subprocess.run([sys.executable, __file__, *argv], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark child {argv} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=24, help="optimizer steps (ours) / samples (TRL)")
    ap.add_argument("--model", default="tiny", choices=["tiny", "tiny-moe"])
    ap.add_argument("--corpus", default="out/corpus")
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=128, help="decoder width (512 with --layers 8: a 'small' model)")
    ap.add_argument("--layers", type=int, default=4, help="decoder layers")
    ap.add_argument("--device", default="auto", help="auto (cuda when present, else cpu), cpu, cuda")
    ap.add_argument("--child", choices=["ours", "trl"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sizes = {"hidden": args.hidden, "layers": args.layers}
        result = (run_ours(args.model, args.corpus, args.steps, args.max_length, sizes, args.device)
                  if args.child == "ours" else run_trl(args.model, args.corpus, args.steps, sizes, args.device))
        result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result))
        return
    ensure_trl()
    shape = ["--hidden", str(args.hidden), "--layers", str(args.layers), "--device", args.device]
    common = ["--model", args.model, "--steps", str(args.steps), "--max-length", str(args.max_length), *shape]
    ours = child(["--child", "ours", "--corpus", args.corpus, *common])
    trl = child(["--child", "trl", "--corpus", args.corpus, "--steps", str(args.steps * 4), "--model", args.model,
                 *shape])
    big = grow_corpus(args.corpus, 4, ROOT / ".cache" / "bench-corpus-x4")
    ours4 = child(["--child", "ours", "--corpus", big, *common])
    print(f"model {args.model} (hidden {args.hidden}, {args.layers} layers), device {_device(args.device)}, "
          f"corpus {args.corpus}; response tokens/s (first step excluded)")
    print(f"  {'run':<44}{'tokens':>8}{'seconds':>9}{'tok/s':>9}{'peak RSS MiB':>14}{'peak GPU MiB':>14}")
    for name, r in [("pagemill packed alignment SFT", ours), ("TRL SFTTrainer, unpacked, batch 1", trl),
                    ("pagemill packed, corpus x4", ours4)]:
        gpu = f"{r['peak_gpu_mib']:>14.0f}" if r.get("peak_gpu_mib") is not None else f"{'-':>14}"
        print(f"  {name:<44}{r['tokens']:>8}{r['seconds']:>9.1f}{r['tokens_per_s']:>9.0f}"
              f"{r['peak_rss_mib']:>14.0f}{gpu}")
    print(f"  (pagemill's data stream, decode + encode + pack, left out as TRL gets encoded samples: "
          f"{ours['data_seconds']:.1f} s at x1, {ours4['data_seconds']:.1f} s at x4)")
    print(f"speedup packed / TRL: {ours['tokens_per_s'] / trl['tokens_per_s']:.2f}x (target >= 1.5x)")
    print(f"peak RSS corpus x4 / x1: {ours4['peak_rss_mib'] / ours['peak_rss_mib']:.2f} (target: flat)")


if __name__ == "__main__":
    main()
