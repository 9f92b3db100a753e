"""threadrecall: conversation memory for AI agents, with a Rust core."""

from . import errors
from .config import MemoryConfig, SemanticRecallConfig, WorkingMemoryConfig
from .extractors import Extractor
from .memory import Memory
from .summarize import SummarizeResult, asummarize_conversation, summarize_conversation
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
    "Extractor",
    "SummarizeResult",
    "summarize_conversation",
    "asummarize_conversation",
]
