"""train.activation_checkpointing: every k-th layer keeps only its input and runs again in the backward pass. The
step is the same (losses and gradients, dropout included, since the recomputation replays the random state) and
the activations kept for the backward pass are fewer: counted here by the bytes of every tensor autograd saves,
which is what the allocator holds between the forward and the backward pass. Models: tiny random BERT, ModernBERT
and ALBERT encoders (bertkit's own; their parity with transformers is tested elsewhere)."""

from __future__ import annotations

import pytest
import torch

from bertkit.config.schema import ModelConfig
from bertkit.engine.activation_checkpointing import configure_activation_checkpointing
from bertkit.errors import BertkitError
from bertkit.models.pretraining import build_encoder

SHAPE = {"vocab_size": 120, "hidden_size": 32, "num_layers": 4, "num_heads": 2, "intermediate_size": 64,
         "max_position_embeddings": 64, "hidden_dropout": 0.1, "attention_dropout": 0.1}  # fmt: skip


def _encoder(family: str) -> torch.nn.Module:
    modernbert = {"norm": "pre", "pooler": False, "type_vocab_size": 0, "local_attention": 16,
                  "global_attn_every_n_layers": 2}  # layers 0 and 2 global, 1 and 3 a 16-token window
    extra = {"albert": {"embedding_size": 16}, "modernbert": modernbert}.get(family, {})
    torch.manual_seed(0)
    return build_encoder(ModelConfig(family=family, **SHAPE, **extra)).train()


def _step(encoder: torch.nn.Module, every: int) -> tuple[float, dict[str, torch.Tensor], int]:
    """The loss, the gradients and the bytes autograd saved for the backward pass, from the same random state."""
    configure_activation_checkpointing(encoder, every)
    encoder.zero_grad(set_to_none=True)
    ids = torch.randint(5, 120, (4, 48), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[2, 30:] = 0
    saved = 0

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += tensor.numel() * tensor.element_size()
        return tensor

    torch.manual_seed(7)  # the dropout masks
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        loss = encoder(ids, mask).last_hidden_state.square().mean()
    loss.backward()
    grads = {name: p.grad.clone() for name, p in encoder.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads, saved


@pytest.mark.parametrize("family", ["bert", "modernbert", "albert"])
def test_recomputed_layers_give_the_same_step_with_fewer_saved_activations(family: str) -> None:
    encoder = _encoder(family)
    loss, grads, saved = _step(encoder, 0)
    for every in (1, 2):
        again, regrads, resaved = _step(encoder, every)
        assert again == pytest.approx(loss, abs=1e-6)
        assert regrads.keys() == grads.keys()
        for name, grad in grads.items():
            torch.testing.assert_close(regrads[name], grad, rtol=1e-5, atol=1e-6, msg=name)
        # every layer: only the layer inputs stay; every other layer: about half the layers' activations
        assert resaved < (0.35 if every == 1 else 0.75) * saved, (every, resaved, saved)


def test_a_model_without_recomputable_layers_is_one_error() -> None:
    xlnet = build_encoder(ModelConfig(family="xlnet", vocab_size=120, hidden_size=32, num_layers=2, num_heads=4,
                                      intermediate_size=64, pooler=False))  # fmt: skip
    assert configure_activation_checkpointing(xlnet, 0) == 0
    with pytest.raises(BertkitError, match="XLNet's two-stream layers"):
        configure_activation_checkpointing(xlnet, 1)


def test_no_recomputation_without_gradients() -> None:
    """Evaluation (no_grad) runs each layer once, as without the setting."""
    encoder = _encoder("bert").eval()
    configure_activation_checkpointing(encoder, 1)
    ids = torch.randint(5, 120, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = encoder(ids, torch.ones_like(ids)).last_hidden_state
    configure_activation_checkpointing(encoder, 0)
    with torch.no_grad():
        torch.testing.assert_close(encoder(ids, torch.ones_like(ids)).last_hidden_state, out, rtol=0, atol=0)
