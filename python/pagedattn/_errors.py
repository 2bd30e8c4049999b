"""Exceptions of pagedattn. The native module raises these for the C++ exceptions of the same name."""

import builtins

__all__ = ["Error", "ValidationError", "UnsupportedError", "RuntimeError"]


class Error(Exception):
    """Base of every error pagedattn raises (C++ ``pagedattn::Error``)."""


class ValidationError(Error, ValueError):
    """An input breaks a rule of the op. Raised before anything is written to outputs or the cache.

    ``input`` names the input (the ``params.h`` field, e.g. ``"block_indices"``) and ``rule`` states the
    rule with the offending value; ``str(e)`` is ``"invalid input '<input>': <rule>"``.
    """

    def __init__(self, message: str, input: "str | None" = None, rule: "str | None" = None):
        super().__init__(message)
        self.input = input
        self.rule = rule

    @classmethod
    def of(cls, input: str, rule: str) -> "ValidationError":
        """The error C++ ``ValidationError(input, rule)`` would raise, for checks made in Python."""
        return cls(f"invalid input '{input}': {rule}", input, rule)


class UnsupportedError(Error, NotImplementedError):
    """A valid call that this backend (or this build) does not support, e.g. ``backend="cuda"`` in a
    CPU-only build."""


class RuntimeError(Error, builtins.RuntimeError):  # noqa: A001 (mirrors pagedattn::RuntimeError)
    """A failure of the underlying runtime (CUDA error, allocation failure)."""
