"""XLNet: a tiny random `transformers.XLNetLMHeadModel` loaded into bertkit gives the same logits (within
1e-4, fp32, eval) for the same input_ids, perm_mask, target_mapping, token_type_ids and attention_mask;
bertkit's export loads into XLNetLMHeadModel with no missing or unexpected weights; HF -> bertkit -> HF is
exact."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from bertkit.interop.hf import to_hf_checkpoint  # noqa: E402
from bertkit.modelio.hf_dir import load_hf_dir, write_hf_dir  # noqa: E402
from bertkit.models.pretraining import build_pretraining_model  # noqa: E402

TOL = 1e-4
SMALL = dict(vocab_size=97, d_model=32, n_layer=3, n_head=4, d_inner=48, pad_token_id=0, mem_len=None,
             use_mems_eval=False, use_mems_train=False)  # fmt: skip


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    path = tmp_path_factory.mktemp("xlnet-hf")
    torch.manual_seed(0)
    model = transformers.XLNetLMHeadModel(transformers.XLNetConfig(**SMALL)).eval()
    # Random init leaves LayerNorms at identity and biases at zero; perturb everything so the map is tested.
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    model.save_pretrained(path)
    return path, model


def _batch(length: int = 12) -> dict[str, torch.Tensor]:
    """Two left-padded rows in XLNet's layout, a permutation mask (targets hidden from what comes before
    them in the order) and a target mapping of three targets per row."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 97, (2, length), generator=gen)
    attention = torch.ones(2, length, dtype=torch.long)
    attention[1, :3] = 0
    ids[1, :3] = 0
    types = torch.zeros(2, length, dtype=torch.long)
    types[:, 6:] = 1
    types[:, -1] = 2
    types[1, :3] = 3
    targets = torch.tensor([[2, 5, 7], [4, 8, 9]])
    perm = torch.zeros(2, length, length)
    target_mapping = torch.zeros(2, 3, length)
    for row in range(2):
        order = torch.full((length,), -1)
        order[targets[row]] = torch.randperm(3, generator=gen)
        is_target = torch.zeros(length, dtype=torch.bool)
        is_target[targets[row]] = True
        perm[row] = ((order[:, None] <= order[None, :]) & is_target[None, :]).float()
        target_mapping[row, torch.arange(3), targets[row]] = 1.0
    return {"input_ids": ids, "attention_mask": attention, "token_type_ids": types, "perm_mask": perm,
            "target_mapping": target_mapping}  # fmt: skip


def _ours(path: Path):
    loaded = load_hf_dir(path)
    model = build_pretraining_model(loaded.config, loaded.objective).eval()
    missing, unexpected = model.load_state_dict(loaded.weights, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return loaded, model


@pytest.mark.parametrize("inputs", ["all", "no-perm", "no-types", "no-mask"])
def test_logits_match(hf_dir, inputs: str) -> None:
    path, hf = hf_dir
    _, ours = _ours(path)
    batch = _batch()
    if inputs == "no-perm":
        batch.pop("perm_mask")
    elif inputs == "no-types":
        batch.pop("token_type_ids")
    elif inputs == "no-mask":
        batch.pop("attention_mask")
    with torch.no_grad():
        expected = hf(**batch).logits
        got = ours(**batch)["plm_logits"]
    assert got.shape == expected.shape == (2, 3, 97)
    assert (got - expected).abs().max().item() <= TOL


def test_content_stream_matches_without_targets(hf_dir) -> None:
    """No target mapping: both return the content stream (XLNetModel's last_hidden_state)."""
    path, hf = hf_dir
    _, ours = _ours(path)
    batch = _batch()
    batch.pop("target_mapping")
    with torch.no_grad():
        expected = hf.transformer(**batch).last_hidden_state
        got = ours.encoder(**batch).last_hidden_state
    valid = batch["attention_mask"].bool()
    assert (got - expected)[valid].abs().max().item() <= TOL


def test_export_loads_into_transformers_and_round_trips(hf_dir, tmp_path: Path) -> None:
    path, hf = hf_dir
    loaded, ours = _ours(path)
    config, state = to_hf_checkpoint(loaded.config, ours.state_dict(), "pretraining")
    assert config["architectures"] == ["XLNetLMHeadModel"]
    write_hf_dir(tmp_path, config, state)
    reloaded, info = transformers.XLNetLMHeadModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    original = hf.state_dict()
    for key, value in reloaded.state_dict().items():
        assert torch.equal(value, original[key]), key
    batch = _batch()
    with torch.no_grad():
        assert torch.equal(reloaded.eval()(**batch).logits, hf(**batch).logits)
    # The encoder alone exports as XLNetModel.
    config, state = to_hf_checkpoint(loaded.config, ours.state_dict(), "base")
    base_dir = tmp_path / "base"
    base_dir.mkdir()
    write_hf_dir(base_dir, config, state)
    _, info = transformers.XLNetModel.from_pretrained(base_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info


def test_left_padding_equals_right_padding(hf_dir) -> None:
    """Relative positions: where the padding sits does not change what the real tokens compute."""
    path, _ = hf_dir
    _, ours = _ours(path)
    ids = torch.randint(5, 97, (1, 9), generator=torch.Generator().manual_seed(3))
    left = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], 1)
    right = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], 1)
    mask_left, mask_right = left.ne(0) | False, right.ne(0) | False
    mask_left[0, :3], mask_right[0, 9:] = False, False
    with torch.no_grad():
        a = ours.encoder(left, mask_left)
        b = ours.encoder(right, mask_right)
    assert (a.last_hidden_state[0, 3:] - b.last_hidden_state[0, :9]).abs().max() <= 1e-5
    assert (a.pooled - b.pooled).abs().max() <= 1e-5
