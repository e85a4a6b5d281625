"""engine.unpad reaches the model: every encoder in it that can run unpadded gets the mode as a flag.

The model code stays forward-only; it reads `encoder.unpad` ("auto", True or False) on each call (see
BertEncoder._packing). A family opts in by giving its encoder a `supports_unpad` property and an `unpad`
attribute; XLNet's encoder says False.
"""

from __future__ import annotations

from typing import Literal

from torch import nn

from bertkit.errors import BertkitError


def configure_unpad(model: nn.Module, mode: bool | Literal["auto"]) -> int:
    """Set `mode` on every encoder of `model` that supports unpadding; returns how many. engine.unpad=true on a
    model with an encoder that cannot (XLNet, BigBird's block-sparse attention) is a user error."""
    encoders = [m for m in model.modules() if hasattr(m, "supports_unpad")]
    if mode is True:
        for encoder in encoders:
            if not encoder.supports_unpad:
                cfg = getattr(encoder, "config", None)
                attention = "block_sparse" if cfg is not None and cfg.block_sparse else "full"
                what = f"model.family={cfg.family}, model.attention={attention}" if cfg is not None else "it"
                raise BertkitError(
                    f"engine.unpad=true: this model cannot run unpadded ({what}: its attention needs the padded "
                    "layout); set engine.unpad=auto or false"
                )
    supported = [encoder for encoder in encoders if encoder.supports_unpad]
    if mode is True and not supported:
        raise BertkitError(
            "engine.unpad=true: this model has no encoder that can run unpadded; set engine.unpad=auto or false"
        )
    for encoder in supported:
        encoder.unpad = mode
    return len(supported)
