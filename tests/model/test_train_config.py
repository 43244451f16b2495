"""model/train.py's TrainRunConfig: every phase block is typed and checked when the config is read,
before any training, with errors naming the key's full path; run-level defaults fill the blocks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from model.train import TrainRunConfig, main
from schemas.config import ConfigError

REPO = Path(__file__).resolve().parents[2]
TRAIN_YAML = REPO / "configs" / "train.yaml"
CORPUS_YAML = REPO / "configs" / "train_corpus.yaml"


def test_configs_train_yaml_is_the_curriculum_run():
    cfg = TrainRunConfig.from_yaml(TRAIN_YAML)
    assert cfg.corpus == "out/curriculum" and cfg.eval_fraction == 0.0 and cfg.model == "tiny" and cfg.white_zero
    assert cfg.tiny_sizes["rope_theta"] == 100
    assert cfg.alignment.data.path == "out/curriculum" and cfg.alignment.data.eval_fraction == 0.0
    assert cfg.alignment.optim.train_vision
    assert cfg.alignment.data.domain_rates == {"curriculum-l0": 1.0, "curriculum-l1": 1.0}
    assert cfg.eval_corpus == "out/corpus" and cfg.eval_corpus_fraction == 0.1
    assert cfg.grpo.sources == ("curriculum-l1",)
    # the same pages every step, so the first-10 and last-10 reward means compare the same pages
    assert cfg.grpo.max_prompts == cfg.grpo.prompts_per_step and cfg.grpo.baseline == "group_mean"
    assert cfg.phases == ("alignment", "robustness", "grpo", "merge", "mtp")


def test_configs_train_corpus_yaml_keeps_the_corpus_only_run():
    cfg = TrainRunConfig.from_yaml(CORPUS_YAML)
    assert cfg.alignment.phase == "alignment" and cfg.robustness.phase == "robustness"
    assert cfg.alignment.steps == 250 and cfg.alignment.optim.lr == 3.0e-3 and cfg.alignment.data.pack
    assert cfg.alignment.regularizers.balance == 1.0e-3
    assert cfg.robustness.data.upweight["historical-newspaper"] == 2.0 and not cfg.robustness.data.pack
    assert cfg.grpo.sources == ("jinaocrsynth",) and cfg.grpo.reward.workers == 1 and cfg.grpo.lr == 1.0e-3
    assert (cfg.merge.budget, cfg.merge.workers, cfg.merge.max_new_tokens) == (6, 2, 64)
    assert cfg.mtp.depths == 3 and cfg.mtp.steps == 200 and cfg.mtp.bench_max_new_tokens == 128
    assert cfg.phases == ("alignment", "robustness", "grpo", "merge", "mtp")


@pytest.mark.parametrize("block,path", [
    ({"alignment": {"stepz": 3}}, "train.alignment.stepz"),
    ({"robustness": {"grad_acum": 2}}, "train.robustness.grad_acum"),
    ({"grpo": {"lrr": 1e-3}}, "train.grpo.lrr"),
    ({"merge": {"budgt": 4}}, "train.merge.budgt"),
    ({"mtp": {"depth": 2}}, "train.mtp.depth"),
    ({"alignment": {"optim": {"lrr": 1e-3}}}, "train.alignment.optim.lrr"),
    ({"robustness": {"data": {"max_len": 10}}}, "train.robustness.data.max_len"),
    ({"alignment": {"regularizers": {"balanse": 1.0}}}, "train.alignment.regularizers.balanse"),
    ({"grpo": {"reward": {"workrs": 2}}}, "train.grpo.reward.workrs"),
    ({"grpo": {"reward": {"repeats": {"min_lenght": 5}}}}, "train.grpo.reward.repeats.min_lenght"),
    ({"mtp": {"weights": {"cee": 1.0}}}, "train.mtp.weights.cee"),
    ({"eval_limt": 3}, "train.eval_limt"),
])
def test_a_typo_in_any_block_fails_by_its_full_path(block, path):
    with pytest.raises(ConfigError) as err:
        TrainRunConfig.from_mapping(block)
    message = str(err.value)
    assert message.startswith(f"{path}: unknown key; known keys: "), message


def test_unknown_key_lists_the_known_keys_of_its_block():
    with pytest.raises(ConfigError, match=r"train\.grpo\.lrr: unknown key; known keys: .*\blr\b.*num_rollouts"):
        TrainRunConfig.from_mapping({"grpo": {"lrr": 1e-3}})


@pytest.mark.parametrize("block,message", [
    ({"grpo": {"steps": "many"}}, "train.grpo.steps: expected int, got str 'many'"),
    ({"mtp": {"self_distill": "yes"}}, "train.mtp.self_distill: expected bool, got str 'yes'"),
    ({"merge": {"budget": 2.5}}, "train.merge.budget: expected int, got float 2.5"),
    ({"alignment": {"optim": {"betas": [0.9]}}}, "train.alignment.optim.betas: expected a list of 2 items, got 1"),
    ({"robustness": {"data": {"upweight": {"news": "x"}}}}, "train.robustness.data.upweight.news: expected float"),
    ({"grpo": {"baseline": "mean"}}, "train.grpo.baseline: expected one of 'remax', 'group_mean'"),
    ({"phases": ["alignment", "sft"]}, "train.phases[1]: expected one of 'alignment'"),
    ({"grpo": []}, "train.grpo: expected a mapping of GRPOConfig keys"),
])
def test_a_wrong_type_names_the_path_and_the_expected_type(block, message):
    with pytest.raises(ConfigError) as err:
        TrainRunConfig.from_mapping(block)
    assert str(err.value).startswith(message), str(err.value)


def test_the_mtp_block_fails_at_start_up_before_any_phase_runs(tmp_path, capsys):
    raw = yaml.safe_load(TRAIN_YAML.read_text())
    raw["mtp"]["stepz"] = 3  # the last phase: read only after minutes of training before
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(raw))
    out = tmp_path / "model"
    with pytest.raises(SystemExit) as exited:
        main(["--config", str(config), "--out", str(out), "--corpus", str(tmp_path / "no-corpus")])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("model.train: train.mtp.stepz: unknown key")
    assert not out.exists()  # nothing was built, evaluated or trained


def test_a_missing_corpus_stops_the_cli_before_the_output_folder(tmp_path, capsys):
    out = tmp_path / "model"
    with pytest.raises(SystemExit) as exited:
        main(["--out", str(out), "--corpus", str(tmp_path / "no-corpus")])
    assert exited.value.code == 2
    assert f"no parquet shards at '{tmp_path / 'no-corpus'}'" in capsys.readouterr().err
    assert not out.exists()


def test_run_level_seed_and_corpus_fill_what_a_block_leaves_unset():
    cfg = TrainRunConfig.from_mapping({"seed": 7, "corpus": "c/", "robustness": {"seed": 1, "data": {"seed": 2}},
                                       "grpo": {"seed": 3}})
    assert cfg.alignment.seed == 7 and cfg.alignment.data.seed == 7 and cfg.alignment.data.path == "c/"
    assert cfg.robustness.seed == 1 and cfg.robustness.data.seed == 2 and cfg.robustness.data.path == "c/"
    assert cfg.grpo.seed == 3 and cfg.mtp.seed == 7
    assert cfg.robustness.phase == "robustness"
    with pytest.raises(ConfigError, match=r"^train\.alignment\.phase: must be 'alignment'"):
        TrainRunConfig.from_mapping({"alignment": {"phase": "robustness"}})


def test_set_overrides_merge_into_the_yaml_and_are_checked_too():
    cfg = TrainRunConfig.from_yaml(CORPUS_YAML, ["grpo.steps=2", "mtp.weights.ce=0.5", "seed=4"], out="elsewhere")
    assert cfg.grpo.steps == 2 and cfg.grpo.lr == 1.0e-3  # the rest of the block stays as the YAML has it
    assert cfg.mtp.weights.ce == 0.5 and cfg.mtp.weights.kl == 0.45
    assert cfg.seed == 4 and cfg.alignment.data.seed == 4 and cfg.out == "elsewhere"
    with pytest.raises(ConfigError, match=r"^train\.grpo\.reward\.timeout: unknown key"):
        TrainRunConfig.from_yaml(TRAIN_YAML, ["grpo.reward.timeout=3"])


def test_help_lists_every_phase_key_with_its_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "--set KEY=VALUE" in out
    for key in ("alignment.optim.lr", "robustness.data.degrade_prob", "grpo.reward.workers", "merge.budget",
                "mtp.weights.ce", "mtp.bench_max_new_tokens"):
        assert f"\n  {key} (" in out, key
    assert "grpo.lr (float, default 1e-06): learning rate, constant after warmup" in out


def test_a_phase_cannot_hold_out_other_eval_pages_than_the_run():
    # an alignment block with its own eval_fraction would train on the pages every evaluation scores
    message = r"alignment\.data\.eval_fraction: 0\.0 differs from the run's eval_fraction 0\.2"
    with pytest.raises(ConfigError, match=message):
        TrainRunConfig.from_mapping({"corpus": "c/", "eval_fraction": 0.2,
                                     "alignment": {"data": {"eval_fraction": 0.0}}})
    cfg = TrainRunConfig.from_mapping({"corpus": "c/", "eval_fraction": 0.2,
                                       "robustness": {"data": {"eval_fraction": 0.2}}})
    assert cfg.robustness.data.eval_fraction == 0.2
    # another corpus's split is its own
    other = TrainRunConfig.from_mapping({"corpus": "c/", "robustness": {"data": {"path": "d/", "eval_fraction": 0.0}}})
    assert other.robustness.data.eval_fraction == 0.0


def test_the_config_file_is_read_as_yaml_1_2_and_a_bad_one_stops_the_cli_in_one_line(tmp_path, capsys):
    config = tmp_path / "train.yaml"
    config.write_text("alignment:\n  optim: {lr: 5e-4}\n")  # YAML 1.1 reads 5e-4 as a string
    assert TrainRunConfig.from_yaml(config, ["grpo.lr=1e-4"]).alignment.optim.lr == 0.0005
    assert TrainRunConfig.from_yaml(config, ["grpo.lr=1e-4"]).grpo.lr == 0.0001
    config.write_text("grpo:\n  steps: 7\nseed: 0\ngrpo:\n  temperature: 0.5\n")
    with pytest.raises(ConfigError, match=r": grpo: key given twice \(lines 1 and 4\)$"):
        TrainRunConfig.from_yaml(config)
    config.write_text("grpo:\n\tsteps: 7\n")
    for args in (["--config", str(config)], ["--set", "grpo.steps=[1,"]):
        with pytest.raises(SystemExit) as exited:
            main([*args, "--out", str(tmp_path / "model"), "--corpus", str(tmp_path / "no-corpus")])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("model.train: ") and "line " in err and err.count("\n") == 1


def test_the_phase_clis_read_their_config_as_the_project_does_and_stop_in_one_line(tmp_path, capsys):
    """model.sft, model.grpo and model.rewards read --config with plain yaml.safe_load: a tab was a
    traceback, and a key given twice silently kept the last."""
    from model import grpo, rewards, sft

    tab, twice = tmp_path / "tab.yaml", tmp_path / "twice.yaml"
    tab.write_text("steps:\n\t3\n")
    twice.write_text("steps: 3\nsteps: 4\n")
    for config, problem in ((tab, "line 2"), (twice, "key given twice")):
        for name, cli in (("model.sft", sft.main), ("model.grpo", grpo.main)):
            with pytest.raises(SystemExit) as exited:
                cli(["--config", str(config), "--out", str(tmp_path / "out")])
            err = capsys.readouterr().err
            assert exited.value.code == 2 and err.startswith(f"{name}: ") and problem in err, (name, err)
        assert rewards.main(["--config", str(config)]) != 0
        err = capsys.readouterr().err
        assert problem in err and "Traceback" not in err
