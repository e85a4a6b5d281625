"""Token classification: one tag per word (NER, POS), from CoNLL, CoNLL-U or JSON lines of tokens and tags."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from bertkit.config.schema import ModelConfig, TaskConfig
from bertkit.config.task_kinds import SPECS
from bertkit.corpus.loader import split_indices
from bertkit.errors import BertkitError
from bertkit.models.pretraining import build_encoder
from bertkit.tasks.kinds.base import (
    DistillData,
    Evaluate,
    FineTuned,
    GateScore,
    Part,
    PredictRequest,
    Prepared,
    RowPredictor,
    RunModel,
    check_outputs,
    model_inputs,
    row_text,
    saved_task,
    shared_window,
    window,
)
from bertkit.tasks.probe import ProbeData
from bertkit.tasks.token_classification import (
    IGNORE,
    TokenBatches,
    TokenClassifier,
    TokenData,
    detect_scheme,
    encode_sentences,
    encode_words,
    evaluate_tagger,
    read_token_file,
    resolve_tags,
    split_words,
    tag_indices_check,
    tag_record,
    token_classification_objective,
    word_features,
    word_offsets,
)
from bertkit.tokenizers.base import Tokenizer


class TokenKind:
    name = "token-classification"
    architecture = SPECS[name].architecture
    predicts_from = "rows"

    # -- fine-tuning -------------------------------------------------------------------------------------------
    def check_data(self, task: TaskConfig, path: Path, what: str, metrics: tuple[str, ...]) -> None:
        data = read_token_file(path)
        if what == "train" and metrics[0] != "accuracy" and detect_scheme(data) == "none":
            raise BertkitError(
                f"its tags are plain (no entity scheme), which only have accuracy: set the task's metric: accuracy "
                f"(it is ranked by {metrics[0]})"
            )

    def prepare(self, task: TaskConfig, model_cfg: ModelConfig, tokenizer: Tokenizer, train_file: Path,
                eval_file: Path | None, seed: int) -> Prepared:  # fmt: skip
        split = _read(train_file, eval_file, task.tag_scheme, task.eval_fraction, seed)
        train_data, train_tags = split.data, split.tags
        scheme = train_data.scheme
        with_entities = scheme != "none"
        metric = task.metric or ("f1" if with_entities else "accuracy")
        if not with_entities and metric != "accuracy":
            raise BertkitError(
                f"task.metric {metric} needs entity tags, but {train_file} has plain tags (scheme none); "
                "use task.metric=accuracy"
            )
        names = sorted({tag for tags in train_tags for tag in tags})
        if len(names) < 2:
            raise BertkitError(f"{train_file}: every word has the tag {names[0]!r}; tagging needs at least two tags")
        train_part, train_part_tags, eval_data, eval_tags = split.train, split.train_tags, split.eval, split.eval_tags
        if eval_file is not None:
            tag_indices_check(eval_tags, names, eval_file)
        max_len = window(task, model_cfg)
        train_examples = encode_sentences(train_part.words, train_part_tags, names, tokenizer, max_len)
        eval_examples = None
        if len(eval_data):
            eval_examples = encode_sentences(eval_data.words, eval_tags, names, tokenizer, max_len)
        pad = tokenizer.pad_id

        def sources(model: nn.Module, micro: int, seed: int, device: torch.device) -> tuple[Any, Evaluate | None]:
            if task.mode == "feature":
                model.encoder.requires_grad_(False)
            source = TokenBatches(train_examples, micro, pad, seed)
            if eval_examples is None:
                return source, None
            return source, lambda m: evaluate_tagger(m, eval_examples, eval_tags, names, device, pad, with_entities)

        def probe(model: nn.Module, device: torch.device) -> ProbeData:
            """Every training word's features under the frozen encoder, and its tag, computed once."""
            features, tags = word_features(model, train_examples, device, pad)
            evaluate = None
            if eval_examples is not None:
                evaluate = lambda m: evaluate_tagger(m, eval_examples, eval_tags, names, device, pad, with_entities)  # noqa: E731
            return ProbeData(features, tags, "softmax", len(names), evaluate)

        summary: dict[str, Any] = {
            "tag_scheme": scheme,
            "labels": names,
            "rows_read": train_data.rows_read,
            "rows_skipped": 0,
            "label_counts": TokenData(train_file, train_part.words, train_part_tags).tag_counts(),
            "train_examples": len(train_part),
            "eval_examples": len(eval_data),
            "train_words": sum(len(w) for w in train_part.words),
            "truncated": train_examples.truncated + (eval_examples.truncated if eval_examples else 0),
            "mode": task.mode,
        }
        if eval_file is not None:
            summary["eval_rows_read"] = eval_data.rows_read
        return Prepared(
            labels=names,
            model_cfg=model_cfg,
            examples=len(train_part),
            metric=metric,
            build=lambda encoder: TokenClassifier(encoder, len(names), task.classifier_dropout),
            objective=token_classification_objective,
            sources=sources,
            task_meta={**task.model_dump(mode="json"), "tag_scheme": scheme, "metric": metric},
            summary=summary,
            probe=probe,
        )

    # -- distillation ------------------------------------------------------------------------------------------
    def task_model(self, encoder: nn.Module, labels: list[str], task: dict[str, Any]) -> nn.Module:
        """The fine-tuned tagger on `encoder` (dropout off): one row of tag logits per token."""
        return TokenClassifier(encoder, len(labels), 0.0)

    def gate_scorer(self, meta: dict[str, Any], model_cfg: ModelConfig, tokenizer: Tokenizer, eval_file: Path,
                    max_len: int) -> tuple[str, GateScore]:  # fmt: skip
        """Entity F1 (word accuracy for a scheme without entities) in points on `eval_file`, encoded once, now."""
        task, labels = saved_task(meta), list(meta.get("labels") or [])
        data = read_token_file(eval_file)
        tags = resolve_tags(data, task.tag_scheme)
        tag_indices_check(tags, labels, eval_file)
        encoded = encode_sentences(data.words, tags, labels, tokenizer, max_len)
        with_entities = task.tag_scheme != "none"
        metric = task.metric or ("f1" if with_entities else "accuracy")
        cpu, pad = torch.device("cpu"), tokenizer.pad_id
        return metric, lambda m, n: 100 * evaluate_tagger(m, encoded, tags, labels, cpu, pad, with_entities, n)[metric]

    def distill_data(self, teacher: FineTuned, task: TaskConfig, student_cfg: ModelConfig, train_file: Path,
                     eval_file: Path | None, seed: int) -> DistillData:  # fmt: skip
        """The teacher's tags and tag scheme, and the window its tags were trained at (a longer one would give the
        student positions the teacher never saw in training); each word's first sub-word is a target."""
        tags = teacher.outputs
        split = _read(train_file, eval_file, str(teacher.task.get("tag_scheme", "auto")), task.eval_fraction, seed)
        check_outputs(teacher, [t for sentence in split.tags for t in sentence], train_file, "tags")
        if eval_file is not None:
            check_outputs(teacher, [t for sentence in split.eval_tags for t in sentence], eval_file, "tags")
        train_data, train_tags, eval_data, eval_tags = split.train, split.train_tags, split.eval, split.eval_tags
        max_len = shared_window(teacher, student_cfg, int(teacher.task.get("max_seq_len", task.max_seq_len)))
        train = encode_sentences(train_data.words, train_tags, tags, teacher.tokenizer, max_len)
        evaluation = None
        if len(eval_data):
            evaluation = encode_sentences(eval_data.words, eval_tags, tags, teacher.tokenizer, max_len)
        pad = teacher.tokenizer.pad_id
        with_entities = train_data.scheme != "none"
        evaluate = None
        if evaluation is not None:
            evaluate = lambda m, device: evaluate_tagger(  # noqa: E731
                m, evaluation, eval_tags, tags, device, pad, with_entities
            )
        return DistillData(
            labels=tags,
            input_ids=train.input_ids,
            token_types=None,
            batches=lambda micro, seed: TokenBatches(train, micro, pad, seed),
            student=lambda: TokenClassifier(build_encoder(student_cfg), len(tags), task.classifier_dropout),
            evaluate=evaluate,
            train_count=len(train_data),
            eval_count=len(eval_data),
            meta={**teacher.task, "max_seq_len": max_len},
            summary={
                "label_counts": TokenData(train_file, train_data.words, train_tags).tag_counts(),
                "tag_scheme": train_data.scheme,
                "train_words": sum(len(w) for w in train_data.words),
            },
        )

    # -- one distribution over the tags per word (its first sub-word, where the tagger is trained
    # and read), so later sub-words, specials and padding are no target -----------------------------------------
    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(*model_inputs(batch))["logits"]

    def count(self, batch: dict[str, torch.Tensor]) -> float:
        return float((batch["labels"] != IGNORE).sum().item())

    def rows(self, student: torch.Tensor, teacher: torch.Tensor, batch: dict[str, torch.Tensor]) -> list[Part]:
        words = batch["labels"] != IGNORE
        teacher = teacher[:, : student.shape[1]]
        return [(student[words], teacher[words], batch["labels"][words], 1.0)]

    # -- prediction: a tag per word and the entities they spell, with character offsets ---------------------------
    def predictor(self, request: PredictRequest) -> RowPredictor:
        """Rows are raw text (split into words at spaces and punctuation) or, in JSON lines without --text-field,
        ready-made `tokens` lists."""
        task, source, field = request.meta.get("task") or {}, request.source, request.text_field
        labels: list[str] = list(request.meta.get("labels") or [])
        with_entities = task.get("tag_scheme") != "none"

        def records(rows: list[tuple[str, Any]], run: RunModel) -> list[dict[str, Any]]:
            texts, spans = [], []
            for where, row in rows:
                if not request.plain_text and isinstance(row, dict) and "tokens" in row and field is None:
                    text, word_spans = word_offsets(_tokens(row["tokens"], source, where))
                else:
                    text = row_text(source, where, row, None if request.plain_text else (field or "text"))
                    word_spans = split_words(text)[1]
                texts.append(text)
                spans.append(word_spans)
            examples = encode_words(texts, spans, request.tokenizer, request.max_len)
            logits = run(examples.input_ids, None)
            out = []
            for n, positions in enumerate(examples.positions):
                best = logits[n].argmax(-1)
                tags = [labels[int(best[p])] if p >= 0 else None for p in positions]
                out.append(tag_record(texts[n], spans[n], tags, with_entities))
            return out

        return RowPredictor([field] if field else [], records)


