"""Trainer flows end to end: resuming SFT from the command line, the merge base, the eval split of the eval
command lines, and config values that can never run failing at start-up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from model import eval as eval_cli
from model import mtp as mtp_cli
from model import sft as sft_cli
from model import speculate as speculate_cli
from model import train as train_cli
from model.models import ModelLoadError, build_tiny, save
from model.mtp_head import DraftHead, save_head
from model.records import assigned_split, cli_eval_fraction, has_eval_rows
from model.sft import SFTConfig, train_sft
from model.train import TrainRunConfig, run
from schemas.config import ConfigError
from schemas.config import load as load_config
from tests.helpers import corpus_record, write_records

REPO = Path(__file__).resolve().parents[2]
TRAIN_YAML = REPO / "configs" / "train.yaml"


# --------------------------------------------------------------------------- SFT resume from the command line

SFT_YAML = {"phase": "alignment", "steps": 4, "log_every": 0, "optim": {"lr": 2e-3, "warmup_steps": 2},
            "data": {"max_length": 256, "max_sample_tokens": 200, "seed": 1}}


def make_train_style():
    """A tiny model as configs/train.yaml builds it: neither its config nor its processor is the default."""
    return build_tiny("tiny", seed=0, white_zero=True, rope_theta=100)


@pytest.fixture(scope="module")
def preempted(small_corpus, tmp_path_factory):
    """An uninterrupted 4-step run, and the same run stopped after step 2 (a preempted job's checkpoint)."""
    root = tmp_path_factory.mktemp("resume")
    raw = dict(SFT_YAML, data=dict(SFT_YAML["data"], path=small_corpus))
    (root / "sft.yaml").write_text(yaml.safe_dump(raw))
    cfg = load_config(SFTConfig, raw, "sft")
    train_sft(make_train_style(), cfg, root / "full", progress=False)
    train_sft(make_train_style(), cfg, root / "part", progress=False, stop_after=2)
    return root


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_sft_cli_resume_without_model_continues_the_checkpoints_own_model(preempted, tmp_path):
    """`python -m model.sft --config C --resume DIR --out OUT` ends where the uninterrupted run did: the model
    and processor come from DIR (rope_theta 100, white paper 0), not a default tiny model."""
    sft_cli.main(["--config", str(preempted / "sft.yaml"), "--resume", str(preempted / "part"),
                  "--out", str(tmp_path / "resumed")])
    assert same_weights(preempted / "full", tmp_path / "resumed")
    config = json.loads((tmp_path / "resumed" / "config.json").read_text())
    assert config["text_config"]["rope_parameters"]["rope_theta"] == 100
    assert json.loads((tmp_path / "resumed" / "preprocessor_config.json").read_text())["image_mean"] == [1.0] * 3
    assert json.loads((tmp_path / "resumed" / "trainer_state.json").read_text())["state"]["step"] == 4


def test_sft_cli_resume_defaults_out_to_the_resume_folder(preempted, tmp_path):
    import shutil

    part = tmp_path / "part"
    shutil.copytree(preempted / "part", part)
    sft_cli.main(["--config", str(preempted / "sft.yaml"), "--resume", str(part)])  # continues in place
    assert same_weights(preempted / "full", part)
    logged = [json.loads(line)["step"] for line in (part / "train_log.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 3, 4]
    with pytest.raises(SystemExit) as exited:  # without --resume there is nothing to default to
        sft_cli.main(["--config", str(preempted / "sft.yaml")])
    assert exited.value.code == 2


def test_sft_resume_into_another_model_or_processor_fails_clearly(preempted, small_corpus, tmp_path, capsys):
    yaml_path = str(preempted / "sft.yaml")
    with pytest.raises(SystemExit) as exited:  # the default tiny model: rope_theta 1e6, CLIP normalisation
        sft_cli.main(["--model", "tiny", "--config", yaml_path, "--resume", str(preempted / "part"),
                      "--out", str(tmp_path / "wrong")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"model.sft: cannot resume from {preempted / 'part'}")
    assert "rope_theta" in err and "image_mean" in err
    assert not (tmp_path / "wrong").exists()
    cfg = load_config(SFTConfig, dict(SFT_YAML, data=dict(SFT_YAML["data"], path=small_corpus)), "sft")
    # the library call checks the same: only the processor differs here
    with pytest.raises(ModelLoadError, match=r"preprocessor_config\.json image_mean"):
        train_sft(build_tiny("tiny", rope_theta=100), cfg, tmp_path / "wrong", resume_from=preempted / "part",
                  progress=False)
    # the right model passes the check (given as a folder: the checkpoint itself)
    sft_cli.main(["--model", str(preempted / "part"), "--config", yaml_path, "--resume", str(preempted / "part"),
                  "--out", str(tmp_path / "right")])
    assert same_weights(preempted / "full", tmp_path / "right")


def test_sft_resume_needs_a_training_checkpoint_of_the_same_phase(preempted, small_corpus, tmp_path):
    cfg = load_config(SFTConfig, dict(SFT_YAML, data=dict(SFT_YAML["data"], path=small_corpus)), "sft")
    plain = make_train_style()
    save(plain.model, plain.processor, tmp_path / "plain")  # a model folder without trainer state
    with pytest.raises(ModelLoadError, match="not a training checkpoint"):
        train_sft(make_train_style(), cfg, tmp_path / "x", resume_from=tmp_path / "plain", progress=False)
    robustness = load_config(SFTConfig, {"phase": "robustness", "steps": 4,
                                         "data": {"path": small_corpus, "pack": False}}, "sft")
    with pytest.raises(ModelLoadError, match="alignment SFT checkpoint, the config's phase is robustness"):
        train_sft(make_train_style(), robustness, tmp_path / "x", resume_from=preempted / "part", progress=False)


# --------------------------------------------------------------------------- the merge search's base


def synth_record(n: int):
    text = f"Total revenue {n} grew while costs fell."
    tests = [json.dumps({"type": "present", "text": "revenue", "pdf": "s.pdf", "page": 1, "id": f"p{n}"})]
    return corpus_record("jinaocrsynth", "synthetic-layout", n, response=text, unit_tests=tests)


@pytest.fixture(scope="module")
def train_corpus(tmp_path_factory) -> str:
    records = [corpus_record("docs-a", "docs", n) for n in range(8)] + [synth_record(n) for n in range(6)]
    return write_records(tmp_path_factory.mktemp("train_corpus"), records)


def small_run(corpus: str, out: Path, phases: list[str]) -> TrainRunConfig:
    small_sft = {"steps": 1, "data": {"max_length": 256, "max_sample_tokens": 200}}
    return TrainRunConfig.from_mapping(dict(
        model="tiny", corpus=corpus, out=str(out), phases=phases, eval_fraction=0.3, eval_limit=2,
        eval_max_new_tokens=4, alignment=small_sft,
        robustness=dict(small_sft, data=dict(small_sft["data"], pack=False)),
        grpo={"num_rollouts": 2, "max_completion_tokens": 4, "prompts_per_step": 1, "steps": 1, "max_prompts": 2,
              "reward": {"workers": 1}},
        merge={"budget": 2, "workers": 1, "max_new_tokens": 4}))


def test_merge_without_sft_takes_the_untrained_model_as_base(train_corpus, tmp_path):
    """phases [grpo, merge]: GRPO starts from the untrained model, which is the merge's theta_0 (there is no
    sft-alignment to load)."""
    out = tmp_path / "model"
    results = run(small_run(train_corpus, out, ["grpo", "merge"]))
    assert results["merge"]["base"] == str(out / "untrained")
    assert results["merge"]["checkpoints"] == [str(out / "untrained"), str(out / "grpo")]
    assert (out / "merged" / "config.json").exists() and not (out / "sft-alignment").exists()


def test_merge_base_is_this_runs_checkpoint_not_a_stale_folder(train_corpus, tmp_path):
    """An sft-alignment left in ``out`` by an earlier run (here of another size) is not this run's: without
    alignment in phases the base is this run's untrained model."""
    out = tmp_path / "model"
    stale = build_tiny("tiny", hidden=64, layers=2)
    save(stale.model, stale.processor, out / "sft-alignment")
    before = (out / "sft-alignment" / "model.safetensors").stat().st_mtime_ns
    results = run(small_run(train_corpus, out, ["robustness", "grpo", "merge"]))
    assert results["merge"]["base"] == str(out / "untrained")
    assert results["merge"]["checkpoints"] == [str(out / "sft-robustness"), str(out / "grpo")]
    assert (out / "sft-alignment" / "model.safetensors").stat().st_mtime_ns == before


@pytest.mark.parametrize("phases,base,candidates", [
    (("alignment", "robustness", "grpo", "merge", "mtp"), "sft-alignment", ["sft-robustness", "grpo"]),
    (("alignment", "grpo", "merge"), "sft-alignment", ["sft-alignment", "grpo"]),
    (("robustness", "grpo", "merge"), "untrained", ["sft-robustness", "grpo"]),
    (("grpo", "merge"), "untrained", ["untrained", "grpo"]),
])
def test_merge_base_and_candidates_follow_the_phases(phases, base, candidates):
    assert train_cli.merge_base(phases) == base and train_cli.merge_candidates(phases) == candidates
    assert TrainRunConfig.from_mapping({"phases": list(phases)}).phases == phases


@pytest.mark.parametrize("phases", [["merge"], ["alignment", "merge"], ["alignment", "robustness", "merge", "mtp"]])
def test_merge_without_two_candidates_fails_at_config_load(phases):
    with pytest.raises(ConfigError, match=r"^train: phases: merge needs at least two candidates.*add grpo"):
        TrainRunConfig.from_mapping({"phases": phases})


# --------------------------------------------------------------------------- config values that can never run


@pytest.mark.parametrize("override,message", [
    ("alignment.steps=0", "train.alignment: steps must be >= 1, got 0"),
    ("alignment.steps=-5", "train.alignment: steps must be >= 1, got -5"),
    ("robustness.grad_accum=0", "train.robustness: grad_accum must be >= 1, got 0"),
    ("alignment.max_grad_norm=0", "train.alignment: max_grad_norm must be > 0"),
    ("alignment.save_every=-1", "train.alignment: save_every must be >= 0"),
    ("merge.budget=0", "train.merge: budget must be >= 1, got 0"),
    ("merge.workers=0", "train.merge: workers must be >= 1, got 0"),
    ("merge.max_pages=0", "train.merge: max_pages must be >= 1 or unset"),
    ("mtp.depths=0", "train.mtp: depths must be >= 1, got 0"),
    ("mtp.steps=0", "train.mtp: steps must be >= 1, got 0"),
    ("mtp.batch_size=0", "train.mtp: batch_size must be >= 1, got 0"),
    ("mtp.bench_pages=0", "train.mtp: bench_pages must be >= 1 or unset"),
    ("mtp.weights.kl=-1", "train.mtp.weights: kl must be >= 0"),
    ("eval_batch_size=0", "train: eval_batch_size: must be >= 1, got 0"),
    ("eval_limit=0", "train: eval_limit: must be >= 1 or unset"),
    ("eval_corpus_fraction=1.5", "train: eval_corpus_fraction: must be in [0, 1]"),
    ("alignment.data.eval_fraction=2", "train.alignment.data: eval_fraction must be in [0, 1], got 2"),
    ("grpo.steps=0", "train: grpo.steps: must be >= 1, got 0"),
])
def test_values_that_can_never_run_fail_at_config_load(override, message):
    with pytest.raises(ConfigError) as err:
        TrainRunConfig.from_yaml(TRAIN_YAML, [override])
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("override,message", [
    ("alignment.grad_accum=0", "train.alignment: grad_accum must be >= 1, got 0"),
    ("model=/nonexistent", "checkpoint '/nonexistent' is not a local folder"),
    ("tiny_sizes={hidden: 130}", "hidden_size must be divisible"),
    ("tiny_sizes={hiden: 64}", "unexpected keyword argument 'hiden'"),
])
def test_cli_stops_cleanly_at_start_up(train_corpus, tmp_path, capsys, override, message):
    out = tmp_path / "model"
    with pytest.raises(SystemExit) as exited:
        train_cli.main(["--config", str(TRAIN_YAML), "--corpus", train_corpus, "--out", str(out),
                        "--set", "eval_corpus=''", "--set", override])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("model.train: ") and message in err and "Traceback" not in err, err
    assert not out.exists()  # nothing was built, evaluated or trained


# --------------------------------------------------------------------------- the eval command lines' split


@pytest.fixture(scope="module")
def split_corpus(tmp_path_factory):
    """A corpus with its own eval split (3 rows written as 'eval') whose train rows include some that a 10%
    id-hash hold-out would move into eval."""
    train = [corpus_record("docs-a", "docs", n) for n in range(24)]
    held = [r.id for r in train if assigned_split(r.id, "train", 0.1) == "eval"]
    assert held, "the fixture needs train rows that hash into a 10% hold-out"
    evals = [corpus_record("docs-a", "docs", 100 + n, split="eval") for n in range(3)]
    root = write_records(tmp_path_factory.mktemp("split_corpus"), train + evals)
    return root, {r.id for r in evals}, set(held)


def test_cli_eval_fraction_holds_out_only_when_the_corpus_has_no_eval_split(split_corpus, train_corpus):
    root, _, _ = split_corpus
    assert has_eval_rows(root) and cli_eval_fraction(root) == 0.0
    assert not has_eval_rows(train_corpus) and cli_eval_fraction(train_corpus) == 0.1
    assert cli_eval_fraction(root, 0.25) == 0.25
    with pytest.raises(ValueError):
        cli_eval_fraction(root, 2.0)


def test_model_eval_cli_reads_only_the_corpus_eval_split(split_corpus, tmp_path, capsys):
    root, eval_ids, held = split_corpus
    report = tmp_path / "eval.json"
    eval_cli.main(["--model", "tiny", "--corpus", root, "--max-new-tokens", "2", "--out", str(report)])
    assert {r["id"] for r in json.loads(report.read_text())["rows"]} == eval_ids
    assert "(eval_fraction 0)" in capsys.readouterr().out
    # an explicit --eval-fraction holds out train rows as before (a make train run with eval_fraction 0.1)
    eval_cli.main(["--model", "tiny", "--corpus", root, "--max-new-tokens", "2", "--out", str(report),
                   "--eval-fraction", "0.1"])
    assert {r["id"] for r in json.loads(report.read_text())["rows"]} == eval_ids | held


def test_speculate_and_mtp_clis_decode_only_the_corpus_eval_split(split_corpus, tmp_path, capsys, monkeypatch):
    root, eval_ids, _ = split_corpus
    verifier = build_tiny("tiny")  # what --checkpoint tiny loads
    save_head(DraftHead.from_verifier(verifier.model, 2), tmp_path / "head")
    speculate_cli.main(["--checkpoint", "tiny", "--head", str(tmp_path / "head"), "--corpus", root, "--limit", "50",
                        "--k", "1", "--max-new-tokens", "2"])
    decoded = {line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("--- ")}
    assert decoded == eval_ids

    benched: list[int] = []

    def bench_table(model, head, prompts, *args, **kwargs):
        benched.append(len(prompts))
        return []

    monkeypatch.setattr("model.decode.bench_table", bench_table)
    speculate_cli.main(["--bench", "--checkpoint", "tiny", "--head", str(tmp_path / "head"), "--corpus", root])
    mtp_cli.main(["--checkpoint", "tiny", "--out", str(tmp_path / "fitted"), "--corpus", root, "--steps", "1",
                  "--batch-size", "2", "--limit", "2", "--max-new-tokens", "2", "--bench"])
    assert benched == [len(eval_ids), len(eval_ids)]
