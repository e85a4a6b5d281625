"""`bertkit predict` on a question-answering run: SQuAD JSON or JSON lines (question, context; answers
optional) in, one JSON line per question out, in input order: {"id", "answer", "start", "end", "score"}, with
start/end character offsets into the context (end exclusive; null with an empty answer, which only a model
trained on SQuAD v2.0 data predicts) and score the answer's start + end logit (the null score for none)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bertkit.config.schema import qa_context_room
from bertkit.errors import BertkitError
from bertkit.modelio.modeldir import window_length
from bertkit.pipelines.predict.common import InferenceModel, jsonl_sink
from bertkit.progress import Tracker
from bertkit.tasks.qa import best_answers, encode_qa, read_qa_file, window_logits

CHUNK = 256  # questions encoded, predicted and written at a time


def predict_qa(
    loaded: InferenceModel,
    input_path: Path,
    output: Path | None,
    batch_size: int,
    max_seq_len: int | None,
    quiet: bool,
) -> dict[str, Any]:
    """Answers of a question-answering model (PyTorch or its ONNX export: see `load_task_model`)."""
    cfg, tokenizer, model, target = loaded.cfg, loaded.tokenizer, loaded.model, loaded.device
    task = loaded.meta.get("task") or {}
    max_len = window_length(cfg, task, max_seq_len)
    if qa_context_room(max_len) < 1:
        raise BertkitError(f"--max-seq-len {max_len} leaves no room for a context beside the question; give more")
    # The stride the model was trained with; a --max-seq-len window too short for it derives its own.
    stride = task.get("doc_stride")
    if stride is not None and int(stride) >= qa_context_room(max_len):
        stride = None
    data = read_qa_file(input_path, need_answers=False)
    use_types = cfg.type_vocab_size > 1
    with_null = bool(task.get("version_2_with_negative"))
    started = time.perf_counter()
    to_stdout = output is None or str(output) == "-"
    with jsonl_sink(output) as sink, Tracker("predict", total=len(data), quiet=quiet, unit="questions") as tracker:
        for begin in range(0, len(data), CHUNK):
            examples = data.examples[begin : begin + CHUNK]
            features = encode_qa(examples, tokenizer, max_len, stride, use_types)
            logits = window_logits(model, features, target, tokenizer.pad_id, use_types, batch_size)
            answers = best_answers(
                examples, features, logits, int(task.get("n_best", 20)), int(task.get("max_answer_length", 30)),
                with_null, float(task.get("null_threshold", 0.0)),
            )  # fmt: skip
            for example, answer in zip(examples, answers, strict=True):
                record = {"id": example.id, "answer": answer.text, "start": answer.start, "end": answer.end,
                          "score": round(answer.score, 6)}  # fmt: skip
                sink.write(json.dumps(record, ensure_ascii=False) + "\n")
            sink.flush()
            tracker.advance(len(examples), info=f"{begin + len(examples)} questions")
    seconds = time.perf_counter() - started
    return {
        "output": "-" if to_stdout else str(output),
        "model": str(loaded.model_dir),
        "backend": loaded.backend,
        "task": "question-answering",
        "rows": len(data),
        "labels": [],
        "max_seq_len": max_len,
        "seconds": round(seconds, 2),
        "rows_per_s": round(len(data) / seconds, 1) if seconds > 0 else None,
    }
