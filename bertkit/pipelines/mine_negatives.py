"""`bertkit mine-negatives`: hard negatives for retrieval pairs, mined with the model being trained.

Every query of a pairs file is searched (exact search, by cosine) over the candidates: the pairs' distinct positives,
and the passages of `corpus` when given. Its hard negatives are the best-ranked candidates that are not one of its
own positives and not too close to them: a candidate the query scores above `max_relative` times its positive's score
is skipped (a near-duplicate of the positive, or an unlabelled answer: NV-Retriever's positive-aware mining), and
the first `skip_top` ranks are passed over (to leave out the false negatives a strong model ranks first). The output
is the pairs file with a `negative` column, one text, or a list of `negatives` texts, ready for
`bertkit finetune --task retrieval --set task.negative_field=negative`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bertkit.errors import BertkitError
from bertkit.pipelines.predict.common import inference_device, jsonl_sink
from bertkit.progress import Tracker
from bertkit.tasks.kinds.embedding import load_sentence_encoder
from bertkit.tasks.retrieval.data import read_pairs, read_passages
from bertkit.tasks.retrieval.search import embed_ids, encode_texts


def mine_negatives(
    model_path: Path,
    train_file: Path,
    output: Path,
    negatives: int = 1,
    corpus: Path | None = None,
    query_field: str = "query",
    positive_field: str = "positive",
    max_relative: float = 0.95,
    skip_top: int = 0,
    max_seq_len: int | None = None,
    batch_size: int = 64,
    device: str = "auto",
    overwrite: bool = False,
    quiet: bool = False,
) -> dict[str, Any]:
    if negatives < 1:
        raise BertkitError(f"--negatives must be at least 1, not {negatives}")
    if not 0.0 < max_relative <= 1.0:
        raise BertkitError(f"--max-relative must be in (0, 1], not {max_relative}")
    if skip_top < 0:
        raise BertkitError(f"--skip-top must be 0 or more, not {skip_top}")
    if output.exists() and not overwrite:
        raise BertkitError(f"output {output} already exists; pass --overwrite to replace it or choose another path")
    pairs = read_pairs(train_file, query_field, positive_field)
    candidates = list(dict.fromkeys(pairs.positives))
    if corpus is not None:
        candidates = list(dict.fromkeys([*candidates, *read_passages(corpus)[1]]))
    needed = negatives + skip_top + 1
    if len(candidates) < needed + 1:
        raise BertkitError(f"{len(candidates)} candidate passages cannot give {negatives} negatives after skipping "
                           f"{skip_top}; give more pairs or a --corpus")  # fmt: skip
    target = inference_device(device)
    loaded = load_sentence_encoder(model_path, target, max_seq_len)
    model, tokenizer, max_len = loaded.model, loaded.tokenizer, loaded.max_len
    queries = list(dict.fromkeys(pairs.queries))
    with Tracker("mine-negatives", total=len(queries) + len(candidates), quiet=quiet, unit="texts") as tracker:
        query_vectors = embed_ids(model, encode_texts(queries, tokenizer, max_len), tokenizer.pad_id, target,
                                  batch_size, tracker.advance)  # fmt: skip
        doc_vectors = embed_ids(model, encode_texts(candidates, tokenizer, max_len), tokenizer.pad_id, target,
                                batch_size, tracker.advance)  # fmt: skip
    position = {text: i for i, text in enumerate(candidates)}
    query_position = {text: i for i, text in enumerate(queries)}
    positives_of: dict[str, set[int]] = {}
    for query, positive in zip(pairs.queries, pairs.positives, strict=True):
        positives_of.setdefault(query, set()).add(position[positive])
    docs = F.normalize(doc_vectors, dim=-1).to(target)
    rows, short, skipped_close = [], 0, 0
    depth = min(len(candidates), needed + 64)
    for query, positive in zip(pairs.queries, pairs.positives, strict=True):
        vector = F.normalize(query_vectors[query_position[query]], dim=-1).to(target)
        scores = docs @ vector
        positive_score = float(scores[position[positive]])
        ceiling = positive_score - (1.0 - max_relative) * abs(positive_score)  # below the positive, whatever its sign
        top = torch.topk(scores, depth).indices.tolist()
        own = positives_of[query]
        kept = [i for i in top if i not in own][skip_top:]
        close = [i for i in kept if float(scores[i]) > ceiling]
        skipped_close += len(close)
        chosen = [i for i in kept if float(scores[i]) <= ceiling][:negatives]
        if len(chosen) < negatives:
            short += 1
            continue
        texts = [candidates[i] for i in chosen]
        rows.append({query_field: query, positive_field: positive, "negative": texts[0] if negatives == 1 else texts})
    if not rows:
        raise BertkitError(f"no query kept {negatives} negatives under --max-relative {max_relative}; raise it")
    with jsonl_sink(output) as sink:
        sink.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return {"output": str(output), "model": str(loaded.model_dir), "pairs": len(pairs), "written": len(rows),
            "dropped": short, "candidates": len(candidates), "negatives": negatives,
            "skipped_as_too_close": skipped_close, "max_relative": max_relative, "skip_top": skip_top}  # fmt: skip
