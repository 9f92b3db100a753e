"""threadrecall: conversation memory for AI agents, with a Rust core."""

from . import errors
from .memory import Memory
from .config import MemoryConfig, SemanticRecallConfig, WorkingMemoryConfig
from .types import Message, MessageContent, QueryResult, RecallResult, Resource, Thread, ThreadPage

__all__ = [
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
]
