"""Retrieval data: training pairs (a query, a passage that answers it, optionally a hard negative) from any task
file, and evaluation sets, either a BEIR folder (`corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`) or a
pairs file read as one (each distinct passage a document, each distinct query a query judged by its passages).

Every problem is one `BertkitError` naming the file, the row and the fix: a missing column, an empty text, a
duplicate id, a judgement naming a query or document the set does not have."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.inputs.sources import read_text, split_lines
from bertkit.tasks.data import read_rows, read_texts

BEIR_FILES = ("corpus.jsonl", "queries.jsonl")


@dataclass
class Pairs:
    """Training examples: queries[i] is answered by positives[i]; negatives[i] (when given) does not answer it."""

    path: Path
    queries: list[str] = field(default_factory=list)
    positives: list[str] = field(default_factory=list)
    negatives: list[list[str]] | None = None
    rows_read: int = 0
    skipped: int = 0

    def __len__(self) -> int:
        return len(self.queries)


@dataclass
class RetrievalSet:
    """Queries, a corpus and the judgements between them (query id -> document id -> grade, 1 or more relevant)."""

    source: Path
    query_ids: list[str]
    queries: list[str]
    doc_ids: list[str]
    docs: list[str]
    qrels: dict[str, dict[str, int]]

    def report(self) -> dict[str, int]:
        return {"queries": len(self.query_ids), "documents": len(self.doc_ids),
                "judgements": sum(len(v) for v in self.qrels.values())}  # fmt: skip


def is_beir_folder(path: Path) -> bool:
    return path.is_dir() and all((path / name).is_file() for name in BEIR_FILES)


def read_pairs(path: Path, query_field: str, positive_field: str, negative_field: str | None = None,
               split: str | None = None, skip_bad_rows: bool = False) -> Pairs:  # fmt: skip
    """Rows with a query, a positive passage and (with `negative_field`) a hard negative or a list of them."""
    fields = [query_field, positive_field] + ([negative_field] if negative_field else [])
    rows, columns = read_rows(Path(path), fields, split)
    pairs = Pairs(Path(path), negatives=[] if negative_field else None)
    options = {query_field: "task.query_field", positive_field: "task.positive_field",
               negative_field: "task.negative_field"}  # fmt: skip
    checked = False
    for where, row in rows:
        pairs.rows_read += 1
        if not checked:
            names = columns if columns is not None else (list(row) if isinstance(row, dict) else [])
            if columns is not None or isinstance(row, dict):
                for name in fields:
                    if name not in names:
                        shown = ", ".join(repr(c) for c in names[:20])
                        raise BertkitError(f"{path} has no column '{name}' (columns: {shown}); name the column "
                                           f"with {options[name]}")  # fmt: skip
                checked = True
        problem, values = _pair_row(row, query_field, positive_field, negative_field)
        if problem is not None:
            if not skip_bad_rows:
                raise BertkitError(f"{path} {where}: {problem}; fix the row, or set task.skip_bad_rows=true")
            pairs.skipped += 1
            continue
        query, positive, negatives = values
        pairs.queries.append(query)
        pairs.positives.append(positive)
        if pairs.negatives is not None:
            pairs.negatives.append(negatives)
    if pairs.rows_read == 0:
        raise BertkitError(f"{path} holds no rows; give a file of (query, positive) pairs")
    if not pairs.queries:
        raise BertkitError(f"{path}: all {pairs.rows_read} rows were bad and skipped")
    if pairs.negatives is not None and len({len(n) for n in pairs.negatives}) > 1:
        counts = sorted({len(n) for n in pairs.negatives})
        raise BertkitError(f"{path}: rows hold different numbers of negatives ({counts}); give each row as many")
    return pairs


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _pair_row(row: Any, query_field: str, positive_field: str,
              negative_field: str | None) -> tuple[str | None, tuple[str, str, list[str]]]:  # fmt: skip
    none: tuple[str, str, list[str]] = ("", "", [])
    if isinstance(row, str):
        return row, none
    if not isinstance(row, dict):
        return f"is a JSON {type(row).__name__}, not an object with fields", none
    query, positive = _text(row.get(query_field)), _text(row.get(positive_field))
    if query is None:
        return f"missing or empty query (column '{query_field}')", none
    if positive is None:
        return f"missing or empty positive (column '{positive_field}')", none
    negatives: list[str] = []
    if negative_field:
        value = row.get(negative_field)
        values = value if isinstance(value, list) else [value]
        negatives = [v for v in values if _text(v) is not None]
        if not negatives or len(negatives) != len(values):
            return f"missing or empty negative (column '{negative_field}')", none
    return None, (query, positive, negatives)


def pairs_as_set(pairs: Pairs) -> RetrievalSet:
    """A pairs file as an evaluation set: each distinct positive (and negative) a document, each distinct query a
    query, relevant to the positives it is paired with; the negatives are distractors in the corpus."""
    doc_index: dict[str, int] = {}
    query_index: dict[str, int] = {}
    qrels: dict[str, dict[str, int]] = {}
    for i, (query, positive) in enumerate(zip(pairs.queries, pairs.positives, strict=True)):
        texts = [positive, *(pairs.negatives[i] if pairs.negatives is not None else [])]
        for text in texts:
            doc_index.setdefault(text, len(doc_index))
        qid = f"q{query_index.setdefault(query, len(query_index))}"
        qrels.setdefault(qid, {})[f"d{doc_index[positive]}"] = 1
    return RetrievalSet(pairs.path, [f"q{i}" for i in range(len(query_index))], list(query_index),
                        [f"d{i}" for i in range(len(doc_index))], list(doc_index), qrels)  # fmt: skip


def read_beir(folder: Path, split: str = "test") -> RetrievalSet:
    """A BEIR folder: `corpus.jsonl` ({"_id", "title", "text"}; the title, when there is one, is put before the
    text as BEIR and sentence-transformers do), `queries.jsonl` ({"_id", "text"}) and `qrels/<split>.tsv`
    (query-id, corpus-id, score, with a header). Only the queries the split judges are kept."""
    folder = Path(folder)
    for name in BEIR_FILES:
        if not (folder / name).is_file():
            raise BertkitError(f"{folder} is not a BEIR folder: {name} is missing")
    qrels_file = folder / "qrels" / f"{split}.tsv"
    if not qrels_file.is_file():
        have = sorted(p.stem for p in (folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        raise BertkitError(f"{folder} has no qrels/{split}.tsv (splits: {', '.join(have) or 'none'}); "
                           "choose one with task.qrels_split")  # fmt: skip
    doc_ids, docs = _jsonl_texts(folder / "corpus.jsonl", title=True)
    query_ids, queries = _jsonl_texts(folder / "queries.jsonl", title=False)
    qrels = _read_qrels(qrels_file, set(query_ids), set(doc_ids))
    keep = [i for i, qid in enumerate(query_ids) if qid in qrels]
    return RetrievalSet(folder, [query_ids[i] for i in keep], [queries[i] for i in keep], doc_ids, docs, qrels)


def read_corpus(folder: Path) -> tuple[list[str], list[str]]:
    """(ids, texts) of a BEIR folder's corpus, each text its title and text joined."""
    return _jsonl_texts(Path(folder) / BEIR_FILES[0], title=True)


