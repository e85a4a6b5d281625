"""GPU hours for a token budget, from the GPU check's records (`make gpu-check` writes them under results/).

    python tests/bench/gpu_hours.py --tokens 20e9 --gpus 8 [--seq 128] [--results DIR]

For each recipe with a record at that sequence length: hours = tokens / (the record's best bertkit tokens/s, eager
or compiled, x GPUs) / 3600, each row labelled by the record it comes from (GPU, date, file). Several GPUs are
assumed to scale linearly (data parallel, each GPU at the record's rate): a lower bound on the hours, since the
gradient all-reduce costs a few percent. A dry-run record is never used.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from records import RESULTS, load_records  # noqa: E402
from results_pages import GPU_RECIPES, newest  # noqa: E402


def hours_table(tokens: float, gpus: int, seq: int, folder: Path = RESULTS) -> list[dict]:
    latest = newest(load_records(folder))
    rows = []
    for recipe in GPU_RECIPES:
        record = latest.get(f"gpu-check-pretrain-{recipe}-{seq}")
        if record is None:
            continue
        f = record["figures"]
        rate = max(f[key]["value"] for key in ("eager_tokens_per_s", "compiled_tokens_per_s") if key in f)
        hours = tokens / (rate * gpus) / 3600
        rows.append({"recipe": recipe, "tokens_per_s_per_gpu": rate, "hours": hours, "gpu": record["machine"]["gpu"],
                     "date": record["date"][:10], "record": record["path"]})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=float, required=True, help="the token budget, e.g. 20e9")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs of the record's kind, assumed to scale linearly")
    parser.add_argument("--seq", type=int, default=128, choices=(128, 1024), help="sequence length of the record")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the records' folder")
    args = parser.parse_args(argv)
    if args.tokens <= 0 or args.gpus < 1:
        print("error: --tokens must be above 0 and --gpus at least 1", file=sys.stderr)
        return 2
    rows = hours_table(args.tokens, args.gpus, args.seq, args.results)
    if not rows:
        print(f"error: no GPU record at {args.seq} tokens in {args.results}; run `make gpu-check` on a GPU machine",
              file=sys.stderr)  # fmt: skip
        return 2
    print(f"{args.tokens:.3g} tokens on {args.gpus} GPU(s), {args.seq}-token sequences (linear scaling assumed):")
    for row in rows:
        print(f"  {row['recipe']:16} {row['hours']:10,.1f} h  at {row['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU"
              f"  ({row['gpu']}, {row['date']}, {row['record']})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
