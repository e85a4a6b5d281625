"""Token classification pieces: reading CoNLL / CoNLL-U / JSON lines, tag schemes, entity metrics (against a
hand-computed example and against seqeval), sub-word alignment, entity offsets, and a few fine-tuning steps
on a tiny model that must equal a plain transformers BertForTokenClassification loop's steps."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bertkit.errors import BertkitError
from bertkit.tasks.token_classification import (
    IGNORE,
    TokenClassificationObjective,
    encode_sentences,
    entities,
    read_token_file,
    resolve_tags,
    split_words,
    tag_record,
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


# Tweet-like sentences for the training-step parity below: user names, a URL, a hashtag, an emoji, words the
# tiny vocabulary splits into several sub-words, punctuation runs, casing the uncased tokenizer folds away.
TWEETS = [
    "@paulwalk/O It's/O the/O Empire/B-fac State/I-fac Building/I-fac !!/O",
    "RT/O @Zyxwvut/O :/O Barack/B-per Obama/I-per in/O PARIS/B-loc \U0001f600/O",
    "http://t.co/x1Y2z/O #python/B-oth imports/O a/O module/O",
    "New/B-loc York/I-loc Knicks/O lose/O again/O .../O",
    "Qwertyuiop/B-per meets/O angela/B-per merkel/I-per",
]


def _tweets() -> list[tuple[list[str], list[str]]]:
    pairs = [[item.rsplit("/", 1) for item in tweet.split()] for tweet in TWEETS]
    return [([word for word, _ in tweet], [tag for _, tag in tweet]) for tweet in pairs]


@pytest.mark.usefixtures("one_thread")
def test_training_steps_match_transformers_token_classification(tmp_path: Path, tokenizer_dir: Path) -> None:
    """`bertkit finetune --task token-classification` takes exactly the optimizer steps of a plain transformers
    BertForTokenClassification loop, as the transformers token-classification example builds it (the tag on
    each word's first sub-word from the fast tokenizer's word_ids, -100 elsewhere; mean cross-entropy over the
    labelled sub-words; AdamW; linear warm-up and decay; clipping at 1.0), from the same weights, on the same
    full batch, dropout off: the same losses step by step and the same weights after. Sub-word alignment, the
    label map, the ignore index, the loss normalisation and the schedule all show up in these numbers."""
    transformers = pytest.importorskip("transformers")
    import shutil

    import torch
    from cli_helpers import run_json
    from safetensors.torch import load_file

    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.bert import BertEncoder
    from bertkit.tasks.token_classification import TokenClassifier

    model_dir = tmp_path / "hf"
    shutil.copytree(tokenizer_dir, model_dir)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    config = transformers.BertConfig(
        vocab_size=len(hf_tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
        max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(model_dir)
    train = tmp_path / "train.txt"
    tweets = _tweets()
    train.write_text("\n\n".join("\n".join(f"{w}\t{t}" for w, t in zip(*s, strict=True)) for s in tweets), "utf-8")
    # No warm-up: transformers' schedule spends its first step at lr 0 (bertkit's at peak / warmup_steps), so
    # with warm-up the two would take the same steps one step apart.
    steps, lr, seed = 4, 3e-3, 0
    out = run_json(
        "finetune", "-m", str(model_dir), "--train", str(train), "-o", str(tmp_path / "run"),
        "--task", "token-classification", "--set", f"train.steps={steps}", "--set", f"train.batch_size={len(tweets)}",
        "--set", "train.log_every=1", "--set", f"train.seed={seed}", "--set", "task.eval_fraction=0",
        "--set", "task.classifier_dropout=0", "--set", "task.max_seq_len=64", "--set", f"optim.lr={lr}",
        "--set", "schedule.warmup_steps=0",
    )  # fmt: skip
    names = out["labels"]
    assert names == sorted({tag for _, tags in tweets for tag in tags})
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    ours = [row["loss"] for row in logged if "loss" in row]

    # The reference starts from the same weights: the encoder from the directory, the head bertkit drew.
    _, _, cfg, _, _ = load_model_dir(model_dir)
    torch.manual_seed(seed)
    head = TokenClassifier(BertEncoder(cfg), len(names), 0.0).classifier
    model = transformers.BertForTokenClassification.from_pretrained(model_dir, num_labels=len(names))
    model.classifier.load_state_dict(head.state_dict())
    enc = hf_tokenizer(
        [words for words, _ in tweets], is_split_into_words=True, truncation=True, max_length=64, padding=True,
        return_tensors="pt",
    )  # fmt: skip
    labels = torch.full_like(enc["input_ids"], -100)
    for row, (_, tags) in enumerate(tweets):
        seen = set()
        for position, word in enumerate(enc.word_ids(row)):
            if word is not None and word not in seen:
                seen.add(word)
                labels[row, position] = names.index(tags[word])
    assert len(enc["input_ids"][0]) > max(len(words) for words, _ in tweets) + 2  # some words split
    params = list(model.named_parameters())
    optimizer = torch.optim.AdamW(
        [{"params": [p for _, p in params if p.ndim >= 2], "weight_decay": 0.01},
         {"params": [p for _, p in params if p.ndim < 2], "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.999), eps=1e-6,
    )  # fmt: skip
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, 0, steps)
    theirs = []
    for _ in range(steps):
        loss = model(**enc, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        theirs.append(loss.item())
    assert ours == pytest.approx(theirs, abs=1e-4)
    assert theirs[-1] < theirs[0] - 0.1  # it learned something, so the comparison is not vacuous
    weights = load_file(str(tmp_path / "run" / "model" / "model.safetensors"))
    assert torch.allclose(weights["classifier.weight"], model.classifier.weight, atol=1e-5)
    assert torch.allclose(
        weights["encoder.embeddings.word_embeddings.weight"], model.bert.embeddings.word_embeddings.weight, atol=1e-5
    )
