import json
import threading

import pytest
import torch

from model.merge import (
    MergeCandidate,
    MergeError,
    apply,
    dare,
    drop_and_rescale,
    linear,
    merge_search,
    task_arithmetic,
    ties,
    trim,
    write_merged,
)


def sd(w, step=0, mtp=None):
    d = {"w": torch.tensor(w, dtype=torch.float32), "step": torch.tensor(step, dtype=torch.int64),
         "mask": torch.tensor([True, False])}
    if mtp is not None:
        d["mtp.proj"] = torch.tensor(mtp, dtype=torch.bfloat16)
    return d


BASE = sd([0.0, 0.0, 0.0, 0.0], step=7, mtp=[1.0, 1.0])
A = sd([3.0, -2.0, 1.0, 0.5], step=1, mtp=[2.0, 1.0])
B = sd([1.0, 2.0, -3.0, 0.25], step=2, mtp=[1.0, 3.0])


# --------------------------------------------------------------------------- merge primitives

def test_linear_weighted_mean_and_non_float_copied():
    out = linear([A, B], [3.0, 1.0])
    assert torch.allclose(out["w"], torch.tensor([2.5, -1.0, 0.0, 0.4375]))
    assert torch.allclose(out["mtp.proj"].float(), torch.tensor([1.75, 1.5]))  # draft-head keys merge too
    assert out["mtp.proj"].dtype == torch.bfloat16
    assert out["step"].item() == 1 and out["mask"].tolist() == [True, False]


def test_task_arithmetic_by_hand_non_float_from_base():
    out = task_arithmetic(BASE, [A, B], [1.0, 1.0], lam=0.5)
    assert torch.allclose(out["w"], torch.tensor([2.0, 0.0, -1.0, 0.375]))
    assert torch.allclose(out["mtp.proj"].float(), torch.tensor([1.5, 2.0]))  # 1 + 0.5 * ([1,0] + [0,2])
    assert out["step"].item() == 7


def test_trim_keeps_top_density_magnitudes():
    assert trim(torch.tensor([3.0, -2.0, 1.0, 0.5]), 0.5).tolist() == [3.0, -2.0, 0.0, 0.0]
    assert trim(torch.tensor([1.0, -4.0, 2.0]), 0.2).tolist() == [0.0, -4.0, 0.0]  # ceil(0.6) = 1
    with pytest.raises(MergeError):
        trim(torch.tensor([1.0]), 0.0)


def test_ties_by_hand():
    # tau_A = [3,-2,1,.5], tau_B = [1,2,-3,.25]; density 0.5 trims to [3,-2,0,0] and [0,2,-3,0]
    # elected signs: +, 0 (tie), -, 0 -> disjoint means 3, 0, -3, 0
    out = ties(BASE, [A, B], [1.0, 1.0], density=0.5, lam=1.0)
    assert torch.allclose(out["w"], torch.tensor([3.0, 0.0, -3.0, 0.0]))
    # full density, weights 1 and 3: weighted [3,-2,1,.5] and [3,6,-9,.75] -> signs +,+,-,+
    # entry 0: (3+3)/(1+3); entry 1: 6/3; entry 2: -9/3; entry 3: (.5+.75)/4; lam 2 doubles
    out = ties(BASE, [A, B], [1.0, 3.0], density=1.0, lam=2.0)
    assert torch.allclose(out["w"], 2 * torch.tensor([1.5, 2.0, -3.0, 0.3125]))
    assert out["step"].item() == 7


def test_dare_drop_zero_equals_task_arithmetic_and_ties():
    assert torch.equal(dare(BASE, [A, B], [0.5, 0.5], p=0.0)["w"], task_arithmetic(BASE, [A, B], [0.5, 0.5])["w"])
    assert torch.equal(dare(BASE, [A, B], [1.0, 3.0], p=0.0, combine="ties", lam=2.0)["w"],
                       ties(BASE, [A, B], [1.0, 3.0], density=1.0, lam=2.0)["w"])


def test_drop_and_rescale_entries_are_zero_or_scaled():
    tau = torch.arange(1, 2001, dtype=torch.float32)
    out = drop_and_rescale(tau, 0.75, torch.Generator().manual_seed(3))
    kept = out != 0
    assert torch.equal(out[kept], tau[kept] * 4.0)  # 1/(1-p)
    assert 0.7 < 1 - kept.float().mean().item() < 0.8
    with pytest.raises(MergeError):
        drop_and_rescale(tau, 1.0, torch.Generator())


def test_dare_is_seeded_and_rescales():
    big_base = {"w": torch.zeros(1000)}
    big = {"w": torch.ones(1000)}
    one = dare(big_base, [big], [1.0], p=0.5, seed=1)["w"]
    assert set(one.unique().tolist()) == {0.0, 2.0}
    assert torch.equal(one, dare(big_base, [big], [1.0], p=0.5, seed=1)["w"])
    assert not torch.equal(one, dare(big_base, [big], [1.0], p=0.5, seed=2)["w"])


def test_mismatched_state_dicts_refused():
    with pytest.raises(MergeError):
        linear([A, {"w": torch.zeros(4)}], [1.0, 1.0])
    with pytest.raises(MergeError):
        task_arithmetic(BASE, [A], [1.0, 1.0])


