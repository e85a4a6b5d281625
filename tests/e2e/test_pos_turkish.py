"""Part-of-speech tagging on real data: Google's Turkish Web and Wiki treebanks (PyPI turkish-treebanks 1.0.0,
Apache-2.0: data/web.conllu and data/wiki.conllu, CoNLL-U with UD v1 tags), read through bertkit's CoNLL-U
reader, and the real MiniLM (all-MiniLM-L6-v2, English uncased WordPiece) fine-tuned on the Web treebank.

What the files hold (checked below): 2,541 and 2,310 sentences, each with `# sent_id` and `# text` comments.
They have no multi-word range lines (`1-2`) and no empty nodes (`5.1`): this treebank splits a word into its
inflectional groups instead (`Açık` `la` `nma` `yan`, all but the last marked SpaceAfter=No), each a token
line with its own tag. The reader's handling of range and empty-node lines is tested on a hand-written snippet
in tests/unit/test_token_classification.py. Tags are UD v1 (CONJ, not v2's CCONJ) plus this treebank's
PRT, ONOM and AFFIX, all read as plain tags."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from cli_helpers import run_json, runner
from test_ner_predict import _sentences, _write_conll

from bertkit.cli.app import app
from bertkit.tasks.token_classification import read_token_file, resolve_tags

SENTENCES = {"web.conllu": 2541, "wiki.conllu": 2310}  # as ../shared/DATA.md lists them
_WORD_ID = re.compile(r"[1-9][0-9]*")  # a word's ID; a range is 1-2, an empty node 5.1


def _word_columns(block: list[str]) -> list[list[str]]:
    """The ten columns of each word line: not a comment, not a multi-word range, not an empty node."""
    rows = [line.split("\t") for line in block if not line.startswith("#")]
    return [row for row in rows if _WORD_ID.fullmatch(row[0])]


@pytest.mark.parametrize("name", list(SENTENCES))
def test_treebank_reads_as_documented(turkish_treebanks_dir: Path, name: str) -> None:
    path = turkish_treebanks_dir / name
    data = read_token_file(path)
    blocks = _sentences(path)
    assert len(data) == data.rows_read == len(blocks) == SENTENCES[name]
    # Comments open every sentence and none of them becomes a word; every sentence has words.
    for block in blocks:
        assert block[0].startswith("# sent_id = ") and block[1].startswith("# text = ")
    words = [_word_columns(b) for b in blocks]
    assert all(words)
    # Token counts, forms and UPOS tags equal the independent parse: one per word line, ranges and empty
    # nodes left out (the files have none of either: counted, so that a changed file shows here).
    rows = [line.split("\t") for b in blocks for line in b if not line.startswith("#")]
    assert all(len(row) == 10 for row in rows)
    assert sum("-" in row[0] or "." in row[0] for row in rows) == 0
    assert [len(w) for w in data.words] == [len(w) for w in words]
    assert data.words == [[row[1] for row in w] for w in words]
    assert data.tags == [[row[3] for row in w] for w in words]
    # No word lost, added or altered: the forms, joined as MISC's SpaceAfter=No says, are each sentence's
    # `# text` (this keeps the one literal `_` form, web.conllu's "_ Makyaj sevmiyorum ben.", as a word).
    for block, forms, columns in zip(blocks, data.words, words, strict=True):
        glue = ["" if "SpaceAfter=No" in row[9].split("|") else " " for row in columns]
        assert "".join(f + g for f, g in zip(forms, glue, strict=True)).strip() == block[1].removeprefix("# text = ")
    # UD v1 tags are plain tags: the scheme detected is none, and the tags stay as written.
    assert resolve_tags(data, "auto") == data.tags and data.scheme == "none"
    tags = set(data.tag_counts())
    assert {"NOUN", "VERB", "ADJ", "PUNCT", "CONJ", "PRT"} <= tags and "CCONJ" not in tags


@pytest.mark.slow
def test_turkish_pos_beats_the_majority_tag(
    tmp_path: Path, minilm_dir: Path, turkish_treebanks_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real MiniLM fine-tuned on the first 800 sentences of the Turkish Web treebank (one epoch, 50 steps:
    a few minutes on 2 CPU cores), evaluated on its last 200 (held out): word accuracy far above tagging every
    word with the training set's most frequent tag."""
    blocks = _sentences(turkish_treebanks_dir / "web.conllu")
    train_blocks, dev_blocks = blocks[:800], blocks[-200:]
    train = _write_conll(tmp_path / "train.conllu", train_blocks)
    dev = _write_conll(tmp_path / "dev.conllu", dev_blocks)
    started = time.perf_counter()
    out = run_json(
        "finetune", "-m", str(minilm_dir), "--train", str(train), "--eval", str(dev), "-o", str(tmp_path / "run"),
        "--task", "token-classification", "--set", "train.epochs=1", "--set", "train.batch_size=16",
        "--set", "task.max_seq_len=96", "--set", "optim.lr=3e-4", "--set", "schedule.warmup_steps=5",
    )  # fmt: skip
    seconds = time.perf_counter() - started
    assert out["tag_scheme"] == "none" and out["best"]["metric"] == "accuracy"
    assert out["rows_read"] == 800 and out["eval_examples"] == 200
    assert out["truncated"] == 0  # 96 positions hold every Web sentence's sub-words, so every word is scored
    train_tags = Counter(row[3] for b in train_blocks for row in _word_columns(b))
    assert out["labels"] == sorted(train_tags)
    gold = [[row[3] for row in _word_columns(b)] for b in dev_blocks]
    majority_tag = train_tags.most_common(1)[0][0]
    flat = [tag for tags in gold for tag in tags]
    baseline = flat.count(majority_tag) / len(flat)
    accuracy = out["eval"]["accuracy"]
    with capsys.disabled():
        print(
            f"\nTurkish Web POS: accuracy {accuracy:.4f} on {len(flat)} held-out words vs majority tag "
            f"{majority_tag} {baseline:.4f}; fine-tuning {seconds:.0f} s ({out['steps']} steps)"
        )
    assert accuracy >= baseline + 0.2

    # `bertkit predict` on the held-out sentences as JSON lines of their words: one tag per word, and the same
    # tags the run's own evaluation scored (the same accuracy).
    tokens = tmp_path / "dev.jsonl"
    tokens.write_text("".join(json.dumps({"tokens": [row[1] for row in _word_columns(b)]}) + "\n" for b in dev_blocks))
    summary = run_json("predict", "-m", str(tmp_path / "run"), "-i", str(tokens), "-o", str(tmp_path / "p.jsonl"))
    assert summary["rows"] == 200
    records = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text("utf-8").splitlines()]
    assert [len(r["tags"]) for r in records] == [len(g) for g in gold]
    assert all(r["entities"] == [] and set(r["tags"]) <= set(out["labels"]) for r in records)
    right = sum(p == g for r, tags in zip(records, gold, strict=True) for p, g in zip(r["tags"], tags, strict=True))
    assert round(right / len(flat), 4) == accuracy

    # Plain text (a few sentences' `# text`, to stdout): one tag per whitespace-separated word. Such a word can
    # hold several of the treebank's inflectional groups, so these are tags per word, not per group.
    texts = [b[1].removeprefix("# text = ") for b in dev_blocks[:5]]
    (tmp_path / "dev.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["predict", "-m", str(tmp_path / "run"), "-i", str(tmp_path / "dev.txt"), "-q"])
    assert result.exit_code == 0, result.output
    tagged = [json.loads(line)["tags"] for line in result.stdout.splitlines()]
    assert [len(t) for t in tagged] == [len(text.split()) for text in texts]
    assert all(tag in out["labels"] for tags in tagged for tag in tags)