def read_passages(path: Path) -> tuple[list[str], list[str]]:
    """(ids, texts) of passages to search: a BEIR folder's corpus (its ids), or text lines or a table's `text` column
    (ids are row numbers from 1)."""
    path = Path(path)
    if is_beir_folder(path):
        return read_corpus(path)
    texts = read_texts(path, "text").texts
    return [str(i) for i in range(1, len(texts) + 1)], texts


def _jsonl_texts(path: Path, title: bool) -> tuple[list[str], list[str]]:
    ids: list[str] = []
    texts: list[str] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(split_lines(read_text(path)), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise BertkitError(f"{path} line {lineno}: not valid JSON ({err.msg})") from None
        if not isinstance(row, dict) or "_id" not in row:
            raise BertkitError(f'{path} line {lineno}: a row needs an "_id" field')
        rid = str(row["_id"])
        if rid in seen:
            raise BertkitError(f"{path} line {lineno}: id {rid!r} is already used on line {seen[rid]}; make ids unique")
        seen[rid] = lineno
        text = row.get("text")
        head = row.get("title") if title else None
        text = text.strip() if isinstance(text, str) else ""
        head = head.strip() if isinstance(head, str) else ""
        joined = f"{head} {text}".strip()
        if not joined:
            raise BertkitError(f"{path} line {lineno}: id {rid!r} has an empty text")
        ids.append(rid)
        texts.append(joined)
    if not ids:
        raise BertkitError(f"{path} holds no rows")
    return ids, texts


def _read_qrels(path: Path, query_ids: set[str], doc_ids: set[str]) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    lines = split_lines(read_text(path))
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.rstrip("\r\n").split("\t")
        if lineno == 1 and parts[:2] == ["query-id", "corpus-id"]:
            continue
        if len(parts) != 3:
            raise BertkitError(f"{path} line {lineno}: a judgement is query-id<TAB>corpus-id<TAB>score, "
                               f"not {len(parts)} fields")  # fmt: skip
        qid, did, grade = parts
        try:
            value = int(grade)
        except ValueError:
            raise BertkitError(f"{path} line {lineno}: score {grade!r} is not an integer") from None
        if qid not in query_ids:
            raise BertkitError(f"{path} line {lineno}: query {qid!r} is not in queries.jsonl")
        if did not in doc_ids:
            raise BertkitError(f"{path} line {lineno}: document {did!r} is not in corpus.jsonl")
        if did in qrels.get(qid, {}):
            raise BertkitError(f"{path} line {lineno}: ({qid}, {did}) is judged twice")
        qrels.setdefault(qid, {})[did] = value
    if not any(g >= 1 for docs in qrels.values() for g in docs.values()):
        raise BertkitError(f"{path} judges no document relevant (a score of at least 1)")
    return qrels


def read_eval_set(path: Path, query_field: str, positive_field: str, negative_field: str | None,
                  split: str | None, qrels_split: str) -> RetrievalSet:  # fmt: skip
    """--eval of a retrieval task: a BEIR folder, or a pairs file read as one."""
    path = Path(path)
    if is_beir_folder(path):
        return read_beir(path, qrels_split)
    return pairs_as_set(read_pairs(path, query_field, positive_field, negative_field, split))
