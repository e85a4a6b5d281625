"""What a caller reads from inside an encoder's forward, and the one layer loop every encoder runs.

An encoder's forward computes its output and nothing else; a caller that wants more (distillation's attention
scores, probabilities and values of chosen layers, hidden states, MiniLM's stop after the last layer's
attention; `bertkit embed`'s hidden state of one layer) hands it a `LayerCapture`, which the layer loop asks what
each layer should give and fills. The capture object belongs to the caller (bertkit/models/with_heads.py,
bertkit/models/pooling.py); models only call it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import torch
from torch.utils.checkpoint import checkpoint

from bertkit.models.attention import AttentionOutput

# (layer index, input, whether to return attention weights, whether to stop after its attention) -> output
LayerCall = Callable[[int, torch.Tensor, bool, bool], tuple[torch.Tensor, AttentionOutput]]


class LayerCapture:
    """`attentions`: True for every layer's attention probabilities, scores and values, or the 0-based layers to
    capture them for (negative from the end). Only those layers leave the fast SDPA kernel for the explicit path,
    which costs far more; the lists keep one entry per layer, None for the layers left out.

    `hidden_states`: the embeddings' output and every layer's, padded back to (B, T, H).

    `stop_at_last_attention` (MiniLM): the last layer computes its attention scores and values and nothing after
    them (no softmax output, feed-forward, final norm or pooler): a quarter of the layer's matmuls is all they
    cost. The encoder's `last_hidden_state` is then the last layer's input and `pooled` is None."""

    def __init__(
        self,
        attentions: bool | Collection[int] = False,
        hidden_states: bool = False,
        stop_at_last_attention: bool = False,
    ) -> None:
        if stop_at_last_attention and hidden_states:
            raise ValueError("stop_at_last_attention leaves the last layer's output uncomputed; no hidden states")
        self.asked, self.want_hidden, self.stop_at_last_attention = attentions, hidden_states, stop_at_last_attention
        self.layers: set[int] = set()
        self.num_layers = 0
        self.hidden_states: list[torch.Tensor] = []
        self.attentions: list[torch.Tensor | None] = []
        self.attention_scores: list[torch.Tensor | None] = []
        self.values: list[torch.Tensor | None] = []

    def begin(self, num_layers: int) -> None:
        """A forward starts: resolve the layers for this encoder's depth; forget a previous forward's tensors."""
        self.num_layers = num_layers
        if isinstance(self.asked, bool):
            self.layers = set(range(num_layers)) if self.asked else set()
        else:
            self.layers = {i % num_layers for i in self.asked}
        if self.stop_at_last_attention:
            self.layers.add(num_layers - 1)
        self.hidden_states, self.attentions, self.attention_scores, self.values = [], [], [], []

    @property
    def wants_weights(self) -> bool:
        """Whether any layer returns attention weights (the unpadded path cannot: it has no score matrix)."""
        return bool(self.layers)

    def stops_at(self, index: int) -> bool:
        return self.stop_at_last_attention and index == self.num_layers - 1

    def record(
        self, output: torch.Tensor, padded: Callable[[torch.Tensor], torch.Tensor], attn: AttentionOutput | None
    ) -> None:
        """After the embeddings (no attention) or a layer: its output (padded back only when kept) and attention."""
        if self.want_hidden:
            self.hidden_states.append(padded(output))
        if attn is not None and self.layers:
            self.attentions.append(attn.probs)
            self.attention_scores.append(attn.scores)
            self.values.append(attn.values)


def run_layers(
    x: torch.Tensor,
    num_layers: int,
    call: LayerCall,
    capture: LayerCapture | None,
    padded: Callable[[torch.Tensor], torch.Tensor],
    checkpoint_every: int = 0,
) -> tuple[torch.Tensor, bool]:
    """The layer loop of every encoder: each layer in turn, the capture told what each one gave. Returns the last
    output and whether the loop stopped at the last layer's attention (its output then is the layer's input).

    Activation checkpointing (`checkpoint_every` k > 0, set by bertkit/engine/activation_checkpointing.py from
    train.activation_checkpointing): while gradients are recorded, every k-th layer keeps only its input and runs
    again in the backward pass, its dropout replayed from the same random state, so the step is the same with less
    memory. A capture (distillation, attention maps) reads every layer as it runs, so it turns it off."""
    if capture is not None:
        capture.record(x, padded, None)
    stopped = False
    recompute = checkpoint_every > 0 and capture is None and torch.is_grad_enabled()
    for i in range(num_layers):
        stopped = capture is not None and capture.stops_at(i)
        weights = capture is not None and i in capture.layers
        if recompute and i % checkpoint_every == 0:
            x = checkpoint(lambda h, i=i: call(i, h, False, False)[0], x, use_reentrant=False)
            continue
        x, attn = call(i, x, weights, stopped)
        if capture is not None:
            capture.record(x, padded, attn)
    return x, stopped
