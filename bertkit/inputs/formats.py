"""The one format detection every reader of files shares (task files, corpora, predict's inputs, augment's and
compress's tables, token files): a file's format from its name, compression suffixes ignored, and a `datasets`
directory from its contents."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

FileFormat = Literal["dataset", "parquet", "jsonl", "tsv", "csv", "conllu", "text"]

COMPRESSION_SUFFIXES = (".gz", ".bz2", ".zst")  # read through transparently (bertkit/inputs/sources.py)
_BY_SUFFIX: dict[str, FileFormat] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".csv": "csv",
    ".conllu": "conllu",
}


def is_dataset_dir(path: Path) -> bool:
    """A Hugging Face `datasets` directory written by `Dataset.save_to_disk` (or a `DatasetDict` of them)."""
    return path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file())


def uncompressed_name(path: Path) -> str:
    """The file name, lower-cased, without a .gz, .bz2 or .zst suffix: what the format is read from."""
    name = path.name.lower()
    for suffix in COMPRESSION_SUFFIXES:
        name = name.removesuffix(suffix)
    return name


def file_format(path: Path) -> FileFormat:
    """dataset, parquet, jsonl (.jsonl, .json, .ndjson), tsv (.tsv, .tab), csv, conllu or text (anything else:
    plain text, or CoNLL for a token-classification reader)."""
    if is_dataset_dir(path):
        return "dataset"
    return _BY_SUFFIX.get(Path(uncompressed_name(path)).suffix, "text")


def delimiter(path: Path) -> str | None:
    """The field separator of a CSV (',') or TSV (a tab) file, else None."""
    return {"csv": ",", "tsv": "\t"}.get(file_format(path))
