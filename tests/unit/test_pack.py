"""Packing formats on real text: lengths, token accounting, pair labels and segment order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertkit.corpus.build import BuildOptions, build_corpus
from bertkit.corpus.pack import FORMATS, PAIR_FORMATS
from bertkit.corpus.sentences import split_rule_based
from bertkit.corpus.shards import Corpus
from bertkit.inputs.sources import iter_documents
from bertkit.tokenizers.base import load_tokenizer

MAX_LEN = 96


@pytest.fixture(scope="module")
def reference_stream(text_file: Path, tokenizer_dir: Path) -> tuple[list[np.ndarray], int]:
    """Independently tokenized input: one flat id array per document, and the total token count."""
    tok = load_tokenizer(tokenizer_dir)
    docs = []
    for document in iter_documents([text_file]):
        sentences = [s for line in document for s in split_rule_based(line)]
        docs.append(np.concatenate([np.asarray(ids, np.int64) for ids in tok.encode_batch(sentences)]))
    return docs, int(sum(d.size for d in docs))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, text_file: Path, tokenizer_dir: Path) -> dict[str, tuple]:
    root = tmp_path_factory.mktemp("pack")
    out = {}
    for fmt in FORMATS:
        manifest = build_corpus([text_file], tokenizer_dir, root / fmt, BuildOptions(format=fmt, max_seq_len=MAX_LEN))
        out[fmt] = (Corpus(root / fmt), manifest)
    return out


def content(corpus: Corpus, special: np.ndarray) -> np.ndarray:
    tokens = np.asarray(corpus.tokens).astype(np.int64)
    return tokens[~np.isin(tokens, special)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_lengths_and_token_accounting(built: dict, reference_stream: tuple, tokenizer_dir: Path, fmt: str) -> None:
    corpus, manifest = built[fmt]
    stats = manifest["stats"]
    special = np.fromiter(load_tokenizer(tokenizer_dir).special_ids, np.int64)
    assert corpus.lengths().max() <= MAX_LEN
    _, input_tokens = reference_stream
    placed = content(corpus, special).size  # counted from the shard itself
    assert stats["input_tokens"] == input_tokens
    assert stats["content_tokens"] == placed
    # Nothing lost that is not reported: input = placed - borrowed + truncated + dropped.
    assert input_tokens == placed - stats["borrowed_tokens"] + stats["truncated_tokens"] + stats["dropped_tokens"]
    assert stats["padding_tokens"] == len(corpus) * MAX_LEN - int(corpus.lengths().sum())
    if fmt in ("full-sentences", "doc-sentences", "single-segment"):
        assert stats["truncated_tokens"] == stats["dropped_tokens"] == stats["borrowed_tokens"] == 0


def test_contiguous_formats_keep_every_token_in_order(
    built: dict, reference_stream: tuple, tokenizer_dir: Path
) -> None:
    special = np.fromiter(load_tokenizer(tokenizer_dir).special_ids, np.int64)
    docs, _ = reference_stream
    for fmt in ("full-sentences", "doc-sentences", "single-segment"):
        np.testing.assert_array_equal(content(built[fmt][0], special), np.concatenate(docs))


def test_document_boundaries(built: dict, tokenizer_dir: Path) -> None:
    tok = load_tokenizer(tokenizer_dir)
    full, doc, single = built["full-sentences"][0], built["doc-sentences"][0], built["single-segment"][0]
    inner_seps = [int((full[i][1:-1] == tok.sep_id).sum()) for i in range(len(full))]
    assert sum(inner_seps) > 0  # full-sentences crosses documents, marked by a separator
    assert all((doc[i][1:-1] != tok.sep_id).all() for i in range(len(doc)))  # doc-sentences never does
    # single-segment fills the whole length except at each document's end: fewer sequences, less padding.
    full_share = (single.lengths() == MAX_LEN).mean()
    assert full_share > 0.8 and len(single) <= len(doc)
    assert (
        built["single-segment"][1]["stats"]["padding_fraction"] < built["doc-sentences"][1]["stats"]["padding_fraction"]
    )


@pytest.mark.parametrize("fmt", PAIR_FORMATS)
def test_pair_labels_balanced(tmp_path: Path, text_file: Path, tokenizer_dir: Path, fmt: str) -> None:
    labels = []
    for seed in range(3):
        build_corpus([text_file], tokenizer_dir, tmp_path / str(seed), BuildOptions(format=fmt, seed=seed))
        labels.append(np.asarray(Corpus(tmp_path / str(seed)).pairs[:, 1]))
    labels = np.concatenate(labels)
    assert set(np.unique(labels)) == {0, 1}
    assert abs(labels.mean() - 0.5) < 0.03, labels.mean()


def occurrences(stream: bytes, segment: np.ndarray) -> np.ndarray:
    """Token indices of every occurrence of `segment` in the stream (uint32 bytes)."""
    needle, at, hits = segment.astype(np.uint32).tobytes(), 0, []
    while (hit := stream.find(needle, at)) >= 0:
        if hit % 4 == 0:
            hits.append(hit // 4)
        at = hit + 1
    return np.asarray(hits, np.int64)


@pytest.mark.parametrize("fmt", ["segment-pair", "sop", "sentence-pair"])
def test_pair_segments_come_from_the_text_in_the_labelled_order(built: dict, reference_stream: tuple, fmt: str) -> None:
    corpus = built[fmt][0]
    docs, _ = reference_stream
    stream = np.concatenate(docs).astype(np.uint32).tobytes()
    checked = agree = 0
    for i in range(len(corpus)):
        ids = corpus[i].astype(np.int64)
        b_start, label = corpus.pair(i)
        a, b = ids[1 : b_start - 1], ids[b_start:-1]
        assert corpus.lengths()[i] <= MAX_LEN and b_start >= 2 and a.size and b.size
        hits_a, hits_b = occurrences(stream, a), occurrences(stream, b)
        assert hits_a.size and hits_b.size  # both segments are verbatim stretches of the input
        if min(np.unique(a).size, np.unique(b).size) < 10:
            continue  # too short or too repetitive (ASCII tables of dashes) to locate reliably
        # The documentation repeats some paragraphs: judge the order by the closest pair of occurrences.
        gaps = hits_b[None, :] - hits_a[:, None]
        row, col = np.unravel_index(np.abs(gaps).argmin(), gaps.shape)
        pos_a, pos_b = hits_a[row], hits_b[col]
        checked += 1
        if fmt == "sop":
            agree += (pos_a < pos_b) == (label == 0)  # label 1: the two segments are swapped
        elif label == 0:
            agree += pos_a < pos_b  # actual next: B follows A
        else:
            agree += 1
    assert checked > 50 and agree / checked > 0.99, (checked, agree)


def test_packed_documents_are_doc_sentences_sequences_placed_into_rows(built: dict, tokenizer_dir: Path) -> None:
    """packed-documents (ModernBERT's sequence packing): every single-segment sequence, [CLS] ... [SEP], lands
    whole in one row, where the shard records its start; short ones share rows, so far less padding remains."""
    tok = load_tokenizer(tokenizer_dir)
    packed, manifest = built["packed-documents"]
    doc, doc_manifest = built["single-segment"]
    assert packed.has_documents and not doc.has_documents and manifest["has_documents"]
    pieces = []
    for i in range(len(packed)):
        row, starts = packed[i].astype(np.int64), packed.document_starts(i)
        assert starts[0] == 0 and (np.diff(starts) > 0).all() and starts[-1] < len(row)
        for piece in np.split(row, starts[1:]):
            assert piece[0] == tok.cls_id and piece[-1] == tok.sep_id
            assert (piece[1:-1] != tok.cls_id).all()  # one document per piece: no [CLS] inside
            pieces.append(tuple(piece.tolist()))
    assert sorted(pieces) == sorted(tuple(doc[i].astype(np.int64).tolist()) for i in range(len(doc)))
    stats = manifest["stats"]
    assert stats["packed_documents"] == len(doc) and stats["sequences"] == len(packed) < len(doc)
    efficiency = int(packed.lengths().sum()) / (len(packed) * MAX_LEN)
    assert stats["packing_efficiency"] == round(efficiency, 4)
    assert efficiency > 0.98 and doc_manifest["stats"]["packing_efficiency"] < efficiency - 0.03


@pytest.mark.parametrize("fmt", ["full-sentences", "single-segment"])
def test_a_share_of_short_sequences_in_a_contiguous_format(
    tmp_path: Path, built: dict, reference_stream: tuple, tokenizer_dir: Path, text_file: Path, fmt: str
) -> None:
    """--short-seq-prob P on a contiguous format (short_seq_share): each sequence aims at a random length in
    [2, the whole] with chance P, every token still placed once and in order. Unset, the format draws no lengths
    (the corpus, and the build key, it always had); packed-documents and the pair formats refuse it."""
    from bertkit.corpus.build import build_key
    from bertkit.errors import BertkitError

    default = BuildOptions(format=fmt)
    assert default.short_seq_share == 0.0 and default.short_seq_prob == 0.1  # as the options were before it
    tokenizer = load_tokenizer(tokenizer_dir)
    assert build_key([text_file], tokenizer, default) != build_key([text_file], tokenizer,
                                                                   BuildOptions(format=fmt, short_seq_share=0.5))
    probability = 0.5
    manifest = build_corpus([text_file], tokenizer_dir, tmp_path / "mixed",
                            BuildOptions(format=fmt, max_seq_len=MAX_LEN, short_seq_share=probability))  # fmt: skip
    mixed, whole = Corpus(tmp_path / "mixed"), built[fmt][0]
    special = np.fromiter(load_tokenizer(tokenizer_dir).special_ids, np.int64)
    docs, input_tokens = reference_stream
    np.testing.assert_array_equal(content(mixed, special), np.concatenate(docs))
    assert manifest["stats"]["input_tokens"] == input_tokens and mixed.lengths().max() <= MAX_LEN
    # A sequence aimed at a target uniform in [2, whole]: the share below half the length rises by about P / 2 over
    # the whole-length corpus (whose short sequences are document ends).
    half = MAX_LEN // 2
    rise = (mixed.lengths() < half).mean() - (whole.lengths() < half).mean()
    assert 0.6 * probability / 2 < rise < 1.4 * probability / 2, rise
    with pytest.raises(BertkitError, match="packed-documents already places short pieces"):
        BuildOptions(format="packed-documents", short_seq_share=0.2).validate()
    with pytest.raises(BertkitError, match="segment-pair takes short_seq_prob"):
        BuildOptions(format="segment-pair", short_seq_share=0.2).validate()
    # The command line's one option sets either, by format.
    from cli_helpers import run_error, run_json

    built_by_cli = run_json("build-corpus", "-i", str(text_file), "-t", str(tokenizer_dir), "-o",
                            str(tmp_path / "cli"), "--format", fmt, "--max-seq-len", str(MAX_LEN), "--short-seq-prob",
                            str(probability))  # fmt: skip
    assert built_by_cli["options"]["short_seq_share"] == probability
    assert built_by_cli["build_key"] == manifest["build_key"]
    line = run_error("build-corpus", "-i", str(text_file), "-t", str(tokenizer_dir), "-o", str(tmp_path / "packed"),
                     "--format", "packed-documents", "--short-seq-prob", "0.2")  # fmt: skip
    assert "packed-documents already places short pieces" in line
