"""`bertkit predict --corpus`: a bi-encoder's top-k search, each query of the input against every passage of the
corpus (exact search by cosine), one JSON line per query in input order: `{"query", "hits": [{"id", "score",
"text"}]}`. The corpus is a BEIR folder (its ids), or text lines / a table's text column (ids are row numbers)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError
from bertkit.pipelines.predict.common import inference_device, jsonl_sink, torch_threads
from bertkit.progress import Tracker
from bertkit.tasks.data import read_texts
from bertkit.tasks.kinds.embedding import load_sentence_encoder
from bertkit.tasks.retrieval.data import read_passages
from bertkit.tasks.retrieval.search import embed_ids, encode_texts, exact_search


def search(model_path: Path, input_path: Path, corpus: Path, output: Path | None, top_k: int = 10,
           text_field: str | None = None, max_seq_len: int | None = None, batch_size: int = 32,
           overwrite: bool = False, device: str = "auto", quiet: bool = False,
           threads: int = 0) -> dict[str, Any]:  # fmt: skip
    with torch_threads(threads):
        return _search(model_path, input_path, corpus, output, top_k, text_field, max_seq_len, batch_size, overwrite,
                       device, quiet)  # fmt: skip


def _search(model_path: Path, input_path: Path, corpus: Path, output: Path | None, top_k: int, text_field: str | None,
            max_seq_len: int | None, batch_size: int, overwrite: bool, device: str,
            quiet: bool) -> dict[str, Any]:  # fmt: skip
    if top_k < 1:
        raise BertkitError(f"--top-k must be at least 1, not {top_k}")
    if output is not None and output.exists() and not overwrite:
        raise BertkitError(f"output {output} already exists; pass --overwrite to replace it or choose another path")
    if not Path(corpus).exists():
        raise BertkitError(f"--corpus {corpus} not found")
    target = inference_device(device)
    loaded = load_sentence_encoder(model_path, target, max_seq_len)
    model_dir, model, tokenizer, max_len = loaded.model_dir, loaded.model, loaded.tokenizer, loaded.max_len
    if not loaded.meta.get("embedding"):
        raise BertkitError(f"{model_dir} is not a bi-encoder (no pooling recorded): --corpus searches with a model of "
                           "`finetune --task retrieval|similarity` or a sentence-transformers directory")  # fmt: skip
    queries = read_texts(input_path, text_field or "text").texts
    ids, passages = read_passages(Path(corpus))
    started = time.perf_counter()
    with Tracker("search", total=len(queries) + len(passages), quiet=quiet, unit="texts") as tracker:
        query_vectors = embed_ids(model, encode_texts(queries, tokenizer, max_len), tokenizer.pad_id, target,
                                  batch_size, tracker.advance)  # fmt: skip
        passage_vectors = embed_ids(model, encode_texts(passages, tokenizer, max_len), tokenizer.pad_id, target,
                                    batch_size, tracker.advance)  # fmt: skip
    scores, found = exact_search(query_vectors, passage_vectors, top_k, target)
    lines = [json.dumps({"query": query, "hits": [{"id": ids[j], "score": round(float(s), 6), "text": passages[j]}
                                                   for s, j in zip(row_scores.tolist(), row.tolist(), strict=True)]},
                        ensure_ascii=False)
             for query, row_scores, row in zip(queries, scores, found, strict=True)]  # fmt: skip
    with jsonl_sink(output) as sink:
        sink.writelines(line + "\n" for line in lines)
    seconds = round(time.perf_counter() - started, 2)
    return {"output": str(output) if output else "-", "model": str(model_dir), "rows": len(queries),
            "corpus": len(passages), "top_k": min(top_k, len(passages)), "seconds": seconds,
            "device": str(target)}  # fmt: skip
