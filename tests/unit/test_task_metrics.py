"""Fine-tuning metrics against their reference implementations: classification accuracy, macro-F1, MCC and
the positive class's F1 against scikit-learn (accuracy_score, f1_score, matthews_corrcoef), multi-label F1
and subset accuracy against scikit-learn, Pearson and Spearman against scipy.stats (pearsonr, spearmanr),
entity-level NER precision/recall/F1 against seqeval (default mode), and SQuAD exact match and F1 against
values hand-computed by the official SQuAD v1.1 evaluate script's definition."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from fixed_logits import FixedLogits

from bertkit.config.recipe import load_recipe
from bertkit.errors import BertkitError
from bertkit.tasks.classification import (
    ClassificationBatches,
    Examples,
    average_ranks,
    classification_metrics,
    evaluate_classifier,
    multi_label_metrics,
    pearson,
)
from bertkit.tasks.qa import squad_scores
from bertkit.tasks.token_classification import entities, tagging_scores

# Our metrics are rounded to 4 decimals: within half a unit of the 4th decimal of the exact reference.
ROUNDED = 5.1e-5


def _classification_cases() -> list[tuple[str, np.ndarray, np.ndarray, int]]:
    """(name, predicted, gold, num_labels): seeded random arrays, some with a class only one side has."""
    cases = []
    for num_labels in (2, 3, 5):
        for seed in range(4):
            rng = np.random.default_rng(100 * num_labels + seed)
            n = int(rng.integers(5, 120))
            gold = rng.integers(0, num_labels, n)
            # Mostly right, so the correlations are not all near 0.
            predicted = np.where(rng.random(n) < 0.6, gold, rng.integers(0, num_labels, n))
            cases.append((f"{num_labels}-random-{seed}", predicted, gold, num_labels))
    rng = np.random.default_rng(7)
    gold = rng.integers(0, 2, 60)  # classes 0, 1 in the gold; 2 only predicted
    predicted = np.where(rng.random(60) < 0.7, gold, 2)
    cases.append(("3-predicted-not-gold", predicted, gold, 3))
    gold = rng.integers(0, 5, 80)  # class 4 in the gold, never predicted; class 3 predicted, never gold
    gold[gold == 3] = 0
    predicted = np.where(rng.random(80) < 0.5, gold, rng.integers(0, 4, 80))
    predicted[predicted == 4] = 1
    assert 4 in gold and 4 not in predicted and 3 in predicted and 3 not in gold
    cases.append(("5-one-side-only", predicted, gold, 5))
    gold = rng.integers(0, 2, 40)
    cases.append(("2-never-positive", np.zeros(40, dtype=np.int64), gold, 2))  # MCC undefined, f1 0
    cases.append(("2-no-gold-positive", rng.integers(0, 2, 40), np.zeros(40, dtype=np.int64), 2))
    cases.append(("3-all-right", gold.copy(), gold, 3))  # classes 0 and 1 only, both perfect
    return cases


@pytest.mark.parametrize(("predicted", "gold", "num_labels"), [c[1:] for c in _classification_cases()],
                         ids=[c[0] for c in _classification_cases()])  # fmt: skip
def test_classification_metrics_match_scikit_learn(predicted: np.ndarray, gold: np.ndarray, num_labels: int) -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    ours = classification_metrics(predicted, gold, num_labels)
    assert ours["accuracy"] == pytest.approx(metrics.accuracy_score(gold, predicted), abs=ROUNDED)
    # The default labels: the union of the gold and the predicted ones.
    macro = metrics.f1_score(gold, predicted, average="macro", zero_division=0)
    assert ours["macro_f1"] == pytest.approx(macro, abs=ROUNDED)
    assert ours["mcc"] == pytest.approx(metrics.matthews_corrcoef(gold, predicted), abs=ROUNDED)
    if num_labels == 2:
        positive = metrics.f1_score(gold, predicted, pos_label=1, average="binary", zero_division=0)
        assert ours["f1"] == pytest.approx(positive, abs=ROUNDED)
    else:
        assert "f1" not in ours  # a positive class exists only among two


def test_macro_f1_counts_a_class_only_predicted() -> None:
    # Class 2 is predicted once but never gold: its F1 is 0 and it is one of the three averaged classes.
    ours = classification_metrics(np.array([0, 2, 1, 1]), np.array([0, 0, 1, 1]), 3)
    assert ours["macro_f1"] == round((2 / 3 + 1 + 0) / 3, 4)


def test_evaluate_classifier_reports_classification_metrics() -> None:
    rng = np.random.default_rng(3)
    for num_labels in (2, 4):
        n = 37
        gold = rng.integers(0, num_labels, n)
        logits = torch.from_numpy(rng.normal(size=(n, num_labels))).float()
        examples = Examples([np.array([i]) for i in range(n)], [np.array([0]) for _ in range(n)], gold)
        batches = ClassificationBatches(examples, 8, 0, 0, False)
        out = evaluate_classifier(FixedLogits(logits), batches, torch.device("cpu"), batch_size=5)
        expected = classification_metrics(logits.argmax(-1).numpy(), gold, num_labels)
        assert out == {**expected, "examples": n}
        assert ("f1" in out) == (num_labels == 2)


class _Stop(Exception):
    """Raised by the stub model config: finetune got past its label checks."""


class _StopConfig:
    def __getattr__(self, name: str) -> object:
        raise _Stop(name)


@pytest.mark.parametrize(("labels", "metric", "refused"), [
    (["a", "b", "c"], "f1", True), (["a", "b", "c"], "macro_f1", False), (["neg", "pos"], "f1", False),
])  # fmt: skip
def test_finetune_refuses_f1_without_two_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, labels: list[str], metric: str, refused: bool
) -> None:
    from bertkit.pipelines.finetune import run

    # The model is read first; a stub whose config stops the run once the labels have been checked.
    monkeypatch.setattr(run, "load_model_dir", lambda path: (path, None, _StopConfig(), {}, None))
    train_file = tmp_path / "train.csv"
    train_file.write_text("text,label\n" + "".join(f"t{i},{labels[i % len(labels)]}\n" for i in range(12)), "utf-8")
    recipe = load_recipe("finetune-classification", [f"task.metric={metric}"])
    output = tmp_path / "run"
    if refused:
        with pytest.raises(BertkitError, match=r"positive class's F1 of a two-class task.*3 labels.*macro_f1"):
            run.finetune(recipe, tmp_path / "model", train_file, output)  # type: ignore[arg-type]
    else:
        with pytest.raises(_Stop):
            run.finetune(recipe, tmp_path / "model", train_file, output)  # type: ignore[arg-type]
    assert not output.exists()


def test_pearson_and_spearman_match_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(11)
    for _ in range(10):
        n = int(rng.integers(3, 200))
        # Few distinct values on both sides: many ties, which Spearman ranks by their average rank.
        x = rng.integers(0, 6, n).astype(np.float64)
        y = x + rng.integers(-3, 4, n)
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-9)
        assert pearson(average_ranks(x), average_ranks(y)) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-9)
        assert average_ranks(x) == pytest.approx(stats.rankdata(x))
    # Documented departure: a constant side has no defined correlation (scipy: nan), bertkit reports 0.
    assert pearson(np.ones(5), np.arange(5.0)) == 0.0


def test_multi_label_metrics_match_scikit_learn() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(5)
    for _ in range(8):
        rows, labels = int(rng.integers(10, 150)), int(rng.integers(2, 8))
        gold = rng.random((rows, labels)) < rng.uniform(0.1, 0.6)
        predicted = np.where(rng.random((rows, labels)) < 0.7, gold, rng.random((rows, labels)) < 0.3)
        # Every column occurs somewhere, where bertkit's macro mean and scikit-learn's agree.
        gold[0], predicted[1] = True, True
        ours = multi_label_metrics(predicted.astype(np.float32), gold.astype(np.float32))
        assert ours["micro_f1"] == pytest.approx(metrics.f1_score(gold, predicted, average="micro"), abs=ROUNDED)
        macro = metrics.f1_score(gold, predicted, average="macro", zero_division=0)
        assert ours["macro_f1"] == pytest.approx(macro, abs=ROUNDED)
        assert ours["subset_accuracy"] == pytest.approx(metrics.accuracy_score(gold, predicted), abs=ROUNDED)


def test_multi_label_macro_leaves_out_a_label_neither_side_has() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(6)
    gold, predicted = rng.random((50, 4)) < 0.4, rng.random((50, 4)) < 0.4
    gold[:, 3] = predicted[:, 3] = False
    gold[0, :3] = predicted[1, :3] = True
    ours = multi_label_metrics(predicted, gold)["macro_f1"]
    # bertkit: the mean over the three labels that occur; scikit-learn (zero_division=0) counts the fourth as 0.
    assert ours == pytest.approx(metrics.f1_score(gold, predicted, average="macro", labels=[0, 1, 2]), abs=ROUNDED)
    everything = metrics.f1_score(gold, predicted, average="macro", zero_division=0)
    assert ours == pytest.approx(everything * 4 / 3, abs=ROUNDED)


def _random_bio(rng: random.Random) -> list[list[str]]:
    tags = ["O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-geo-loc", "I-geo-loc"]
    return [[rng.choice(tags) for _ in range(rng.randint(1, 15))] for _ in range(rng.randint(1, 10))]


def test_entity_scores_match_seqeval_default_mode() -> None:
    seqeval = pytest.importorskip("seqeval.metrics")
    rng = random.Random(1)
    starts = 0
    for _ in range(60):
        gold = _random_bio(rng)
        predicted = [[rng.choice(["O", "I-PER", "I-LOC", t]) if rng.random() < 0.4 else t for t in s] for s in gold]
        # I- after O, at a sentence start or after another type: seqeval's default mode begins an entity there.
        starts += sum(t.startswith("I-") and (i == 0 or s[i - 1] == "O") for s in predicted for i, t in enumerate(s))
        ours = tagging_scores(gold, predicted, True)  # type: ignore[arg-type]
        assert ours["f1"] == pytest.approx(seqeval.f1_score(gold, predicted), abs=ROUNDED)
        assert ours["precision"] == pytest.approx(seqeval.precision_score(gold, predicted), abs=ROUNDED)
        assert ours["recall"] == pytest.approx(seqeval.recall_score(gold, predicted), abs=ROUNDED)
    assert starts > 50  # the invalid starts really were exercised
    assert entities(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-PER"]) == [
        ("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 5), ("PER", 5, 6)
    ]  # fmt: skip
    # An entity that starts with I- is the same entity as one that starts with B-: a hit, as in seqeval.
    gold, predicted = [["B-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]]
    assert tagging_scores(gold, predicted, True)["f1"] == seqeval.f1_score(gold, predicted) == 1.0  # type: ignore


@pytest.mark.parametrize(("golds", "predictions", "exact", "f1"), [
    # Articles, case and punctuation are normalised away: an exact match.
    ([["The Denver Broncos"]], ["denver broncos!"], 100.0, 100.0),
    ([["an apple"]], ["Apple."], 100.0, 100.0),
    # No token in common.
    ([["Paris"]], ["London"], 0.0, 0.0),
    # "broncos of denver" vs "denver broncos": 2 shared of 3 predicted, 2 of 2 gold: F1 = 2 * 2/3 * 1 / (5/3).
    ([["Denver Broncos"]], ["the Broncos of Denver"], 0.0, 80.0),
    # Several gold answers: each score is its best over them ("broncos": F1 2/3; "denver broncos team": 0.8).
    ([["Broncos", "Denver Broncos team"]], ["Denver Broncos"], 0.0, 80.0),
    ([["Denver", "Denver Broncos"]], ["Denver Broncos"], 100.0, 100.0),
    # Token bags: a repeated token counts as often as both sides have it. Prediction "new new york" vs
    # "new york": 2 shared, precision 2/3, recall 1, F1 0.8.
    ([["New York"]], ["new new york"], 0.0, 80.0),
    # Percentages over questions: (1 + 0) / 2 exact, (1 + 0.5) / 2 F1; "cat dog" vs "cat": P 1/2, R 1, F1 2/3.
    ([["1990"], ["a cat"]], ["1990", "cat dog"], 50.0, 100.0 * (1 + 2 / 3) / 2),
    # Punctuation inside a token joins its parts ("u.s." -> "us"), so a hyphenated word stays one token:
    # "stateoftheart model" vs "state of art model" share "model" only: P 1/4, R 1/2, F1 1/3.
    ([["U.S. Army"]], ["us army"], 100.0, 100.0),
    ([["state-of-the-art model"]], ["state of the art model"], 0.0, 100.0 / 3),
])  # fmt: skip
def test_squad_scores_follow_the_v1_1_script(
    golds: list[list[str]], predictions: list[str], exact: float, f1: float
) -> None:
    scores = squad_scores(golds, predictions)
    assert scores["exact_match"] == pytest.approx(exact, abs=ROUNDED)
    assert scores["f1"] == pytest.approx(f1, abs=ROUNDED)
    assert scores["total"] == len(golds)