class _Split(NamedTuple):
    data: TokenData  # the training file as read
    tags: list[list[str]]  # its tags, in BIO
    train: TokenData  # the sentences that train, and their tags
    train_tags: list[list[str]]
    eval: TokenData  # the evaluation sentences, and their tags
    eval_tags: list[list[str]]


def _read(train_file: Path, eval_file: Path | None, scheme: str, eval_fraction: float, seed: int) -> _Split:
    """The training file with its tags in BIO (`scheme`, or detected with auto), and the evaluation sentences:
    --eval's, read in the training file's scheme, or a held-out share of --train's (split by `seed`)."""
    train_data = read_token_file(train_file)
    train_tags = resolve_tags(train_data, scheme)
    if eval_file is not None:
        eval_data = read_token_file(eval_file)
        eval_tags = resolve_tags(eval_data, train_data.scheme)
        return _Split(train_data, train_tags, train_data, train_tags, eval_data, eval_tags)
    train_idx, eval_idx = split_indices(len(train_data), eval_fraction, seed)
    return _Split(
        train_data, train_tags,
        train_data.subset(train_idx), [train_tags[i] for i in train_idx],
        train_data.subset(eval_idx), [train_tags[i] for i in eval_idx],
    )  # fmt: skip


def _tokens(tokens: Any, source: Path, where: str) -> list[str]:
    if not isinstance(tokens, list) or not all(
        isinstance(t, str) and t and not any(c.isspace() for c in t) for t in tokens
    ):
        raise BertkitError(f"{source} {where}: 'tokens' must be a list of non-empty strings without spaces")
    return tokens
