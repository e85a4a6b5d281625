"""XLNet's permutation LM, piece by piece: the draw (about 1/K of the tokens, spans of at most max_span,
never a special token), the permutation mask (nothing leaks: a target's logits do not depend on its own
token nor on any target after it in the order), the loader (XLNet's layout, left padding, segment ids,
draws from (seed, epoch, sequence), exact resume), the loss contract (a sum over targets divided by the
global count), `--layout xlnet` packing, fine-tuning's <cls> pooling, and the one-line config errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import run_error

from bertkit.config.schema import ModelConfig, ObjectiveConfig, check_model_objective
from bertkit.corpus.build import BuildOptions, build_corpus
from bertkit.corpus.loader import PLMBatches
from bertkit.corpus.permutation import PermutationSpec, draw_permutation, permutation_mask
from bertkit.corpus.shards import Corpus
from bertkit.models.pretraining import build_pretraining_model
from bertkit.models.xlnet import XLNetEncoder
from bertkit.objectives import build_objective
from bertkit.tasks.classification import ClassificationBatches, SequenceClassifier, encode_examples
from bertkit.tokenizers.base import load_tokenizer

TINY = ModelConfig(family="xlnet", vocab_size=120, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                   pooler=False, hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip
PLM = ObjectiveConfig(mlm=0.0, plm=1.0)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def spm_dir(tmp_path_factory: pytest.TempPathFactory, text_file: Path) -> Path:
    from bertkit.tokenizers.train import train_tokenizer

    out = tmp_path_factory.mktemp("xlnet-unit") / "spm"
    train_tokenizer("sentencepiece-unigram", [text_file], out, vocab_size=1000)
    return out


@pytest.fixture(scope="module", params=["full-sentences", "segment-pair"])
def xlnet_corpus(request, tmp_path_factory: pytest.TempPathFactory, text_file: Path, spm_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("xlnet-corpus") / request.param
    build_corpus([text_file], spm_dir, out, BuildOptions(format=request.param, layout="xlnet", max_seq_len=48))
    return out


def _spec(tokenizer, k: int = 6, max_span: int = 5) -> PermutationSpec:
    return PermutationSpec(k, max_span, tokenizer.special_ids)


# ---------------------------------------------------------------------------------------------- the draw


@pytest.mark.parametrize("k", [2, 6, 7])
def test_draw_predicts_about_one_in_k_in_short_spans(k: int) -> None:
    spec = PermutationSpec(k, 5, frozenset({0, 1}))
    rng = np.random.default_rng(0)
    chosen = total = 0
    for _ in range(400):
        ids = rng.integers(2, 100, 128)
        ids[[0, 60, 127]] = 1  # special tokens are never targets
        draw = draw_permutation(ids, spec, rng)
        assert not np.isin(draw.targets, [0, 60, 127]).any()
        assert sorted(draw.order.tolist()) == list(range(len(draw.targets)))
        runs = np.split(draw.targets, np.flatnonzero(np.diff(draw.targets) > 1) + 1)
        # Two adjacent spans may touch (a span can end its stretch, the next start the next one).
        assert max(len(r) for r in runs) <= 2 * 5
        chosen += len(draw.targets)
        total += len(ids) - 3
    assert abs(chosen / total - 1 / k) < 0.2 / k, chosen / total


def test_permutation_mask_follows_the_order() -> None:
    item = draw_permutation(np.arange(2, 40), PermutationSpec(3, 5, frozenset()), np.random.default_rng(1))
    mask = permutation_mask(38, item)
    rank = np.full(38, -1)
    rank[item.targets] = item.order
    for i in range(38):
        for j in range(38):
            hidden = rank[j] >= 0 and rank[i] <= rank[j]  # j a target not before i (itself included)
            assert mask[i, j] == hidden


def test_no_target_sees_itself_or_a_later_target() -> None:
    """Change a target's token: the logits of the targets at or before it in the order do not move, and (the
    content stream carrying it on) some target after it does."""
    torch.manual_seed(0)
    model = build_pretraining_model(TINY, PLM).eval()
    ids = torch.randint(5, 120, (1, 24))
    item = draw_permutation(ids[0].numpy(), PermutationSpec(3, 3, frozenset()), np.random.default_rng(2))
    count = len(item.targets)
    assert count >= 4
    mapping = torch.zeros(1, count, 24)
    mapping[0, torch.arange(count), torch.from_numpy(item.targets)] = 1.0
    perm = torch.from_numpy(permutation_mask(24, item))[None]
    with torch.no_grad():
        before = model(ids, perm_mask=perm, target_mapping=mapping)["plm_logits"][0]
        for slot in range(count):
            changed = ids.clone()
            changed[0, item.targets[slot]] = (changed[0, item.targets[slot]] + 7) % 115 + 5
            after = model(changed, perm_mask=perm, target_mapping=mapping)["plm_logits"][0]
            moved = (after - before).abs().amax(-1) > 1e-6
            not_after = torch.from_numpy(item.order <= item.order[slot])
            assert not moved[not_after].any(), (slot, moved, item.order)
            if item.order[slot] < count - 1:
                assert moved[~not_after].any()


# ---------------------------------------------------------------------------------------------- the loader


def test_loader_layout_padding_segments_and_targets(xlnet_corpus: Path) -> None:
    corpus = Corpus(xlnet_corpus)
    tok = load_tokenizer(xlnet_corpus / "tokenizer")
    loader = PLMBatches(corpus, np.arange(len(corpus)), 8, _spec(tok), tok.pad_id, seed=3)
    batch = loader.next_batch()
    ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
    assert (ids[:, -1] == tok.cls_id).all() and (types[:, -1] == 2).all()  # <cls> last, its own segment
    assert mask[:, -1].all() and not mask.all()  # left padding: padding only before the tokens
    for row in range(ids.shape[0]):
        first = int((~mask[row]).sum())
        assert mask[row, first:].all() and (ids[row, :first] == tok.pad_id).all()
        assert (types[row, :first] == 3).all() and ids[row, -2] == tok.sep_id
        assert set(types[row, first:-1].tolist()) <= ({0, 1} if corpus.has_pairs else {0})
    labels, mapping, perm = batch["plm_labels"], batch["target_mapping"], batch["perm_mask"]
    targets = labels != -100
    positions = mapping.argmax(-1)
    assert (mapping.sum(-1)[targets] == 1).all() and (mapping.sum(-1)[~targets] == 0).all()
    assert torch.equal(ids.gather(1, positions)[targets], labels[targets])
    assert not torch.isin(labels[targets], torch.tensor(sorted(tok.special_ids))).any()
    # Padding and context are never hidden; each target is hidden from itself (query stream).
    hidden_keys = perm.any(1)
    for row in range(ids.shape[0]):
        assert set(torch.nonzero(hidden_keys[row]).flatten().tolist()) == set(positions[row][targets[row]].tolist())
    assert perm[torch.arange(8)[:, None], positions, positions][targets].all()
    share = targets.sum().item() / (mask.sum().item() - 2 * ids.shape[0])
    assert 0.08 < share < 0.3


def test_loader_draws_from_seed_epoch_sequence_and_resumes(xlnet_corpus: Path) -> None:
    corpus = Corpus(xlnet_corpus)
    tok = load_tokenizer(xlnet_corpus / "tokenizer")
    indices = np.arange(min(40, len(corpus)))

    def loader() -> PLMBatches:
        return PLMBatches(corpus, indices, 8, _spec(tok), tok.pad_id, seed=5)

    first = loader()
    batches = [first.next_batch() for _ in range(12)]  # 96 sequences: crosses epoch boundaries
    interrupted = loader()
    for _ in range(6):
        interrupted.next_batch()
    resumed = loader()
    resumed.load_state_dict(interrupted.state_dict())  # the whole state: (epoch, position)
    for expected in batches[6:]:
        got = resumed.next_batch()
        assert all(torch.equal(got[key], expected[key]) for key in expected)
    # A sequence served again in a later epoch gets a new draw.
    one = loader()
    a = one.permuted(0, 3)[1]
    b = one.permuted(1, 3)[1]
    assert not (np.array_equal(a.targets, b.targets) and np.array_equal(a.order, b.order))


def test_loss_is_a_sum_over_targets_divided_by_the_global_count(xlnet_corpus: Path) -> None:
    corpus = Corpus(xlnet_corpus)
    tok = load_tokenizer(xlnet_corpus / "tokenizer")
    batch = PLMBatches(corpus, np.arange(len(corpus)), 8, _spec(tok), tok.pad_id, seed=1).next_batch()
    torch.manual_seed(0)
    model = build_pretraining_model(TINY.model_copy(update={"vocab_size": tok.vocab_size}), PLM).eval()
    objective = build_objective(PLM)
    whole, _ = objective(model, batch)
    totals = objective.counts(batch)
    assert totals["plm"] == float((batch["plm_labels"] != -100).sum())

    def rows(part: slice) -> dict[str, torch.Tensor]:
        sub = {key: value[part] for key, value in batch.items()}
        keep = int((sub["attention_mask"].sum(1)).max())  # drop the columns that are padding in every row
        sub = {key: value[..., -keep:] if key != "plm_labels" else value for key, value in sub.items()}
        sub["perm_mask"] = sub["perm_mask"][:, -keep:]
        return sub

    halves = [objective(model, rows(slice(0, 3)), totals)[0], objective(model, rows(slice(3, 8)), totals)[0]]
    assert torch.allclose(sum(halves), whole, atol=1e-5)


# ---------------------------------------------------------------------------------------------- packing


def test_xlnet_layout_puts_cls_last(spm_dir: Path, text_file: Path, tmp_path: Path) -> None:
    tok = load_tokenizer(spm_dir)
    for fmt in ("full-sentences", "sop"):
        bert = Corpus(build_corpus([text_file], spm_dir, tmp_path / f"b-{fmt}", BuildOptions(format=fmt))["output"])
        xl = Corpus(
            build_corpus([text_file], spm_dir, tmp_path / f"x-{fmt}", BuildOptions(format=fmt, layout="xlnet"))[
                "output"
            ]
        )
        assert len(bert) == len(xl)
        for i in range(0, len(xl), max(1, len(xl) // 20)):
            a, b = bert[i], xl[i]
            assert a[0] == tok.cls_id and b[-1] == tok.cls_id and b[-2] == tok.sep_id
            assert np.array_equal(a[1:], b[:-1])  # same text, same separators: only <cls> moved
            if xl.has_pairs:
                assert xl.pair(i)[0] == bert.pair(i)[0] - 1 and xl.pair(i)[1] == bert.pair(i)[1]


# ---------------------------------------------------------------------------------------------- fine-tuning


def test_finetuning_pools_cls_whatever_the_padding(spm_dir: Path) -> None:
    tok = load_tokenizer(spm_dir)
    examples = encode_examples(["a short one", "a somewhat longer review of a film"], ["b", "c d"],
                               np.array([0, 1]), tok, 32, cls_last=True)  # fmt: skip
    ids, types = examples.input_ids[1], examples.token_type_ids[1]
    assert ids[-1] == tok.cls_id and ids[-2] == tok.sep_id and types[-1] == 2
    assert types[0] == 0 and set(types.tolist()) == {0, 1, 2}
    torch.manual_seed(0)
    cfg = TINY.model_copy(update={"vocab_size": tok.vocab_size, "pooler": True})
    model = SequenceClassifier(XLNetEncoder(cfg), 2, 0.0).eval()
    batches = ClassificationBatches(examples, 2, tok.pad_id, 0, use_token_types=True, pad_left=True)
    together = batches.batch_of([0, 1])
    assert together["input_ids"][0, 0] == tok.pad_id and (together["input_ids"][:, -1] == tok.cls_id).all()
    with torch.no_grad():
        both = model(together["input_ids"], together["attention_mask"], together["token_type_ids"])["logits"]
        for row in range(2):
            alone = batches.batch_of([row])
            single = model(alone["input_ids"], alone["attention_mask"], alone["token_type_ids"])["logits"]
            assert torch.allclose(both[row], single[0], atol=1e-5)


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        ({"plm_k": 1}, "objective.plm_k=1"),
        ({"plm_k": 0}, "at least 2"),
        ({"plm_max_span": 0}, "objective.plm_max_span=0: a span holds at least one token"),
    ],
)
def test_bad_plm_settings_say_how_to_fix(update: dict, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        ObjectiveConfig(mlm=0.0, plm=1.0, **update)


def test_model_and_objective_must_agree() -> None:
    with pytest.raises(ValueError, match="set objective.plm=1 and objective.mlm"):
        check_model_objective(TINY, ObjectiveConfig())
    with pytest.raises(ValueError, match="use model.family=xlnet"):
        check_model_objective(ModelConfig(), ObjectiveConfig(plm=1.0))
    with pytest.raises(ValueError, match="does not apply to model.family=xlnet"):
        ModelConfig(family="xlnet", norm="pre")


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("objective.plm_k=1", "objective.plm_k=1: PLM predicts the last 1/K"),
        ("objective.plm_max_span=0", "objective.plm_max_span=0"),
        ("objective.mlm=1", "objective.mlm is not an XLNet objective"),
    ],
)
def test_cli_refuses_bad_plm_settings_in_one_line(setting: str, expected: str, tmp_path: Path) -> None:
    line = run_error("pretrain", "--recipe", "xlnet-tiny", "--corpus", str(tmp_path), "--output",
                     str(tmp_path / "run"), "--set", setting)  # fmt: skip
    assert expected in line
    assert not (tmp_path / "run").exists()
