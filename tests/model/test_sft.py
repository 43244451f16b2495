"""model/sft.py, optim.py, checkpoint.py: the loss, the schedule, what each phase trains, exact resume."""

from __future__ import annotations

import json
import math

import pytest
import torch

from model.checkpoint import load_checkpoint, save_checkpoint
from model.models import ModelLoadError, build_tiny, load, projector, save, vision_tower
from model.optim import OptimConfig, lr_factor, param_groups
from model.sft import SFTConfig, response_ce, train_sft
from schemas.config import load as load_config


def sft_config(corpus: str, steps: int, **over) -> SFTConfig:
    raw = {"steps": steps, "log_every": 0, "optim": {"lr": 2e-3, "warmup_steps": 2},
           "data": {"path": corpus, "max_length": 256, "max_sample_tokens": 200, "seed": 1}}
    raw.update(over)
    return load_config(SFTConfig, raw, "sft")


def test_response_ce_matches_hand_computation():
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0]]])
    labels = torch.tensor([[-100, 1, 2]])  # position 0 predicts label 1, position 1 predicts label 2
    loss, n = response_ce(logits, labels)
    expected = -math.log(math.exp(0) / (math.exp(2) + 2)) - math.log(1 / (2 + math.exp(1)))
    assert n == 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_lr_schedule_warms_up_then_decays_to_floor():
    f = [lr_factor(s, warmup=4, total=20, min_ratio=0.1) for s in range(21)]
    assert f[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert all(a >= b for a, b in zip(f[4:], f[5:]))
    assert f[20] == pytest.approx(0.1)


@pytest.mark.parametrize("phase,vision_trains", [("alignment", False), ("robustness", True), ("grpo", False)])
def test_phases_train_what_table3_says(phase, vision_trains):
    model = build_tiny("tiny").model
    groups = param_groups(model, phase, OptimConfig(lr=1e-3, vision_lr=1e-5))
    proj = {id(p) for p in projector(model).parameters()}
    tower = [p for p in vision_tower(model).parameters() if id(p) not in proj]
    assert all(p.requires_grad == vision_trains for p in tower)
    assert all(p.requires_grad for p in projector(model).parameters())
    assert model.lm_head.weight.requires_grad
    assert {g["lr"] for g in groups} == ({1e-3, 1e-5} if vision_trains else {1e-3})


def test_alignment_leaves_vision_tower_unchanged_and_moves_decoder(small_corpus, tmp_path):
    loaded = build_tiny("tiny")
    before = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    history = train_sft(loaded, sft_config(small_corpus, 3), tmp_path / "ckpt", progress=False)
    after = loaded.model.state_dict()
    proj = {n for n, _ in projector(loaded.model).named_parameters()}
    tower = [k for k in before if k.startswith("model.visual.") and k[len("model.visual."):] not in
             {f"merger.{n}" for n in proj}]
    assert tower and all(torch.equal(before[k], after[k]) for k in tower)
    assert not torch.equal(before["lm_head.weight"], after["lm_head.weight"])
    assert len(history) == 3 and all(h.response_tokens > 0 for h in history)
    assert (tmp_path / "ckpt" / "model.safetensors").exists()
    assert (tmp_path / "ckpt" / "optimizer.safetensors").exists()
    logged = [json.loads(line) for line in (tmp_path / "ckpt" / "train_log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged] == [1, 2, 3]


@pytest.mark.parametrize("kind,over", [
    ("tiny", {}),
    ("tiny-moe", {"regularizers": {"balance": 1e-2, "z_loss": 1e-3, "contrastive": 0.1},
                  "grad_accum": 2, "data": None}),
])
def test_resume_is_exact(small_corpus, tmp_path, kind, over):
    """2N steps in one go == N steps, a fresh process state, then N more from the checkpoint."""
    over = dict(over)
    if over.get("data", 1) is None:
        over.pop("data")
    cfg = sft_config(small_corpus, 4, **over)
    straight = build_tiny(kind, seed=5)
    train_sft(straight, cfg, tmp_path / "straight", progress=False)

    half = build_tiny(kind, seed=5)
    train_sft(half, cfg, tmp_path / "half", progress=False, stop_after=2)
    torch.manual_seed(12345)  # whatever happens in between must not matter
    resumed = build_tiny(kind, seed=99)
    train_sft(resumed, cfg, tmp_path / "resumed", resume_from=tmp_path / "half", progress=False)

    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])][:3]


def test_checkpoint_round_trip_loads_as_model(small_corpus, tmp_path):
    loaded = build_tiny("tiny")
    train_sft(loaded, sft_config(small_corpus, 1), tmp_path / "c", progress=False)
    again = load(str(tmp_path / "c"))
    assert all(torch.equal(v, again.model.state_dict()[k]) for k, v in loaded.model.state_dict().items())
    fresh = build_tiny("tiny", seed=3)
    state = load_checkpoint(tmp_path / "c", fresh.model)
    assert state["step"] == 1 and state["phase"] == "alignment"