def test_candidate_validates_and_applies():
    with pytest.raises(MergeError):
        MergeCandidate("slerp", {}, (1.0,))
    with pytest.raises(MergeError):
        MergeCandidate("linear", {"lam": 1.0}, (1.0,))
    c = MergeCandidate("ties", {"density": 0.5, "lam": 1.0}, (1.0, 1.0))
    assert torch.equal(apply(c, BASE, [A, B])["w"], ties(BASE, [A, B], [1.0, 1.0], 0.5, 1.0)["w"])
    assert MergeCandidate.from_json(json.loads(json.dumps(c.to_json()))) == c


# --------------------------------------------------------------------------- search

def synthetic_scores(c: MergeCandidate) -> dict:
    """Known optimum: TIES with density 0.35 and weights (0.6, 0.4); every other method scores 0.2."""
    if c.method != "ties":
        return {"unit_test_pass_rate": 0.2, "edit_distance": 0.1}
    gap = abs(c.params["density"] - 0.35) + abs(c.weights[0] - 0.6)
    return {"unit_test_pass_rate": 1.0 - gap, "edit_distance": 0.1}


def test_search_respects_budget_and_logs_every_evaluation(tmp_path):
    calls = []
    lock = threading.Lock()

    def evaluate(c):
        with lock:
            calls.append(c)
        return synthetic_scores(c)

    log_path = tmp_path / "search.jsonl"
    result = merge_search(BASE, [A, B], evaluate, budget=7, workers=2, seed=0, log_path=log_path)
    assert len(calls) == 7 and len(result.log) == 7
    lines = [json.loads(x) for x in log_path.read_text().splitlines()]
    assert len(lines) == 7
    assert [x["index"] for x in lines] == list(range(7))
    assert all({"candidate", "scores", "objective", "wall_s"} <= set(x) for x in lines)
    assert len({json.dumps(x["candidate"], sort_keys=True) for x in lines}) == 7  # nothing evaluated twice


def test_search_finds_known_optimum():
    result = merge_search(None, 2, synthetic_scores, budget=60, workers=2, seed=0)
    best = result.best
    assert best.objective == max(e.objective for e in result.log)
    assert best.candidate.method == "ties"
    assert abs(best.candidate.params["density"] - 0.35) < 0.05
    assert abs(best.candidate.weights[0] - 0.6) < 0.05
    # local search improved on the grid, which only had density 0.5 / 0.2 and uniform weights
    grid_best = max(e.objective for e in result.log if e.round == 0)
    assert best.objective > grid_best


def test_search_runs_evaluations_in_parallel():
    events = []
    lock = threading.Lock()
    two_running = threading.Event()
    active = [0]

    def evaluate(c):
        with lock:
            events.append(("start", c.key()))
            active[0] += 1
            if active[0] >= 2:
                two_running.set()
        # The first evaluation waits until a second one has started; serial execution would leave it
        # waiting out this guard timeout and the overlap assertion below would fail.
        two_running.wait(timeout=30)
        with lock:
            active[0] -= 1
            events.append(("end", c.key()))
        return synthetic_scores(c)

    merge_search(None, 2, evaluate, budget=4, workers=2, seed=0)
    depth, max_depth = 0, 0
    for kind, _ in events:
        depth += 1 if kind == "start" else -1
        max_depth = max(max_depth, depth)
    assert max_depth == 2 and len(events) == 8


def test_failed_evaluation_is_logged_and_counted():
    def evaluate(c):
        if c.method == "dare":
            raise RuntimeError("out of memory")
        return synthetic_scores(c)

    result = merge_search(None, 2, evaluate, budget=6, workers=2, seed=0)
    failed = [e for e in result.log if e.error]
    assert failed and all("out of memory" in e.error for e in failed) and len(result.log) == 6
    assert result.best.error is None


def test_write_merged_saves_via_callable(tmp_path):
    result = merge_search(BASE, [A, B], synthetic_scores, budget=4, workers=2, seed=0)
    saved = {}

    def save_fn(state, out):
        saved["state"], saved["out"] = state, out

    out = write_merged(result.best, BASE, [A, B], tmp_path / "merged", save_fn)
    assert saved["out"] == out
    assert torch.equal(saved["state"]["w"], apply(result.best.candidate, BASE, [A, B])["w"])
    info = json.loads((out / "merge.json").read_text())
    assert info["candidate"] == result.best.candidate.to_json() and info["scores"] == result.best.scores


# --------------------------------------------------------------------------- CLI on real checkpoints

def test_cli_merges_checkpoint_folders(tmp_path):
    from model.merge import main
    from model.models import build_tiny, load, save

    folders = []
    for seed in (0, 1, 2):
        t = build_tiny("tiny", seed=seed)
        save(t.model, t.processor, tmp_path / f"m{seed}")
        folders.append(t.model.state_dict())
    main(["--base", str(tmp_path / "m0"), "--models", str(tmp_path / "m1"), str(tmp_path / "m2"),
          "--method", "task_arithmetic", "--weights", "1", "1", "--lam", "0.5", "--out", str(tmp_path / "out")])
    merged = load(str(tmp_path / "out")).model.state_dict()
    key = "lm_head.weight"
    base, a, b = (f[key] for f in folders)
    assert torch.allclose(merged[key], base + 0.5 * ((a - base) + (b - base)), atol=1e-6)
    assert json.loads((tmp_path / "out" / "merge.json").read_text())["candidate"]["method"] == "task_arithmetic"
