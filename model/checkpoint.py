"""Training checkpoints that resume exactly: weights, optimizer, schedule, data and RNG state.

Layout of a checkpoint folder (loadable by `model.models.load` as a plain model checkpoint too):

    config.json, model.safetensors, tokenizer/processor files   the model (transformers layout)
    optimizer.safetensors                                       AdamW moments, one tensor per entry
    trainer_state.json                                          step, optimizer hyper-parameters,
                                                                scheduler, data-stream and RNG state
"""

from __future__ import annotations

import hashlib
import json
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

STATE_FILE = "trainer_state.json"
OPTIM_FILE = "optimizer.safetensors"
# Bookkeeping keys transformers writes into config and tokenizer files that say nothing about the model:
# `resume_mismatches` ignores them (a model built from a config and the same model loaded back differ in them).
BOOKKEEPING_KEYS = frozenset({"_name_or_path", "name_or_path", "transformers_version", "dtype", "torch_dtype",
                              "architectures", "is_local", "local_files_only", "_commit_hash"})


def rng_state() -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state().tolist(),
        "numpy": _jsonable(np.random.get_state()),
        "python": _jsonable(random.getstate()),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    np_state = state["numpy"]
    np.random.set_state((np_state[0], np.array(np_state[1], dtype=np.uint32), *np_state[2:]))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))


