"""examples/speculative_invariance.py: with Options::deterministic (cpu backend) greedy speculative
decoding emits exactly plain greedy decoding's tokens (issue 24's demonstration, short; the bitwise contract
itself is tests/test_invariant.cpp)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import speculative_invariance as si  # noqa: E402


def test_speculative_emits_the_plain_tokens_with_the_invariant_mode():
    args = si.parse(["--steps", "120", "--dtype", "f16", "--heads", "6", "--kv-heads", "2", "--prompt", "600",
                     "--vocab", "1024", "--seed", "3"])
    results = si.run(args)
    assert results[True] is None, f"first divergence at token {results[True]}"
