"""`bertkit augment`: TinyBERT's data augmentation for task-specific distillation.

For every example, up to `copies` new examples are drawn. In each, every replaceable word is replaced with
probability `prob` by one of its candidates, drawn uniformly. Words are the tokenizer's own (from its
pre-tokenizer: WordPiece, byte-level BPE and SentencePiece alike); as in TinyBERT, a word is replaceable
when it is alphabetic and not a stop word: negations ("not", "didn", "never") and function words are never
touched, since replacing them flips the label the teacher's soft targets then teach
(bertkit/distill/stopwords.py).

Candidates come from one of two sources (`candidates_from`):
  - `mlm`: for a word that is a single word piece, the top-`candidates` masked-language-model predictions
    of the teacher (or of `mlm_model`, which must read the teacher's tokenizer). As TinyBERT does, the
    model reads `[CLS] text-with-the-word-masked [SEP] original-text [SEP]`, so it sees the word it replaces
    and proposes words that fit both. Excluded: special tokens, word-continuation pieces (`##x`, a BPE
    piece without `Ġ`, a SentencePiece piece without `▁`), pieces without a letter, and the word itself.
    Words of several pieces take embedding neighbours, as TinyBERT gives them GloVe neighbours.
  - `embeddings`: every word takes the nearest neighbours (cosine) of the mean of its piece vectors in the
    teacher's own input word-embedding table, among the whole-word vocabulary entries above. This is what a
    teacher without an MLM head (a fine-tuned classifier, a sentence-embedding model) offers; `auto` picks
    it only then, and the summary says so (`candidate_source`).

Candidates are computed once per word of an example (and once per distinct word for neighbours) and every
copy samples from them; a copy identical to the example or to an earlier copy is dropped (hence "up to").
The output holds each original example first, unchanged, then its copies; labels and every other column
are carried over, and with a text pair both sides are augmented. Replacements are spliced into the
original string at the word's character offsets (leading and trailing punctuation of a word stays), so
spacing, punctuation and the case of untouched words survive; a replacement takes the case pattern of the
word it replaces.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.distill.stopwords import replaceable
from bertkit.errors import BertkitError
from bertkit.inputs.formats import delimiter, file_format
from bertkit.pipelines.predict.common import inference_device
from bertkit.progress import Tracker
from bertkit.tokenizers.base import Tokenizer

FORMAT_SUFFIXES = {"csv": ".csv", "tsv": ".tsv", "jsonl": ".jsonl", "parquet": ".parquet", "text": ".txt"}
MLM, EMBEDDING = 0, 1
CANDIDATE_SOURCES = ("auto", "mlm", "embeddings")
NO_MLM_HEAD = (
    "{model} has no MLM head (no mlm_head.* weights), so it cannot propose words in context: pass an MLM "
    "model that reads the same tokenizer with --mlm-model (e.g. the pretrained checkpoint it was fine-tuned "
    "from), or use --candidates-from embeddings (neighbours in its word-embedding table for every word)"
)


@dataclass
class Word:
    """A word of a text that may be replaced: its characters [start, end) and its tokens' positions."""

    start: int
    end: int
    surface: str
    positions: list[int]
    candidates: list[str] = field(default_factory=list)
    source: int = MLM


@dataclass
class Text:
    text: str
    ids: list[int]
    words: list[Word]


