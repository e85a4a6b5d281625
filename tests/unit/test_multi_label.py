"""Multi-label classification: reading label lists, the BCE objective's target count, and the metrics
(checked against scikit-learn)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from fixed_logits import FixedLogits
from torch import nn

from bertkit.errors import BertkitError
from bertkit.tasks.classification import MultiLabelObjective, multi_hot, multi_label_metrics
from bertkit.tasks.data import read_task_data


def test_reads_lists_from_json_lines_and_joined_strings_from_csv(tmp_path: Path) -> None:
    jsonl = tmp_path / "a.jsonl"
    rows = [{"text": "one", "labels": ["b", "a", "b"]}, {"text": "two", "labels": []}, {"text": "3", "labels": "c|a"}]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data = read_task_data(jsonl, label_field="labels", label_type="list")
    assert data.labels == [["b", "a"], [], ["c", "a"]]
    assert data.label_counts() == {"a": 2, "b": 1, "c": 1}

    csv = tmp_path / "a.csv"
    csv.write_text('text,labels\n"x, y", a ; b \nz,c\n', encoding="utf-8")
    assert read_task_data(csv, label_field="labels", label_type="list", label_separator=";").labels == [
        ["a", "b"],
        ["c"],
    ]


@pytest.mark.parametrize(("cell", "needle"), [("", "empty labels"), ("a||b", "empty part")])
def test_bad_label_strings_name_the_row(tmp_path: Path, cell: str, needle: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(f"text,labels\nfine,a\nbroken,{cell}\n", encoding="utf-8")
    with pytest.raises(BertkitError, match=rf"row 3 \(line 3\): .*{needle}"):
        read_task_data(path, label_field="labels", label_type="list")
    skipped = read_task_data(path, label_field="labels", label_type="list", skip_bad_rows=True)
    assert skipped.labels == [["a"]] and skipped.skipped == 1


def test_multi_hot_refuses_unknown_labels() -> None:
    assert multi_hot([["b"], [], ["a", "b"]], ["a", "b"], "f").tolist() == [[0, 1], [0, 0], [1, 1]]
    with pytest.raises(BertkitError, match=r"labels \['z'\] do not occur"):
        multi_hot([["z"]], ["a", "b"], "eval.jsonl")


def test_metrics_match_scikit_learn() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    gold = rng.random((200, 6)) < 0.3
    predicted = rng.random((200, 6)) < 0.3
    gold[:, 5] = predicted[:, 5] = False  # a label neither side has: no defined F1, left out of the macro mean
    ours = multi_label_metrics(predicted, gold)
    assert ours["micro_f1"] == pytest.approx(metrics.f1_score(gold, predicted, average="micro"), abs=1e-4)
    macro = metrics.f1_score(gold, predicted, average="macro", labels=[0, 1, 2, 3, 4])
    assert ours["macro_f1"] == pytest.approx(macro, abs=1e-4)
    assert ours["subset_accuracy"] == pytest.approx(metrics.accuracy_score(gold, predicted), abs=1e-4)


def test_objective_counts_pairs_and_splits_exactly() -> None:
    """The loss contract: target = one (example, label) pair, count = examples x labels; micro-batches with
    the global totals sum to the whole batch's mean BCE."""
    torch.manual_seed(0)
    model = FixedLogits(torch.randn(8, 3))
    batch = {
        "input_ids": torch.arange(8).unsqueeze(1),
        "attention_mask": torch.ones(8, 1, dtype=torch.long),
        "labels": (torch.rand(8, 3) < 0.4).float(),
    }
    objective = MultiLabelObjective()
    assert objective.counts(batch) == {"multi_label": 24.0}
    whole, _ = objective(model, batch)
    expected = nn.functional.binary_cross_entropy_with_logits(model.table.detach(), batch["labels"])
    assert whole.item() == pytest.approx(expected.item(), rel=1e-6)
    totals = objective.counts(batch)
    parts = [objective(model, {k: v[s] for k, v in batch.items()}, totals)[0] for s in (slice(0, 3), slice(3, 8))]
    assert sum(p.item() for p in parts) == pytest.approx(whole.item(), rel=1e-6)


def test_reads_parquet_lists_and_datasets_sequence_of_classlabel(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a", "b"], "tags": [["x", "y"], []]}), tmp_path / "t.parquet")
    assert read_task_data(tmp_path / "t.parquet", label_field="tags", label_type="list").labels == [["x", "y"], []]

    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {"text": datasets.Value("string"), "tags": datasets.Sequence(datasets.ClassLabel(names=["war", "drama"]))}
    )
    datasets.Dataset.from_dict({"text": ["a", "b"], "tags": [[1, 0], [1]]}, features=features).save_to_disk(
        tmp_path / "ds"
    )
    data = read_task_data(tmp_path / "ds", label_field="tags", label_type="list")
    assert data.labels == [["drama", "war"], ["drama"]]
