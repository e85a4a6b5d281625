"""Process-group helpers shared by the engines: who am I, is this rank 0, agree on a decision.

Launchers (torchrun, the deepspeed launcher) describe the job through RANK / WORLD_SIZE / LOCAL_RANK /
MASTER_ADDR / MASTER_PORT. A distributed backend started without a launcher runs as a group of one,
so `--engine ddp` also works in a plain process (useful to resume a multi-process run on one machine).
"""

from __future__ import annotations

import os
import re
import socket
from datetime import timedelta
from typing import Any

import torch


def env_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def env_world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def rank() -> int:
    return torch.distributed.get_rank() if is_initialized() else env_rank()


def world_size() -> int:
    return torch.distributed.get_world_size() if is_initialized() else env_world_size()


def is_main() -> bool:
    """Only rank 0 prints and writes run files."""
    return rank() == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_process_group(device: torch.device, timeout: float | None = None) -> None:
    """Join the launcher's process group (gloo on CPU, NCCL on CUDA); a group of one without a launcher.
    `timeout` (seconds, engine.timeout) bounds every collective: a rank whose peer died or hangs stops
    after it instead of waiting for torch's default of 30 minutes."""
    if is_initialized():
        return
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(
            {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
            | ({} if "MASTER_PORT" in os.environ else {"MASTER_PORT": str(free_port())})
        )
    backend = "nccl" if device.type == "cuda" else "gloo"
    torch.distributed.init_process_group(
        backend=backend,
        device_id=device if device.type == "cuda" else None,
        timeout=timedelta(seconds=timeout) if timeout else None,
    )


def destroy_process_group() -> None:
    """Leave the process group at the end of a run, every rank together: a rank that tears its group down while
    another still works (rank 0 writing the model and the summary) can abort at exit under gloo and DeepSpeed."""
    if is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def broadcast_object(value: Any, src: int = 0) -> Any:
    """Rank `src`'s value on every rank (identity without a process group)."""
    if not is_initialized():
        return value
    box = [value]
    torch.distributed.broadcast_object_list(box, src=src)
    return box[0]


def gather_objects(value: Any) -> list[Any]:
    """Every rank's value, in rank order, on every rank."""
    if not is_initialized():
        return [value]
    out: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, value)
    return out


def any_rank(flag: bool) -> bool:
    """True on every rank if it is true on any: ranks must stop (signal, budget) at the same step."""
    if not is_initialized():
        return flag
    tensor = torch.tensor([1.0 if flag else 0.0], device=_collective_device())
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
    return bool(tensor.item())


def all_reduce_max(value: float) -> float:
    """The largest `value` over all ranks (itself without a process group): a figure every rank must agree on."""
    if not is_initialized():
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=_collective_device())
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
    return float(tensor.item())


def _collective_device() -> torch.device:
    # NCCL reduces only CUDA tensors; gloo only CPU ones.
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum over ranks (a copy; identity without a process group)."""
    if not is_initialized():
        return tensor
    out = tensor.detach().clone().to(_collective_device())
    torch.distributed.all_reduce(out)
    return out.to(tensor.device)


# What gloo, NCCL and the rendezvous store say when a peer is gone (its process died, its node rebooted, the
# network failed) or stopped answering for engine.timeout seconds.
_PEER_FAILURES = ("connection closed", "connection reset", "timed out", "timeout", "failed to recv", "broken pipe")


def peer_failure(err: BaseException) -> str | None:
    """One line for an error that says another rank of the job is gone, or None for any other error."""
    if not isinstance(err, RuntimeError) or not torch.distributed.is_available():
        return None
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    several = is_initialized() and torch.distributed.get_world_size() > 1
    if not isinstance(err, torch.distributed.DistError) and not (
        several and any(s in text.lower() for s in _PEER_FAILURES)
    ):
        return None
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", text)  # gloo's "[.../pair.cc:553] " source location
    return (
        f"rank {rank()} lost contact with the rest of the job ({text.rstrip('.')}): another rank died, or did not "
        "answer within engine.timeout; that rank's own log says why"
    )


def barrier() -> None:
    if is_initialized():
        torch.distributed.barrier()
