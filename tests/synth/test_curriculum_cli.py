"""``python -m synth.curriculum``'s arguments: a bad ``--levels`` or page count is a usage error (exit 2, one
argparse line) before anything is written; ``--train 0`` writes no train pages rather than the default."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from synth import curriculum
from synth.curriculum import build


@pytest.mark.parametrize("args,message", [
    (["--levels", "0,0"], "levels [0] given more than once"),
    (["--levels", "1,2,1"], "levels [1] given more than once"),
    (["--levels", "a"], "'a' is not a comma-separated list of levels"),
    (["--levels", ""], "is not a comma-separated list of levels"),
    (["--levels", "0,9"], "unknown levels [9]"),
    (["--train", "-1"], "-1 is not a page count (an integer >= 0)"),
    (["--eval", "-3"], "-3 is not a page count"),
    (["--train", "x"], "'x' is not a page count"),
])
def test_a_bad_level_list_or_page_count_is_a_usage_error(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exited:
        curriculum.main(["--out", str(tmp_path / "cur"), *args])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "cur").exists()


def test_train_zero_writes_no_train_pages(tmp_path, capsys):
    curriculum.main(["--out", str(tmp_path), "--levels", "0", "--train", "0", "--eval", "1"])
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["pages"] == {"train": {"curriculum-l0": 0}, "eval": {"curriculum-l0": 1}}
    assert pq.ParquetFile(tmp_path / "data" / "train-00000-of-00001.parquet").metadata.num_rows == 0
    assert pq.ParquetFile(tmp_path / "data" / "eval-00000-of-00001.parquet").metadata.num_rows == 1


def test_levels_keep_their_order_and_ids_are_unique(tmp_path, capsys):
    curriculum.main(["--out", str(tmp_path), "--levels", "1,0", "--train", "2", "--eval", "0"])
    assert json.loads(capsys.readouterr().out)["levels"] == [1, 0]
    ids = pq.read_table(tmp_path / "data" / "train-00000-of-00001.parquet", columns=["id"]).column("id").to_pylist()
    assert len(ids) == 4 and len(set(ids)) == 4


@pytest.mark.parametrize("kwargs", [{"levels": (0, 0)}, {"levels": ()}, {"levels": (7,)},
                                    {"levels": (0,), "train_per_level": -1}, {"levels": (0,), "eval_per_level": -1}])
def test_build_refuses_what_the_cli_refuses(tmp_path, kwargs):
    with pytest.raises(ValueError):
        build(tmp_path / "cur", **kwargs)
    assert not (tmp_path / "cur").exists()
