"""threadrecall: conversation memory for AI agents, with a Rust core."""

from importlib import metadata as _metadata

from . import errors
from .config import MemoryConfig, SemanticRecallConfig, WorkingMemoryConfig
from .extractors import Extractor
from .memory import Memory
from .summarize import SummarizeResult, asummarize_conversation, summarize_conversation
from .types import Message, MessageContent, QueryResult, RecallResult, Resource, Thread, ThreadPage

try:
    __version__: str = _metadata.version("threadrecall")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    from ._core import __version__

__all__ = [
    "__version__",
    "errors",
    "Memory",
    "MemoryConfig",
    "SemanticRecallConfig",
    "WorkingMemoryConfig",
    "Message",
    "MessageContent",
    "QueryResult",
    "RecallResult",
    "Resource",
    "Thread",
    "ThreadPage",
    "Extractor",
    "SummarizeResult",
    "summarize_conversation",
    "asummarize_conversation",
]
