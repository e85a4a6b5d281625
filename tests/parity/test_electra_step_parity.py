"""One ELECTRA pretraining step against `transformers`' ELECTRA, written from the paper's equations.

bertkit's generator and discriminator are exported to HF's ElectraForMaskedLM and ElectraForPreTraining, which
share one embedding module as ELECTRA does. On a batch of real text (Python's documentation, masked as the
ELECTRA recipes mask) the reference computes

    loss = mean over masked positions of CE(generator)  +  50 * mean over non-padding tokens of BCE(discriminator)

with the discriminator reading the generator's samples (a sample equal to the original counts as original).
bertkit's loss, its metrics, the generator's sampling distribution and the gradient of every parameter must
match the reference's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip("transformers")

from bertkit.config.recipe import load_recipe  # noqa: E402
from bertkit.config.schema import GeneratorConfig, ModelConfig, ObjectiveConfig  # noqa: E402
from bertkit.corpus.masking import MaskingSpec, mask_sequence  # noqa: E402
from bertkit.interop.hf import to_hf_checkpoint  # noqa: E402
from bertkit.models.pretraining import build_pretraining_model  # noqa: E402
from bertkit.objectives import build_objective  # noqa: E402
from bertkit.tokenizers import load_tokenizer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

RTD_WEIGHT = 50.0  # ELECTRA's lambda


def _batch(tokenizer_dir: Path, rows: int = 6, width: int = 40) -> dict[str, torch.Tensor]:
    """Real sentences, padded (the last rows shorter), masked with the electra-small recipe's split."""
    from bertkit.data.samples import python_docs_documents

    tok = load_tokenizer(tokenizer_dir)
    masking = load_recipe("electra-small").data.masking  # type: ignore[union-attr]
    spec = MaskingSpec(masking.prob, masking.mask_fraction, masking.random_fraction, tok.mask_id,
                       tok.special_ids, tok.vocab_size)  # fmt: skip
    rng = np.random.default_rng(0)
    lines = [line for doc in python_docs_documents()[:40] for line in doc if len(line) > 80]
    ids = np.full((rows, width), tok.pad_id, dtype=np.int64)
    positions, labels = [], []
    for i, line in enumerate(lines[:rows]):
        length = width - 3 * i  # rows of different lengths: padding is in the batch
        row = np.array([tok.cls_id, *tok.encode_batch([line])[0][: length - 2], tok.sep_id])
        masked, pos, lab = mask_sequence(row, spec, rng, spec.random_candidates())
        ids[i, : len(row)] = masked
        positions.append(pos + i * width)
        labels.append(lab)
    return {
        "input_ids": torch.from_numpy(ids),
        "attention_mask": torch.from_numpy(ids != tok.pad_id),
        "token_type_ids": torch.zeros_like(torch.from_numpy(ids)),
        "mlm_positions": torch.from_numpy(np.concatenate(positions)).long(),
        "mlm_labels": torch.from_numpy(np.concatenate(labels)).long(),
    }


def _bertkit_model(vocab: int) -> tuple[ModelConfig, torch.nn.Module]:
    """A generator 16 wide under 32-wide embeddings: its own projection (E -> H) is in the step, as in the recipes."""
    cfg = ModelConfig(family="electra", vocab_size=vocab, hidden_size=64, num_layers=2, num_heads=2,
                      intermediate_size=128, max_position_embeddings=64, embedding_size=32, pooler=False,
                      generator=GeneratorConfig(hidden_fraction=0.25))  # fmt: skip
    torch.manual_seed(0)
    model = build_pretraining_model(cfg, ObjectiveConfig(mlm=1.0, rtd=RTD_WEIGHT))
    with torch.no_grad():  # LayerNorms at identity and zero biases would leave parts of the map untested
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return cfg, model.eval()  # eval: no dropout, so both sides see the same activations


def _hf_pair(cfg: ModelConfig, weights: dict[str, torch.Tensor]):
    """HF generator and discriminator from bertkit's exports, with one shared embedding module."""
    models = []
    classes = {"pretraining": transformers.ElectraForPreTraining, "generator": transformers.ElectraForMaskedLM}
    for head, cls in classes.items():
        config, state = to_hf_checkpoint(cfg, weights, head=head)
        model = cls(transformers.ElectraConfig(**config)).eval()
        missing, unexpected = model.load_state_dict(state, strict=False)
        assert not unexpected and all("lm_head.weight" in k or "position_ids" in k for k in missing), missing
        models.append(model)
    discriminator, generator = models
    for name, tensor in generator.electra.embeddings.state_dict().items():
        assert torch.equal(tensor, discriminator.electra.embeddings.state_dict()[name]), name
    generator.electra.embeddings = discriminator.electra.embeddings
    generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
    return generator, discriminator