def _jsonable(obj):
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (tuple, list)):
        return [_jsonable(o) for o in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    return obj


def save_checkpoint(path: str | Path, model, processor, optimizer=None, scheduler=None,
                    state: dict[str, Any] | None = None) -> Path:
    """Write the model (transformers layout), optimizer tensors and a JSON trainer state.

    The files are written into a scratch folder inside ``path`` (the same file system, even when ``path``
    is a mount point or a link to another disk) and then moved in, the trainer state last: a save that
    fails or is killed while writing (seconds for a real model) leaves the checkpoint already in ``path``
    as it was, so ``--resume`` from the folder a run saves into in place stays safe. A kill while the files
    move in (a few renames) would leave files of two saves: the trainer state lists each file's sha256, and
    ``load_checkpoint`` refuses such a mix. Other files in ``path`` (the training logs) are kept.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".saving-", dir=path) as tmp:
        scratch = Path(tmp)
        model.save_pretrained(scratch)
        processor.save_pretrained(scratch)
        doc: dict[str, Any] = {"state": state or {}, "rng": rng_state()}
        if optimizer is not None:
            tensors, meta = _flatten_optimizer(optimizer.state_dict())
            save_file(tensors, str(scratch / OPTIM_FILE))
            doc["optimizer"] = meta
        if scheduler is not None:
            doc["scheduler"] = scheduler.state_dict()
        doc["files"] = {f.name: _sha256(f) for f in sorted(scratch.iterdir()) if f.is_file()}
        (scratch / STATE_FILE).write_text(json.dumps(doc))
        written = sorted(scratch.iterdir(), key=lambda f: f.name == STATE_FILE)  # the state last
        if optimizer is None:
            (path / OPTIM_FILE).unlink(missing_ok=True)  # not another save's moments beside this state
        for f in written:
            f.replace(path / f.name)
    return path


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def load_checkpoint(path: str | Path, model, optimizer=None, scheduler=None,
                    restore_rng: bool = True) -> dict[str, Any]:
    """Load weights into ``model`` (and optimizer/scheduler when given); return the saved state."""
    from model.models import ModelLoadError

    path = Path(path)
    if optimizer is not None and not (path / OPTIM_FILE).exists():
        raise ModelLoadError(f"{path} has no {OPTIM_FILE}: not a training checkpoint to resume from "
                             "(start a new run from its weights instead)")
    doc = json.loads((path / STATE_FILE).read_text()) if (path / STATE_FILE).exists() else {}
    changed = [name for name, digest in doc.get("files", {}).items()
               if not (path / name).is_file() or _sha256(path / name) != digest]
    if changed:  # a save killed while its files moved in: weights of one step, optimizer and state of another
        raise ModelLoadError(f"{path}: {', '.join(changed)} are not the files its {STATE_FILE} was saved with (a "
                             "save was interrupted while moving its files in): resume from an earlier checkpoint")
    # transformers renames keys on save (e.g. Qwen2.5-VL's "model.visual." -> "visual."), so read the
    # weights back through from_pretrained rather than the raw safetensors names.
    saved = type(model).from_pretrained(path, dtype=next(model.parameters()).dtype)
    model.load_state_dict(saved.state_dict(), strict=True)
    del saved
    if optimizer is not None:
        optimizer.load_state_dict(_unflatten_optimizer(load_file(str(path / OPTIM_FILE)),
                                                       doc["optimizer"]))
    if scheduler is not None and "scheduler" in doc:
        scheduler.load_state_dict(doc["scheduler"])
    if restore_rng and "rng" in doc:
        set_rng_state(doc["rng"])
    return doc.get("state", {})


def resume_mismatches(path: str | Path, model, processor, limit: int = 4) -> list[str]:
    """How the checkpoint folder ``path`` differs from ``model``'s config and ``processor``'s files, as
    lines naming the file, the key and both values (empty: the same model and processor).

    Resuming copies only the weights (and optimizer) into ``model``: a model of another config (e.g.
    ``rope_theta``) or a processor of another image normalisation would silently train something
    else. Each side is written the way a checkpoint writes it and compared key by key, ignoring
    `BOOKKEEPING_KEYS`; at most ``limit`` differences are listed per file."""
    path = Path(path)
    out: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        given = Path(tmp)
        model.config.save_pretrained(given)
        processor.save_pretrained(given)
        for f in sorted(given.iterdir()):
            theirs = path / f.name
            if not theirs.exists():
                out.append(f"{f.name}: missing in {path}")
                continue
            if f.suffix != ".json":
                if f.read_bytes() != theirs.read_bytes():
                    out.append(f"{f.name}: differs")
                continue
            diffs = _json_diff(_plain(json.loads(f.read_text())), _plain(json.loads(theirs.read_text())))
            out += [f"{f.name} {d}" for d in diffs[:limit]]
            if len(diffs) > limit:
                out.append(f"{f.name}: {len(diffs) - limit} more differences")
    return out


def _plain(obj):
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items() if k not in BOOKKEEPING_KEYS}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj


def _json_diff(given, saved, key: str = "") -> list[str]:
    """'key: given X, checkpoint Y' for every leaf where two parsed JSON documents differ."""
    if isinstance(given, dict) and isinstance(saved, dict):
        out = []
        for k in sorted(set(given) | set(saved), key=str):
            sub = f"{key}.{k}" if key else str(k)
            if k not in saved:
                out.append(f"{sub}: given {_short(given[k])}, not in the checkpoint")
            elif k not in given:
                out.append(f"{sub}: not given, checkpoint {_short(saved[k])}")
            else:
                out += _json_diff(given[k], saved[k], sub)
        return out
    if given != saved:
        return [f"{key or '(document)'}: given {_short(given)}, checkpoint {_short(saved)}"]
    return []


def _short(value, width: int = 60) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= width else text[:width - 3] + "..."


def _flatten_optimizer(sd: dict) -> tuple[dict[str, torch.Tensor], dict]:
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, entry in sd["state"].items():
        for name, value in entry.items():
            if torch.is_tensor(value):
                tensors[f"{idx}.{name}"] = value.detach().contiguous().clone()
            else:
                scalars.setdefault(str(idx), {})[name] = value
    if not tensors:  # safetensors refuses an empty file
        tensors["__empty__"] = torch.zeros(0)
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key == "__empty__":
            continue
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    for idx, entry in meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(entry)
    return {"state": state, "param_groups": meta["param_groups"]}


def export_tiny(path: str | Path, kind: str = "tiny", seed: int = 0, hidden: int = 64, layers: int = 2) -> Path:
    """A tiny model (random weights, the project tokenizer) saved as a plain checkpoint folder: what
    ``python -m relabel.serve`` serves by default."""
    from model.models import build_tiny, save

    path = Path(path)
    loaded = build_tiny(kind, seed=seed, hidden=hidden, layers=layers)
    tmp = path.with_name(path.name + ".tmp")
    save(loaded.model, loaded.processor, tmp)
    if path.exists():
        import shutil

        shutil.rmtree(path)
    tmp.rename(path)  # complete or absent: make targets test for the folder
    return path


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m model.checkpoint",
                                 description="Export a tiny random-weight VLM checkpoint folder (for relabel.serve).")
    ap.add_argument("--export-tiny", metavar="DIR", required=True, help="the folder to write (replaced if present)")
    ap.add_argument("--kind", default="tiny", choices=("tiny", "tiny-moe"), help="model family (default tiny)")
    ap.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    ap.add_argument("--hidden", type=int, default=64, help="decoder width (default 64)")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    args = ap.parse_args(argv)
    path = export_tiny(args.export_tiny, args.kind, args.seed, args.hidden, args.layers)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
