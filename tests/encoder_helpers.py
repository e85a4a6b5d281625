"""An encoder run with a capture of its insides (bertkit/models/capture.py), for tests that compare them."""

from __future__ import annotations

from collections.abc import Collection
from types import SimpleNamespace
from typing import Any

from bertkit.models.capture import LayerCapture


def encode(
    encoder: Any,
    *args: Any,
    hidden_states: bool = False,
    attentions: bool | Collection[int] = False,
    stop_at_last_attention: bool = False,
    **kwargs: Any,
) -> SimpleNamespace:
    """The encoder's output (last_hidden_state, pooled) beside what the capture took: hidden_states, attentions,
    attention_scores and values."""
    capture = LayerCapture(attentions, hidden_states=hidden_states, stop_at_last_attention=stop_at_last_attention)
    out = encoder(*args, capture=capture, **kwargs)
    return SimpleNamespace(
        last_hidden_state=out.last_hidden_state,
        pooled=out.pooled,
        hidden_states=capture.hidden_states,
        attentions=capture.attentions,
        attention_scores=capture.attention_scores,
        values=capture.values,
    )
