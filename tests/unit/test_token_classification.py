"""Token classification pieces without training: reading CoNLL / CoNLL-U / JSON lines, tag schemes, entity
metrics (against a hand-computed example and against seqeval), sub-word alignment, entity offsets."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bertkit.errors import BertkitError
from bertkit.pipelines.predict import tag_record
from bertkit.tasks.token_classification import (
    IGNORE,
    TokenClassificationObjective,
    encode_sentences,
    entities,
    read_token_file,
    resolve_tags,
    split_words,
    tagging_scores,
)

# A hand-written CoNLL snippet: a -DOCSTART- line, space- and tab-separated columns (CoNLL-2003's four
# columns: the tag is the last), a whitespace-only separator line and no blank line at the end.
SNIPPET = "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n \nPeter\tB-PER\nBlackburn\tI-PER\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_conll_snippet(tmp_path: Path) -> None:
    data = read_token_file(_write(tmp_path, "s.conll", SNIPPET))
    assert data.words == [["EU", "rejects"], ["Peter", "Blackburn"]]
    assert data.tags == [["B-ORG", "O"], ["B-PER", "I-PER"]]
    assert data.lines == [[3, 4], [6, 7]]
    assert resolve_tags(data, "auto") == data.tags and data.scheme == "bio"


def test_conllu_reads_form_and_upos(tmp_path: Path) -> None:
    text = (
        "# sent_id = 1\n# text = Geldim.\n"
        "1-2\tGeldim\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "1\tGeldi\tgel\tVERB\t_\t_\t0\troot\t_\t_\n"
        "2\tm\t_\tAUX\t_\t_\t1\taux\t_\t_\n"
        "2.1\tx\t_\tX\t_\t_\t_\t_\t_\t_\n"
        "3\t.\t.\tPUNCT\t_\t_\t1\tpunct\t_\t_\n\n"
    )
    data = read_token_file(_write(tmp_path, "t.conllu", text))
    assert data.words == [["Geldi", "m", "."]] and data.tags == [["VERB", "AUX", "PUNCT"]]
    assert resolve_tags(data, "auto") == data.tags and data.scheme == "none"


def test_lines_break_only_at_newlines(tmp_path: Path) -> None:
    """U+0085 (cp1252's ellipsis decoded as Latin-1), U+2028 and form feeds occur inside words of web text and
    inside JSON strings written with ensure_ascii=False: they are part of the line, not line breaks. Also kept:
    a form with a space (UD v2 allows them), the literal `_` form, UD v1's CONJ, CRLF line ends."""
    text = (
        "# text = Tamam\x85 New York _ ve\u2028x\n"
        "1\tTamam\x85\t_\tADJ\t_\t_\t0\troot\t_\t_\n"
        "2\tNew York\t_\tNOUN\t_\t_\t1\tnn\t_\t_\n"
        "3\t_\t_\tX\t_\t_\t1\tp\t_\t_\n"
        "4\tve\u2028x\u000c\t_\tCONJ\t_\t_\t1\tcc\t_\t_\n\n"
        "1\t.\t.\tPUNCT\t_\t_\t0\troot\t_\t_\n"
    )
    path = tmp_path / "t.conllu"
    path.write_bytes(text.replace("\n", "\r\n").encode("utf-8"))
    data = read_token_file(path)
    assert data.words == [["Tamam\x85", "New York", "_", "ve\u2028x\u000c"], ["."]]
    assert data.tags == [["ADJ", "NOUN", "X", "CONJ"], ["PUNCT"]] and data.lines == [[2, 3, 4, 5], [7]]
    # JSON lines tokens hold no whitespace, but other fields (the raw text) may.
    rows = [{"tokens": ["a", "b"], "tags": ["X", "Y"], "text": "a\u2028b"}, {"tokens": ["d"], "tags": ["X"]}]
    jsonl = _write(tmp_path, "t.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    assert read_token_file(jsonl).words == [["a", "b"], ["d"]]
    tweets = _write(tmp_path, "t.txt", "yes\u2028no\tO\nParis\tB-LOC\n\nok\u0085ay\tO\n")
    data = read_token_file(tweets)
    assert data.words == [["yes\u2028no", "Paris"], ["ok\u0085ay"]] and data.lines == [[1, 2], [4]]


def test_jsonl_and_its_errors(tmp_path: Path) -> None:
    rows = [
        {"tokens": ["Paris", "is", "big"], "tags": ["S-LOC", "O", "O"]},
        {"tokens": ["New", "York"], "tags": ["B-LOC", "E-LOC"]},
    ]
    data = read_token_file(_write(tmp_path, "a.jsonl", "\n".join(json.dumps(r) for r in rows)))
    assert resolve_tags(data, "auto") == [["B-LOC", "O", "O"], ["B-LOC", "I-LOC"]] and data.scheme == "iobes"
    bad = _write(tmp_path, "b.jsonl", json.dumps({"tokens": ["a", "b"], "tags": ["O"]}))
    with pytest.raises(BertkitError, match=r"b.jsonl line 1: 2 tokens but 1 tags"):
        read_token_file(bad)
    ints = _write(tmp_path, "c.jsonl", json.dumps({"tokens": ["a"], "tags": [3]}))
    with pytest.raises(BertkitError, match="tag names"):
        read_token_file(ints)


def test_iob1_converts_to_bio(tmp_path: Path) -> None:
    text = "Peter I-PER\nBlackburn I-PER\nJohn B-PER\nsaw O\nBonn I-LOC\n"
    data = read_token_file(_write(tmp_path, "i.txt", text))
    assert resolve_tags(data, "auto") == [["B-PER", "I-PER", "B-PER", "O", "B-LOC"]] and data.scheme == "iob1"


@pytest.mark.parametrize(
    ("text", "scheme", "needles"),
    [
        ("a O\nb I-PER\n", "iobes", ["line 2", "'I-PER'", "follows 'O'", "task.tag_scheme"]),
        ("a B-PER\nb O\n", "iobes", ["line 1", "'B-PER'", "followed by 'O'", "S-"]),
        ("a B-PER\nb E-LOC\n", "iobes", ["line 1", "followed by 'E-LOC'"]),
        ("a O\nb PER\n", "bio", ["line 2", "'PER'", "not valid BIO", "task.tag_scheme=none"]),
        ("a O\nb S-PER\n", "bio", ["line 2", "tag_scheme=iobes"]),
        ("a B-PER\nb NOUN\n", "auto", ["line 2", "'NOUN'", "task.tag_scheme=none"]),
    ],
)  # fmt: skip
def test_invalid_tags_name_file_line_and_fix(tmp_path: Path, text: str, scheme: str, needles: list[str]) -> None:
    path = _write(tmp_path, "bad.txt", text)
    with pytest.raises(BertkitError) as err:
        resolve_tags(read_token_file(path), scheme)
    message = str(err.value)
    assert "\n" not in message
    for needle in [str(path), *needles]:
        assert needle in message


def test_conll_line_without_tag(tmp_path: Path) -> None:
    with pytest.raises(BertkitError, match=r"x.txt line 2: 'lonely' has a token but no tag"):
        read_token_file(_write(tmp_path, "x.txt", "a O\nlonely\n"))


def test_entity_metrics_by_hand() -> None:
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-PER"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["I-ORG", "O", "B-PER"]]
    # Gold: PER(0,0-2) LOC(0,3) ORG(1,0) PER(1,2). Predicted: PER(0,0-2) ORG(0,3) ORG(1,0: an I- after the
    # sentence start begins one) PER(1,2). 3 of 4 predicted are right, 3 of 4 gold are found.
    assert entities(pred[1]) == [("ORG", 0, 1), ("PER", 2, 3)]
    scores = tagging_scores(gold, pred, True)
    assert scores["precision"] == 0.75 and scores["recall"] == 0.75 and scores["f1"] == 0.75
    assert scores["accuracy"] == round(5 / 7, 4)  # B-LOC/B-ORG and B-ORG/I-ORG differ
    # All-O predictions: no entity found, F1 0 (the baseline the NER test beats).
    assert tagging_scores(gold, [["O"] * len(g) for g in gold], True)["f1"] == 0.0
    # Span boundaries must match exactly: a partial span counts as wrong.
    assert tagging_scores([["B-PER", "I-PER"]], [["B-PER", "O"]], True)["f1"] == 0.0
    # Type changes inside I- runs split the entity, as in seqeval.
    assert entities(["B-PER", "I-LOC", "I-LOC", "O", "I-PER"]) == [("PER", 0, 1), ("LOC", 1, 3), ("PER", 4, 5)]


def test_entity_metrics_match_seqeval() -> None:
    seqeval = pytest.importorskip("seqeval.metrics")
    rng = random.Random(0)
    tags = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-geo-loc", "I-geo-loc"]
    for _ in range(30):
        gold = [[rng.choice(tags) for _ in range(rng.randint(1, 12))] for _ in range(rng.randint(1, 8))]
        pred = [[rng.choice(tags) if rng.random() < 0.5 else g for g in sentence] for sentence in gold]
        ours = tagging_scores(gold, pred, True)
        assert ours["f1"] == pytest.approx(seqeval.f1_score(gold, pred), abs=1e-4)
        assert ours["precision"] == pytest.approx(seqeval.precision_score(gold, pred), abs=1e-4)
        assert ours["recall"] == pytest.approx(seqeval.recall_score(gold, pred), abs=1e-4)
        assert ours["accuracy"] == pytest.approx(seqeval.accuracy_score(gold, pred), abs=1e-4)


def test_labels_on_first_subword_only(tokenizer_dir: Path) -> None:
    from bertkit.tokenizers.base import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    words = [["Zyxwvut", "imports", "a", "module"]]
    examples = encode_sentences(words, [["B-X", "O", "O", "O"]], ["B-X", "O"], tokenizer, 64)
    ids, labels, positions = examples.input_ids[0], examples.labels[0], examples.positions[0]
    assert len(ids) > 6  # the made-up word splits into several sub-words
    assert list(positions) == sorted(positions) and positions[0] == 1
    assert [int(labels[p]) for p in positions] == [0, 1, 1, 1]
    assert int((labels != IGNORE).sum()) == 4  # later sub-words, [CLS], [SEP] are no targets
    import torch

    batch = {"labels": torch.from_numpy(labels[None])}
    assert TokenClassificationObjective().count(batch) == 4.0
    # Truncation: words past the limit have no position (predicted as O, never dropped silently).
    short = encode_sentences(words, None, ["B-X", "O"], tokenizer, 4)
    assert short.positions[0][0] == 1 and short.positions[0][-1] == -1 and short.truncated == 1


def test_entity_offsets_slice_the_original_text() -> None:
    text = "  Angela\tMerkel visited  New York  ,\u00a0ok "
    words, spans = split_words(text)
    assert words == ["Angela", "Merkel", "visited", "New", "York", ",", "ok"]
    record = tag_record(text, spans, ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", None, "I-MISC"])
    assert record["tags"][5] == "O"
    assert [(e["type"], e["text"]) for e in record["entities"]] == [
        ("PER", "Angela\tMerkel"), ("LOC", "New York"), ("MISC", "ok")
    ]  # fmt: skip
    for entity in record["entities"]:
        assert text[entity["start"] : entity["end"]] == entity["text"]
