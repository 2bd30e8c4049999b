# Stub of the native module pagedattn._C (src/python/module.cpp). Use the `pagedattn` package instead:
# it allocates `out`, moves metadata to the host and picks the backend and stream before calling these.
from typing import Any, Dict, Optional

built_with_cuda: bool

def cuda_available() -> bool: ...

class Plan:
    def run(self, tensors: Dict[str, Any]) -> None: ...
    def describe(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def workspace_bytes(self) -> int: ...

def plan(tensors: Dict[str, Any], num_heads: int, scale: Optional[float], sliding_window: int,
         max_context_len: Optional[int], backend: str, deterministic: bool, partition_tokens: int,
         stream: int, programmatic_launch: bool = True, num_threads: int = 0,
         cpu_reference: bool = False) -> Plan: ...
def forward(tensors: Dict[str, Any], num_heads: int, scale: Optional[float], sliding_window: int,
            max_context_len: Optional[int], backend: str, deterministic: bool, partition_tokens: int,
            stream: int, programmatic_launch: bool = True, num_threads: int = 0,
            cpu_reference: bool = False) -> None: ...
