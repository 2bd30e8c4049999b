"""examples/context_parallel.py: one sequence's context split across ranks, merged; against the unsplit call."""
import os
import socket
import sys

import pytest

import pagedattn

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import context_parallel as cp  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_shards_in_turn_merge_to_the_unsplit_call():
    args = cp.parse(["--world-size", "1", "--shards", "3", "--context", "5000", "--tokens", "3"])
    assert cp.run(0, 1, args) <= args.tol


def test_shards_in_turn_with_a_sliding_window():
    """A window that ends inside the second of four shards: the first shard sees no key (its rows merge
    as out 0, lse -inf), the second part of its keys; new_token_positions places the new tokens."""
    args = cp.parse(["--world-size", "1", "--shards", "4", "--context", "4096", "--tokens", "4", "--window", "2500"])
    assert cp.run(0, 1, args) <= args.tol


def test_two_processes_over_gloo():
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("this torch has no gloo backend")
    argv = ["--world-size", "2", "--context", "4096", "--tokens", "4", "--port", str(_free_port())]
    assert cp.main(argv) == 0  # a rank whose merged output is off raises (and spawn re-raises it)


def test_shards_in_turn_on_one_gpu():
    if not (pagedattn.cuda_available() and torch.cuda.is_available()):
        pytest.skip("no CUDA device visible to pagedattn and PyTorch")
    args = cp.parse(["--device", "cuda", "--world-size", "1", "--shards", "3", "--context", "5000"])
    assert cp.run(0, 1, args) <= args.tol


def test_shards_in_turn_on_one_gpu_with_a_sliding_window():
    """On the cuda backend, 4 shards of 2048 keys before 8 new tokens at 8192 with a window of 4100: no
    token reaches the first shard (no item), the first three reach the last keys of the second (the
    others see none of its keys inside the same chunk: out 0, lse -inf)."""
    if not (pagedattn.cuda_available() and torch.cuda.is_available()):
        pytest.skip("no CUDA device visible to pagedattn and PyTorch")
    args = cp.parse(["--device", "cuda", "--world-size", "1", "--shards", "4", "--context", "8192", "--tokens", "8",
                     "--window", "4100"])
    assert cp.run(0, 1, args) <= args.tol


def test_across_gpus_over_nccl():
    if torch.cuda.device_count() < 2 or not pagedattn.cuda_available():
        pytest.skip(f"{torch.cuda.device_count()} CUDA device(s) visible: the NCCL part needs two")
    argv = ["--device", "cuda", "--world-size", "2", "--context", "65536", "--port", str(_free_port())]
    assert cp.main(argv) == 0