def test_an_electra_step_matches_transformers(tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = _batch(tokenizer_dir)
    cfg, model = _bertkit_model(load_tokenizer(tokenizer_dir).vocab_size)
    assert model.generator.embed_proj is not None
    generator, discriminator = _hf_pair(cfg, {k: v.detach().clone() for k, v in model.state_dict().items()})

    # bertkit's own step, recording the distribution it samples from and the samples it draws. Every other draw
    # is set to the original token, as a trained generator often draws it: those must count as original.
    drawn: dict[str, torch.Tensor] = {}
    multinomial = torch.multinomial

    def recording(probs: torch.Tensor, num_samples: int, *args, **kwargs) -> torch.Tensor:
        samples = multinomial(probs, num_samples, *args, **kwargs)
        samples[::2, 0] = batch["mlm_labels"][::2]
        drawn["probs"], drawn["samples"] = probs, samples
        return samples

    monkeypatch.setattr(torch, "multinomial", recording)
    loss, metrics = build_objective(ObjectiveConfig(mlm=1.0, rtd=RTD_WEIGHT))(model, batch)
    monkeypatch.undo()
    loss.backward()

    # The reference, from the paper's equations.
    valid, positions, labels = batch["attention_mask"], batch["mlm_positions"], batch["mlm_labels"]
    generated = generator(input_ids=batch["input_ids"], attention_mask=valid).logits
    masked_logits = generated.flatten(0, 1)[positions]
    mlm_loss = F.cross_entropy(masked_logits, labels)
    sampled = drawn["samples"].squeeze(-1)
    original = batch["input_ids"].flatten().index_copy(0, positions, labels).view_as(valid)
    corrupted = batch["input_ids"].flatten().index_copy(0, positions, sampled).view_as(valid)
    replaced = (corrupted != original).float()
    rtd_logits = discriminator(input_ids=corrupted, attention_mask=valid).logits
    rtd_loss = F.binary_cross_entropy_with_logits(rtd_logits[valid], replaced[valid])
    reference = mlm_loss + RTD_WEIGHT * rtd_loss
    reference.backward()

    # The generator samples from its own softmax, at temperature 1, one draw per masked position.
    assert torch.allclose(drawn["probs"], masked_logits.detach().softmax(-1), atol=1e-6)
    assert (sampled == labels).any() and (sampled != labels).any()
    assert replaced[valid].sum() == (sampled != labels).sum()  # a draw equal to the original is not replaced
    assert float(metrics["mlm_loss"]) == pytest.approx(mlm_loss.item(), rel=1e-5)
    assert float(metrics["rtd_loss"]) == pytest.approx(rtd_loss.item(), rel=1e-5)  # unweighted, as logged
    assert float(metrics["replaced_fraction"]) == pytest.approx(float(replaced[valid].mean()), rel=1e-6)
    assert loss.item() == pytest.approx(reference.item(), rel=1e-5)

    # Every parameter's gradient, bertkit's mapped onto HF's names; the shared embeddings collect both losses.
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert len(grads) == len(list(model.parameters()))
    ours: dict[str, torch.Tensor] = {}
    for head in ("pretraining", "generator"):
        ours.update({f"{head}:{k}": v for k, v in to_hf_checkpoint(cfg, grads, head=head)[1].items()})
    theirs = {f"pretraining:{k}": p.grad for k, p in discriminator.named_parameters()}
    theirs |= {f"generator:{k}": p.grad for k, p in generator.named_parameters()}
    compared = 0
    for name, grad in ours.items():
        if name.startswith("generator:") and ".embeddings." in name:
            name = name.replace("generator:", "pretraining:")  # one module on the HF side, as in bertkit
        reference_grad = theirs[name]
        assert reference_grad is not None, name
        compared += 1
        if name.endswith("attention.self.key.bias"):
            # A key bias adds the same score to every key of a query, which softmax cancels: zero gradient
            # on both sides, up to rounding.
            assert max(grad.abs().max().item(), reference_grad.abs().max().item()) <= 1e-7
            continue
        scale = reference_grad.norm().item()
        assert scale > 0, name
        assert (grad - reference_grad).norm().item() <= 1e-4 * scale, name
    assert compared == len(ours) >= 40
