"""What `bertkit corpus inspect` reports: counts, lengths, mask statistics and decoded examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bertkit.corpus.loader import MLMBatches
from bertkit.corpus.masking import MaskingSpec
from bertkit.corpus.shards import Corpus
from bertkit.tokenizers.base import load_tokenizer

PAIR_LABELS = {
    "segment-pair": ("actual next", "random next"),
    "sentence-pair": ("actual next", "random next"),
    "sop": ("in order", "swapped"),
}


def mask_statistics(batches: MLMBatches, corpus: Corpus, indices: np.ndarray) -> dict[str, float]:
    """Share of maskable tokens selected, and how the selected ones were corrupted (80/10/10)."""
    special = np.fromiter(batches.spec.special_ids, np.int64)
    maskable = selected = to_mask = to_random = 0
    span_lengths: list[int] = []
    for index in indices:
        item = batches.masked_sequence(0, int(index))
        original = corpus.original(int(index))
        maskable += int((~np.isin(original, special)).sum())
        selected += item.positions.size
        served = item.ids[item.positions]
        to_mask += int((served == batches.spec.mask_id).sum())
        to_random += int(((served != batches.spec.mask_id) & (served != item.labels)).sum())
        span_lengths.extend((item.spans[:, 1] - item.spans[:, 0]).tolist())
    return {
        "mask_rate": round(selected / max(1, maskable), 4),
        "masked_as_mask_token": round(to_mask / max(1, selected), 4),
        # A random draw can hit the original id (about 1/vocab of the time): counted as kept.
        "masked_as_random_token": round(to_random / max(1, selected), 4),
        "masked_kept": round(1 - (to_mask + to_random) / max(1, selected), 4),
        "mean_unit_tokens": round(float(np.mean(span_lengths)), 3) if span_lengths else 0.0,
    }


def inspect_corpus(directory: Path, examples: int = 2, sample: int = 2000) -> dict[str, Any]:
    from bertkit.corpus.build import TOKENIZER_SUBDIR

    data = Corpus(directory)
    tok = load_tokenizer(Path(directory) / TOKENIZER_SUBDIR)
    lengths = data.lengths()
    edges = np.unique(np.linspace(0, int(lengths.max()), 9).round().astype(int))
    counts, _ = np.histogram(lengths, bins=edges)
    stored = data.manifest.get("masking", {})
    spec = MaskingSpec(
        stored.get("prob", 0.15),
        stored.get("mask_fraction", 0.8),
        stored.get("random_fraction", 0.1),
        tok.mask_id,
        tok.special_ids,
        tok.vocab_size,
    )
    batches = MLMBatches(data, np.arange(len(data)), 1, spec, tok.pad_id, seed=0, shuffle=False)
    picked = np.random.default_rng(0).permutation(len(data))[: max(1, sample)]
    fmt = data.manifest.get("format", "full-sentences")
    result: dict[str, Any] = {
        "corpus": str(directory),
        "format": fmt,
        "masking": f"{stored.get('mode', 'dynamic')} {batches.spec.strategy}",
        "sequences": len(data),
        "tokens": int(lengths.sum()),
        "mean_length": round(float(lengths.mean()), 1),
        "max_length": int(lengths.max()),
        "length_histogram": {
            f"{int(a)}-{int(b)}": int(c) for a, b, c in zip(edges[:-1], edges[1:], counts, strict=True)
        },
        "mask_statistics": mask_statistics(batches, data, picked),
        "stats": data.manifest["stats"],
    }
    if data.has_pairs:
        labels = np.asarray(data.pairs[:, 1])
        names = PAIR_LABELS.get(fmt, ("0", "1"))
        result["pair_labels"] = {names[0]: int((labels == 0).sum()), names[1]: int((labels == 1).sum())}
    shown = []
    for index in range(min(examples, len(data))):
        item = batches.masked_sequence(0, index)
        entry: dict[str, Any] = {
            "index": index,
            "text": tok.decode(data.original(index).tolist(), skip_special_tokens=False),
            "masked_input": tok.decode(item.ids.tolist(), skip_special_tokens=False),
            "targets": [tok.id_to_token(int(t)) for t in item.labels],
        }
        if data.has_pairs:
            entry["pair_label"] = PAIR_LABELS.get(fmt, ("0", "1"))[data.pair(index)[1]]
        shown.append(entry)
    result["examples"] = shown
    return result
