"""`bertkit quickstart --data-only`: the quickstart's real sample data, and the split of its reviews that the
quickstart trains and scores on. Torch-free, so the getting-started guide's first command starts at once."""

from __future__ import annotations

import csv
from pathlib import Path

from bertkit.data.samples import write_sample_data
from bertkit.fsutil import atomic_output_dir

HELD_OUT_REVIEWS, COMPRESS_REVIEWS = 1000, 2000


def sample_data(output: Path, overwrite: bool = False) -> dict[str, str]:
    """Only the quickstart's data, under OUTPUT/data: pretraining text and the review splits, for a user who runs
    each command by hand (the getting-started guide). Built beside the output and renamed, like every output."""
    with atomic_output_dir(output, overwrite=overwrite) as tmp:
        data = write_sample_data(tmp / "data")
        splits = split_reviews(data["sentiment"], tmp / "data")
    final = {"pretrain": data["pretrain"], "sentiment": data["sentiment"], **splits}
    return {name: str(output / path.relative_to(tmp)) for name, path in final.items()}


def split_reviews(sentiment: Path, folder: Path) -> dict[str, Path]:
    """The reviews (already shuffled) as sentiment-train.csv and the last HELD_OUT_REVIEWS as sentiment-eval.csv,
    which neither the teacher nor the compressed student trains on; compress-train.csv is the first
    COMPRESS_REVIEWS of the training reviews."""
    with open(sentiment, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    parts = {"train": rows[:-HELD_OUT_REVIEWS], "eval": rows[-HELD_OUT_REVIEWS:], "compress": rows[:COMPRESS_REVIEWS]}
    paths = {}
    for name, part in parts.items():
        paths[name] = folder / ("compress-train.csv" if name == "compress" else f"sentiment-{name}.csv")
        with open(paths[name], "w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, ["text", "label"])
            writer.writeheader()
            writer.writerows(part)
    return paths
