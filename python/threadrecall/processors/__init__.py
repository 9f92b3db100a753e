"""Processors that an agent runs around each turn: recall on input, remember on output."""

from .message_history import MessageHistory
from .semantic_recall import SemanticRecall, format_other_threads

__all__ = ["MessageHistory", "SemanticRecall", "format_other_threads"]
