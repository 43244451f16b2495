import json
import subprocess
import sys

from schemas.score import main
from schemas.similarity import METRICS
from tests.helpers import REPO

REFERENCE = r"""# Results

The loss is $L = \frac{1}{2} x^2$.

<table><tr><th>Model</th><th>Score</th></tr><tr><td>A</td><td>1.0</td></tr></table>
"""
CANDIDATE = r"""# Results

The loss is $L = \dfrac12 x^{2}$.

<table><tr><th>Model</th><th>Score</th></tr><tr><td>A</td><td>1.5</td></tr></table>
"""


def test_cli_json(tmp_path):
    ref, cand = tmp_path / "ref.md", tmp_path / "cand.md"
    ref.write_text(REFERENCE, encoding="utf-8")
    cand.write_text(CANDIDATE, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "schemas.score", "--reference", str(ref), "--candidate", str(cand),
                           "--json"], check=False, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == set(METRICS)
    assert out["formula"]["score"] == 1.0
    # 2 rows + 4 cells; "1.0" -> "1.5" costs 1/3: TEDS = 1 - (1/3)/6.
    assert abs(out["teds"]["score"] - (1 - (1 / 3) / 6)) < 1e-6
    assert out["teds_s"]["score"] == 1.0


def test_cli_table_marks_missing_structure_na(tmp_path, capsys):
    ref, cand = tmp_path / "ref.md", tmp_path / "cand.md"
    ref.write_text("Just words.", encoding="utf-8")
    cand.write_text(CANDIDATE, encoding="utf-8")
    assert main(["--reference", str(ref), "--candidate", str(cand)]) == 0
    lines = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()[2:]}
    assert set(lines) == set(METRICS)
    assert lines["teds"] == lines["formula"] == "n/a"
    assert lines["tag_closure"] == "1.0000"
    assert main(["--reference", str(tmp_path / "missing.md"), "--candidate", str(cand)]) == 2


def test_cli_names_the_file_it_cannot_decode_and_ignores_a_byte_order_mark(tmp_path, capsys):
    ref, bom, latin1 = tmp_path / "ref.md", tmp_path / "bom.md", tmp_path / "latin1.md"
    ref.write_text(REFERENCE, encoding="utf-8")
    bom.write_text(REFERENCE, encoding="utf-8-sig")
    latin1.write_bytes("Caf\u00e9 au lait".encode("latin-1"))
    assert main(["--reference", str(ref), "--candidate", str(bom), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(v["score"] in (None, 1.0) for v in out.values()), out  # the same text: nothing to lose
    assert main(["--reference", str(ref), "--candidate", str(latin1)]) == 2
    err = capsys.readouterr().err
    assert f"--candidate {latin1}" in err and "utf-8" in err
