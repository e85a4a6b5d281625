"""Every paper-sized recipe has the parameter count of SPEC.md (within 2%), and its encoder has exactly
the parameter count of the same architecture built by `transformers` (an independent implementation).

What bertkit counts: the network kept after pretraining, i.e. the encoder (with its pooler, if any) and the
heads that ship with it (MLM, NSP/SOP, ELECTRA's discriminator head); not ELECTRA's generator nor SpanBERT's
SBO head, which exist only during pretraining.
"""

from __future__ import annotations

import pytest
import torch

from bertkit.config.recipe import load_recipe
from bertkit.interop.hf import config_to_hf
from bertkit.models.pretraining import count_parameters

# The papers' counts, as in SPEC.md.
PAPER = {
    "bert-base": 110e6,
    "bert-large": 340e6,
    "roberta-base": 125e6,
    "roberta-large": 355e6,
    "albert-base": 12e6,
    "albert-large": 18e6,
    "albert-xlarge": 60e6,
    "albert-xxlarge": 235e6,
    "electra-small": 14e6,
    "electra-base": 110e6,
    "spanbert-base": 110e6,
    "distilbert": 66e6,
    "tinybert-4": 14.5e6,
    "tinybert-6": 67e6,
    "bigbird-roberta-base": 127.5e6,
    "xlnet-base": 110e6,
    "xlnet-large": 340e6,
    "modernbert-base": 149e6,
    "modernbert-large": 395e6,
}
# Where the paper's figure is not the count of the released architecture, the released checkpoint (rebuilt
# by transformers from its published config) is the reference, and the gap is stated here:
# - electra-small: the paper rounds to 14M; google/electra-small-discriminator has 13.48M (encoder) + 66K (head).
# - albert-xxlarge: the paper says 235M; albert-xxlarge-v2 (H 4096, FFN 16384, E 128) has 222.6M.
# - xlnet-base / xlnet-large: 110M / 340M are BERT-base / BERT-large's sizes, which the paper matches in
#   shape (XLNet has no position or segment tables but five d x d projections per layer, one of them for the
#   relative positions); xlnet-base-cased and xlnet-large-cased (SentencePiece 32,000) have 116.7M and
#   360.3M (with the LM head's bias), which XLNetModel built from their configs confirms.
KNOWN_GAPS = {"electra-small": 0.035, "albert-xxlarge": 0.06, "xlnet-base": 0.065, "xlnet-large": 0.065}


@pytest.mark.parametrize("name", sorted(PAPER))
def test_count_matches_paper(name: str) -> None:
    recipe = load_recipe(name)
    count = count_parameters(recipe.model, objective=recipe.objective)  # type: ignore[union-attr]
    tolerance = KNOWN_GAPS.get(name, 0.02)
    assert abs(count - PAPER[name]) / PAPER[name] <= tolerance, f"{name}: {count / 1e6:.2f}M vs {PAPER[name] / 1e6}M"


@pytest.mark.parametrize("name", sorted(PAPER))
def test_encoder_count_equals_transformers(name: str) -> None:
    transformers = pytest.importorskip("transformers")
    recipe = load_recipe(name)
    cfg = recipe.model  # type: ignore[union-attr]
    hf_config = transformers.AutoConfig.for_model(**config_to_hf(cfg))
    with torch.device("meta"):
        hf_model = transformers.AutoModel.from_config(hf_config)
    expected = sum(p.numel() for p in hf_model.parameters())
    assert count_parameters(cfg, with_heads=False, objective=recipe.objective) == expected  # type: ignore[union-attr]


def test_albert_sharing_modes_match_albert_table_4() -> None:
    """ALBERT paper, Table 4 (base, E=128): all-shared 12M, shared-FFN 38M, shared-attention 64M, none 89M."""
    base = load_recipe("albert-base").model  # type: ignore[union-attr]
    for sharing, paper in (("all-shared", 12e6), ("shared-ffn", 38e6), ("shared-attention", 64e6), ("none", 89e6)):
        count = count_parameters(base.model_copy(update={"sharing": sharing}), with_heads=False)
        assert abs(count - paper) / paper <= 0.03, (sharing, count)


def test_recipes_show_reports_the_count() -> None:
    import json

    from typer.testing import CliRunner

    from bertkit.cli.app import app

    result = CliRunner().invoke(app, ["recipes", "show", "albert-base", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout.strip().splitlines()[-1])
    recipe = load_recipe("albert-base")
    assert shown["parameters"] == count_parameters(recipe.model, objective=recipe.objective)  # type: ignore[union-attr]