def test_a_save_that_fails_midway_leaves_the_checkpoint_in_place_as_it_was(small_corpus, tmp_path, monkeypatch):
    loaded = build_tiny("tiny")
    train_sft(loaded, sft_config(small_corpus, 1), tmp_path / "c", progress=False)
    before = {f.name: f.read_bytes() for f in (tmp_path / "c").iterdir()}
    other = build_tiny("tiny", seed=3)

    def broken(path):  # the processor's files fail after the new weights were written
        raise OSError("disk full")

    monkeypatch.setattr(other.processor, "save_pretrained", broken)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path / "c", other.model, other.processor, state={"step": 9})
    assert {f.name: f.read_bytes() for f in (tmp_path / "c").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # no scratch folder left
    monkeypatch.undo()
    save_checkpoint(tmp_path / "c", other.model, other.processor, state={"step": 9})
    assert load_checkpoint(tmp_path / "c", loaded.model)["step"] == 9
    assert all(torch.equal(v, other.model.state_dict()[k]) for k, v in loaded.model.state_dict().items())
    assert "train_log.jsonl" in {f.name for f in (tmp_path / "c").iterdir()}  # the logs stay
    assert "optimizer.safetensors" not in {f.name for f in (tmp_path / "c").iterdir()}  # not the old run's


def test_a_checkpoint_folder_linked_to_another_disk_saves(tmp_path):
    """The scratch folder is inside the checkpoint folder, so moving the files in never crosses file systems
    (a checkpoint folder that is a mount point or a link to /dev/shm failed with EXDEV)."""
    import os
    import shutil
    import tempfile

    other = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        (tmp_path / "c").symlink_to(other, target_is_directory=True)
        loaded = build_tiny("tiny")
        save_checkpoint(tmp_path / "c", loaded.model, loaded.processor, state={"step": 3})
        assert load_checkpoint(tmp_path / "c", build_tiny("tiny", seed=3).model)["step"] == 3
        assert not [p for p in os.listdir(other) if p.startswith(".saving-")]
    finally:
        shutil.rmtree(other)


def test_missing_checkpoint_and_tokenizer_mismatch_fail_before_training(tmp_path):
    with pytest.raises(ModelLoadError, match="not a local folder"):
        load(str(tmp_path / "nope"))
    small = build_tiny("tiny", vocab_size=100)  # embeds fewer rows than the tokenizer has tokens
    save(small.model, small.processor, tmp_path / "small")
    with pytest.raises(ModelLoadError, match="tokenizer has"):
        load(str(tmp_path / "small"))


def test_an_incomplete_checkpoint_or_a_folder_named_like_a_built_in_model_fails_in_one_line(tmp_path, monkeypatch,
                                                                                             capsys):
    from model.eval import main as eval_main

    loaded = build_tiny("tiny")
    save(loaded.model, loaded.processor, tmp_path / "ck")
    (tmp_path / "ck" / "model.safetensors").unlink()  # a copy that lost its weights
    with pytest.raises(ModelLoadError, match="cannot be loaded: OSError"):
        load(str(tmp_path / "ck"))
    with pytest.raises(SystemExit) as exited:  # the CLIs: one line naming it, exit 2 (was a traceback)
        eval_main(["--model", str(tmp_path / "ck"), "--corpus", str(tmp_path)])
    assert exited.value.code == 2 and "cannot be loaded" in capsys.readouterr().err
    save(loaded.model, loaded.processor, tmp_path / "tiny")
    monkeypatch.chdir(tmp_path)  # "tiny" is both the built-in model and a saved folder here: which one?
    with pytest.raises(ModelLoadError, match="pass ./tiny for the folder"):
        load("tiny")
    assert load("./tiny").source.endswith("tiny")


def test_resume_refuses_a_checkpoint_whose_files_come_from_two_saves(tmp_path):
    """A kill while a save moves its files in leaves new weights beside the old optimizer and state: resuming
    from it trained silently from a mix."""
    import torch

    from model.checkpoint import load_checkpoint, save_checkpoint

    loaded = build_tiny("tiny")
    optimizer = torch.optim.AdamW(loaded.model.parameters(), lr=1e-3)
    save_checkpoint(tmp_path / "c", loaded.model, loaded.processor, optimizer, state={"step": 2})
    assert load_checkpoint(tmp_path / "c", build_tiny("tiny").model,
                           torch.optim.AdamW(build_tiny("tiny").model.parameters()))["step"] == 2
    later = build_tiny("tiny", seed=1)
    save_checkpoint(tmp_path / "later", later.model, later.processor, optimizer, state={"step": 4})
    (tmp_path / "later" / "model.safetensors").replace(tmp_path / "c" / "model.safetensors")  # moved in, then killed
    fresh = build_tiny("tiny")
    with pytest.raises(ModelLoadError, match="model.safetensors are not the files its trainer_state.json"):
        load_checkpoint(tmp_path / "c", fresh.model, torch.optim.AdamW(fresh.model.parameters()))