@dataclass
class AugmentOptions:
    copies: int = 20
    prob: float = 0.4
    candidates: int = 15
    seed: int = 0
    text_field: str = "text"
    text_pair_field: str | None = None
    label_field: str | None = "label"
    split: str | None = None
    batch_size: int = 64
    device: str = "auto"
    threads: int | None = None  # CPU threads for the teacher (torch's default when None)
    # Where candidates come from: the MLM ("mlm"), embedding neighbours ("embeddings"), or "auto": the MLM of
    # `mlm_model` or of the model itself when it has one, else embedding neighbours.
    candidates_from: str = "auto"
    mlm_model: Path | None = None

    def check(self) -> None:
        if self.candidates_from not in CANDIDATE_SOURCES:
            raise BertkitError(f"--candidates-from takes auto, mlm or embeddings, not '{self.candidates_from}'")
        if self.mlm_model is not None and self.candidates_from == "embeddings":
            raise BertkitError("--mlm-model gives MLM candidates, but --candidates-from embeddings uses none; drop one")
        if not 0 < self.prob <= 1:
            raise BertkitError(f"--prob must be in (0, 1] (the chance each word is replaced), not {self.prob}")
        if self.copies < 1:
            raise BertkitError(f"--copies must be at least 1, not {self.copies}")
        if self.candidates < 1:
            raise BertkitError(f"--candidates must be at least 1, not {self.candidates}")
        if self.threads is not None and self.threads < 1:
            raise BertkitError(f"--threads must be at least 1, not {self.threads}")
        if self.batch_size < 1:
            raise BertkitError(f"--batch-size must be at least 1, not {self.batch_size}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise BertkitError(f"--device takes auto, cpu or cuda, not '{self.device}'")
        inference_device(self.device)  # a GPU asked for where there is none: refused before any work


# -- formats ------------------------------------------------------------------------------------------------


def output_format(input_path: Path, output: Path, overwrite: bool) -> str:
    """The output's format: the input's (a datasets directory may be written as any table format)."""
    name = output.name.lower()
    if name.endswith((".gz", ".bz2", ".zst")):
        raise BertkitError(f"--output {output}: compressed output is not supported; drop the compression suffix")
    if output.is_dir():
        raise BertkitError(f"--output {output} is a directory; give a file name")
    if output.exists() and not overwrite:
        raise BertkitError(f"output {output} already exists; pass --overwrite to replace it or choose another path")
    kind = file_format(input_path) if input_path.exists() else None
    out_kind = file_format(output)
    if kind is None:
        return out_kind  # the missing input is reported when it is read
    if kind not in FORMAT_SUFFIXES and kind != "dataset":
        raise BertkitError(f"{input_path} is a {kind} file; augment reads CSV/TSV, JSON lines, Parquet, a datasets "
                           "directory or text lines")  # fmt: skip
    if kind == "dataset":
        if out_kind not in ("csv", "tsv", "jsonl", "parquet"):
            raise BertkitError(f"--output {output}: write a datasets directory as .csv, .tsv, .jsonl or .parquet")
        return out_kind
    if out_kind != kind:
        raise BertkitError(f"--output {output} must have the input's format ({kind}): name it *{FORMAT_SUFFIXES[kind]}")
    return kind


def _read(input_path: Path, opts: AugmentOptions) -> tuple[list[dict[str, Any]], list[str], Any, int]:
    """(records, column order, parquet schema or None, rows read): every column of every row, so the output
    carries them all. read_task_data checks the rows first (one error naming the row, as finetune's)."""
    from bertkit.tasks.data import csv_rows, jsonl_rows, read_task_data, read_texts

    kind = file_format(input_path)
    if kind == "text":
        data = read_texts(input_path)
        return [{opts.text_field: t} for t in data.texts], [opts.text_field], None, data.rows_read
    data = read_task_data(input_path, opts.text_field, opts.label_field, opts.text_pair_field, opts.split)
    fields = [f for f in (opts.text_field, opts.text_pair_field, opts.label_field) if f]
    schema = None
    if kind in ("csv", "tsv"):
        rows, columns = csv_rows(input_path, delimiter(input_path) or ",")
        records = [row for _, row in rows]
    elif kind == "jsonl":
        records = [row for _, row in jsonl_rows(input_path)]
        columns = list(dict.fromkeys(k for r in records for k in r))
    elif kind == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(input_path)
        schema, columns, records = table.schema, list(table.column_names), table.to_pylist()
    else:  # a datasets directory: the columns read_task_data read
        columns = fields
        records = []
        for i, text in enumerate(data.texts):
            record: dict[str, Any] = {opts.text_field: text}
            if opts.text_pair_field and data.pairs is not None:
                record[opts.text_pair_field] = data.pairs[i]
            if opts.label_field and data.labels is not None:
                record[opts.label_field] = data.labels[i]
            records.append(record)
    if len(records) != len(data.texts):  # cannot happen after a clean read_task_data; never misalign rows
        raise BertkitError(f"{input_path}: read {len(records)} rows but {len(data.texts)} examples")
    for i, record in enumerate(records):
        record[opts.text_field] = data.texts[i]
        if opts.text_pair_field and data.pairs is not None:
            record[opts.text_pair_field] = data.pairs[i]
    return records, columns, schema, data.rows_read


def _write(output: Path, kind: str, records: list[dict[str, Any]], columns: list[str], schema: Any) -> None:
    """Write under a temporary name next to `output`, then rename: an interrupted run leaves nothing."""
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{output.name}.tmp-", dir=output.parent)
    tmp = Path(name)
    try:
        if kind == "parquet":
            os.close(fd)
            import pyarrow as pa
            import pyarrow.parquet as pq

            if schema is not None:
                table = pa.Table.from_pylist(records, schema=schema)
            else:
                table = pa.table({c: [r.get(c) for r in records] for c in columns})
            pq.write_table(table, tmp)
        else:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                if kind in ("csv", "tsv"):
                    writer = csv.writer(handle, delimiter="\t" if kind == "tsv" else ",", lineterminator="\n")
                    writer.writerow(columns)
                    writer.writerows([r.get(c, "") for c in columns] for r in records)
                elif kind == "jsonl":
                    handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
                else:
                    handle.writelines(str(next(iter(r.values()))) + "\n" for r in records)
        os.replace(tmp, output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# -- words and candidates -----------------------------------------------------------------------------------


def _contraction_tail(text: str, start: int, end: int) -> bool:
    """The 's / 't / 'll of a contraction, a word of its own for WordPiece and byte-level BPE: kept as it is."""
    return end - start <= 2 and start >= 2 and text[start - 1] in "'\u2019" and text[start - 2].isalpha()


def split_words(tokenizer: Tokenizer, texts: list[str]) -> list[Text]:
    """Tokens and replaceable words of each text, by the tokenizer's own word boundaries and offsets.

    A word's span is trimmed of spaces and of leading/trailing characters that are neither letters nor
    digits (a SentencePiece word "film," replaces "film" and keeps the comma). Only alphabetic words that
    are not stop words are replaceable (TinyBERT's rule: no negations, numbers or function words), and never
    the tails of contractions ("it's", "don't")."""
    out = []
    for text, enc in zip(texts, tokenizer.backend.encode_batch(texts, add_special_tokens=False), strict=True):
        groups: dict[int, list[int]] = {}
        for position, word_id in enumerate(enc.word_ids):
            if word_id is not None:
                groups.setdefault(word_id, []).append(position)
        words = []
        for positions in groups.values():
            start = min(enc.offsets[p][0] for p in positions)
            end = max(enc.offsets[p][1] for p in positions)
            while start < end and not text[start].isalnum():
                start += 1
            while end > start and not text[end - 1].isalnum():
                end -= 1
            if start == end or _contraction_tail(text, start, end) or not replaceable(text[start:end]):
                continue
            words.append(Word(start, end, text[start:end], positions))
        out.append(Text(text, list(enc.ids), words))
    return out


def _token_surfaces(tokenizer: Tokenizer) -> list[str]:
    size = tokenizer.vocab_size
    return [s.strip() for s in tokenizer.backend.decode_batch([[i] for i in range(size)], skip_special_tokens=False)]


def whole_word_mask(tokenizer: Tokenizer, surfaces: list[str]) -> np.ndarray:
    """Vocabulary entries that are a whole word on their own: not special, a word's first piece by the
    tokenizer's convention, with a letter or digit."""
    allowed = np.zeros(len(surfaces), bool)
    for token, index in tokenizer.backend.get_vocab(with_added_tokens=True).items():
        if index >= len(surfaces) or index in tokenizer.special_ids:
            continue
        if tokenizer.kind == "wordpiece":
            first = not token.startswith("##")
        elif tokenizer.kind == "bbpe":
            first = token.startswith("Ġ")
        else:
            first = token.startswith("▁") and len(token) > 1
        # A replacement obeys the rule a replaced word does: alphabetic, no stop word or negation.
        allowed[index] = first and replaceable(surfaces[index])
    return allowed


def _key(tokenizer: Tokenizer, surface: str) -> str:
    """A word as the tokenizer sees it (normalised: lower-cased, accents stripped, if it does so), casefolded."""
    return tokenizer.normalize(surface).casefold()


def match_case(candidate: str, original: str) -> str:
    """The replacement in the case pattern of the word it replaces (ALL CAPS, Capitalised, or as predicted)."""
    if len(original) > 1 and original.isupper() and not candidate.isupper():
        return candidate.upper()
    if original[:1].isupper() and candidate[:1].islower():
        return candidate[:1].upper() + candidate[1:]
    return candidate


def mlm_rows(texts: list[Text], max_len: int) -> list[tuple[Word, list[int], int, int]]:
    """(word, window of ids, masked position in the window, original id) per single-piece word. The model
    reads the window twice (masked, then as it is), so a text longer than half the model's length is cut
    to a window centred on the word."""
    rows = []
    room = (max_len - 3) // 2
    for text in texts:
        for word in text.words:
            if len(word.positions) != 1:
                continue
            position = word.positions[0]
            start = 0
            if len(text.ids) > room:
                start = min(max(position - room // 2, 0), len(text.ids) - room)
            rows.append((word, text.ids[start : start + room], position - start, text.ids[position]))
    return rows


def fill_mlm_candidates(
    teacher: Any,
    tokenizer: Tokenizer,
    rows: list[tuple[Word, list[int], int, int]],
    allowed: torch.Tensor,
    surfaces: list[str],
    same_surface: dict[str, list[int]],
    k: int,
    batch_size: int,
    device: torch.device,
    quiet: bool,
) -> None:
    """Mask one word per row, many rows per forward; keep the top-k allowed predictions. Each row is
    TinyBERT's `[CLS] masked [SEP] original [SEP]` (segments 0 then 1): the model sees the word it replaces,
    which keeps its proposals close to it."""
    order = np.argsort([len(r[1]) for r in rows], kind="stable")
    with_types = teacher.config.type_vocab_size > 0
    two_segments = teacher.config.type_vocab_size > 1
    blocked = (~allowed).to(device)
    with Tracker("augment: teacher MLM", total=len(rows), quiet=quiet, unit="words") as tracker:
        for begin in range(0, len(rows), batch_size):
            batch = [rows[i] for i in order[begin : begin + batch_size]]
            width = 2 * max(len(r[1]) for r in batch) + 3
            input_ids = torch.full((len(batch), width), tokenizer.pad_id, dtype=torch.long)
            types_cpu = torch.zeros((len(batch), width), dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.bool)
            flat = torch.empty(len(batch), dtype=torch.long)
            for j, (_, ids, position, _) in enumerate(batch):
                masked = list(ids)
                masked[position] = tokenizer.mask_id
                row = [tokenizer.cls_id, *masked, tokenizer.sep_id, *ids, tokenizer.sep_id]
                input_ids[j, : len(row)] = torch.tensor(row)
                mask[j, : len(row)] = True
                if two_segments:
                    types_cpu[j, len(ids) + 2 : len(row)] = 1
                flat[j] = j * width + position + 1
            input_ids, mask = input_ids.to(device), mask.to(device)
            types = types_cpu.to(device) if with_types else None
            logits = teacher(input_ids, mask, types, mlm_positions=flat.to(device)).mlm_logits.float()
            logits = logits.masked_fill(blocked, float("-inf"))
            for j, (word, _, _, original) in enumerate(batch):
                logits[j, original] = float("-inf")  # the word itself, and its other spellings
                logits[j, same_surface.get(_key(tokenizer, word.surface), [])] = float("-inf")
            top = logits.topk(min(k, int(allowed.sum())), dim=-1)
            for j, (word, _, _, _) in enumerate(batch):
                ids = top.indices[j][torch.isfinite(top.values[j])].tolist()
                word.candidates = [match_case(surfaces[i], word.surface) for i in ids]
                word.source = MLM
            tracker.advance(len(batch))


def fill_embedding_candidates(
    tokenizer: Tokenizer, table: torch.Tensor, words: list[Word], ids_of: dict[int, list[int]],
    allowed: torch.Tensor, surfaces: list[str], k: int, chunk: int = 256,
) -> None:  # fmt: skip
    """Multi-piece words: the nearest whole-word vocabulary entries (cosine) to the mean of the word's piece
    vectors in the input embedding table (bertkit's stand-in for TinyBERT's GloVe neighbours)."""
    if not words:
        return
    normed = torch.nn.functional.normalize(table.float(), dim=-1)
    blocked = ~allowed.to(table.device)
    keys: dict[tuple[int, ...], list[Word]] = {}
    for word in words:
        keys.setdefault(tuple(ids_of[id(word)]), []).append(word)
    pieces = list(keys)
    extra = 8  # room for entries spelled as the word itself, dropped after the top-k
    for begin in range(0, len(pieces), chunk):
        group = pieces[begin : begin + chunk]
        queries = torch.stack([table[list(p)].float().mean(0) for p in group])
        sims = torch.nn.functional.normalize(queries, dim=-1) @ normed.T
        sims = sims.masked_fill(blocked, float("-inf"))
        top = sims.topk(min(k + extra, int(allowed.sum())), dim=-1)
        for j, key in enumerate(group):
            ids = top.indices[j][torch.isfinite(top.values[j])].tolist()
            for word in keys[key]:
                own = _key(tokenizer, word.surface)
                chosen = [surfaces[i] for i in ids if surfaces[i].casefold() != own][:k]
                word.candidates = [match_case(c, word.surface) for c in chosen]
                word.source = EMBEDDING


def candidate_source(teacher: Any, opts: AugmentOptions) -> tuple[Any, str]:
    """(the model whose MLM proposes words, or None for embedding neighbours only; the source's name).

    An `mlm_model` must read the teacher's tokenizer: its proposals are the teacher's vocabulary entries,
    and the augmented text is what the teacher labels."""
    from bertkit.distill.teacher import Teacher

    if opts.candidates_from == "embeddings":
        return None, "embeddings"
    if opts.mlm_model is not None:
        mlm = Teacher.load(str(opts.mlm_model))
        if not mlm.has_mlm_head:
            raise BertkitError(f"--mlm-model {mlm.source} has no MLM head (no mlm_head.* weights); pass one that has")
        if mlm.tokenizer.fingerprint() != teacher.tokenizer.fingerprint():
            raise BertkitError(
                f"--mlm-model {mlm.source} reads another vocabulary than {teacher.source}: its proposals must be "
                "the teacher's words; pass an MLM model built on the teacher's tokenizer, or --candidates-from "
                "embeddings"
            )
        return mlm, f"mlm:{mlm.source}"
    if teacher.has_mlm_head:
        return teacher, "mlm"
    if opts.candidates_from == "mlm":
        raise BertkitError(NO_MLM_HEAD.format(model=teacher.source))
    return None, "embeddings"


# -- sampling -----------------------------------------------------------------------------------------------


def _draw(text: Text, coins: np.ndarray, picks: np.ndarray, prob: float) -> tuple[str, list[int]]:
    """One copy of a text: (new text, replacements per source)."""
    parts, cursor, counts = [], 0, [0, 0]
    for w, word in enumerate(text.words):
        if not word.candidates or coins[w] >= prob:
            continue
        parts += [text.text[cursor : word.start], word.candidates[int(picks[w] * len(word.candidates))]]
        cursor = word.end
        counts[word.source] += 1
    parts.append(text.text[cursor:])
    return "".join(parts), counts


def augment(
    model_path: Path,
    input_path: Path,
    output: Path,
    opts: AugmentOptions | None = None,
    overwrite: bool = False,
    quiet: bool = False,
) -> dict[str, Any]:
    opts = opts or AugmentOptions()
    opts.check()
    previous = torch.get_num_threads()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    try:
        return _augment(model_path, input_path, output, opts, overwrite, quiet)
    finally:
        torch.set_num_threads(previous)  # a library call leaves the process as it found it


def _augment(
    model_path: Path, input_path: Path, output: Path, opts: AugmentOptions, overwrite: bool, quiet: bool
) -> dict[str, Any]:
    from bertkit.distill.teacher import Teacher

    out_kind = output_format(Path(input_path), Path(output), overwrite)
    started = time.perf_counter()
    records, columns, schema, rows_read = _read(Path(input_path), opts)
    if file_format(Path(input_path)) == "text":
        opts.text_pair_field = None
    target = inference_device(opts.device)
    teacher = Teacher.load(str(model_path))
    model_dir, tokenizer = Path(teacher.source), teacher.tokenizer
    predictor, source = candidate_source(teacher, opts)
    if predictor is not None:
        predictor = predictor.to(target)

    sides = [opts.text_field] + ([opts.text_pair_field] if opts.text_pair_field else [])
    texts = {side: split_words(tokenizer, [str(r[side]) for r in records]) for side in sides}
    all_texts = [t for side in sides for t in texts[side]]
    surfaces = _token_surfaces(tokenizer)
    allowed_np = whole_word_mask(tokenizer, surfaces)
    if not allowed_np.any():
        raise BertkitError(f"{model_dir}: the vocabulary has no whole-word entries to draw replacements from")
    allowed = torch.from_numpy(allowed_np)
    same_surface: dict[str, list[int]] = {}
    for index in np.flatnonzero(allowed_np):
        same_surface.setdefault(surfaces[index].casefold(), []).append(int(index))

    rows: list[tuple[Word, list[int], int, int]] = []
    if predictor is not None:
        cfg = predictor.config
        rows = mlm_rows(all_texts, cfg.max_position_embeddings - cfg.position_offset)
        fill_mlm_candidates(
            predictor, tokenizer, rows, allowed, surfaces, same_surface, opts.candidates, opts.batch_size, target, quiet
        )
    neighbours = [w for t in all_texts for w in t.words if predictor is None or len(w.positions) > 1]
    ids_of = {id(w): [t.ids[p] for p in w.positions] for t in all_texts for w in t.words}
    fill_embedding_candidates(
        tokenizer, teacher.encoder.word_embeddings.detach(), neighbours, ids_of, allowed, surfaces, opts.candidates
    )
    del predictor, teacher
    teacher_seconds = time.perf_counter() - started

    rng = np.random.default_rng(opts.seed)
    out_records: list[dict[str, Any]] = []
    augmented = duplicates = words_seen = 0
    replaced = [0, 0]
    for i, record in enumerate(records):
        out_records.append(record)
        seen = {tuple(str(record[side]) for side in sides)}
        for _ in range(opts.copies):
            new = dict(record)
            counts = [0, 0]
            eligible = 0
            for side in sides:
                text = texts[side][i]
                draws = rng.random((2, len(text.words)))
                new[side], side_counts = _draw(text, draws[0], draws[1], opts.prob)
                counts = [a + b for a, b in zip(counts, side_counts, strict=True)]
                eligible += sum(1 for w in text.words if w.candidates)
            key = tuple(new[side] for side in sides)
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            out_records.append(new)
            augmented += 1
            words_seen += eligible
            replaced = [a + b for a, b in zip(replaced, counts, strict=True)]
    _write(Path(output), out_kind, out_records, columns, schema)
    seconds = time.perf_counter() - started
    total = sum(replaced)
    return {
        "output": str(output),
        "model": str(model_dir),
        "format": out_kind,
        "examples_in": len(records),
        "examples_out": len(out_records),
        "augmented": augmented,
        "duplicates_dropped": duplicates,
        "copies": opts.copies,
        "prob": opts.prob,
        "candidates": opts.candidates,
        "seed": opts.seed,
        "rows_read": rows_read,
        "words": words_seen,
        "words_replaced": total,
        "replaced_fraction": round(total / words_seen, 4) if words_seen else 0.0,
        "replaced_mlm": replaced[MLM],
        "replaced_embedding": replaced[EMBEDDING],
        "candidate_source": source,
        "mlm_words": len(rows),
        "neighbour_words": len(neighbours),
        "teacher_seconds": round(teacher_seconds, 2),
        "seconds": round(seconds, 2),
    }
