"""Exceptions raised by threadrecall.

Every class derives from :class:`ThreadRecallError`, and most also from the builtin a Python
user would reach for (``ValueError``, ``LookupError``, ...), so either ``except`` works.
"""

from __future__ import annotations

__all__ = [
    "ThreadRecallError",
    "InvalidFilterError",
    "FilterTypeError",
    "ThreadNotFoundError",
    "ResourceMismatchError",
    "DimensionMismatchError",
    "ConfigurationError",
    "IndexCorruptError",
    "ExtractorError",
    "InvalidArgumentError",
    "IndexNotFoundError",
    "UnsupportedValueError",
    "StorageError",
    "ModelError",
    "AbortedError",
]


class ThreadRecallError(Exception):
    """Base class of every error this library raises on purpose."""


class InvalidFilterError(ThreadRecallError, ValueError):
    """A metadata key or value that is not allowed, or a malformed vector filter."""


class FilterTypeError(ThreadRecallError, TypeError):
    """A filter that is not a mapping."""


class ThreadNotFoundError(ThreadRecallError, LookupError):
    """An operation needs a thread that does not exist."""


class ResourceMismatchError(ThreadRecallError, PermissionError):
    """The given resource id does not own the thread."""


class DimensionMismatchError(ThreadRecallError, ValueError):
    """A vector whose length differs from the index's dimension."""


class ConfigurationError(ThreadRecallError, ValueError):
    """A configuration that cannot work (semantic recall without an embedder, ...)."""


class IndexCorruptError(ThreadRecallError):
    """An index file that cannot be read; delete it and it is rebuilt from the database."""


class ExtractorError(ThreadRecallError, ValueError):
    """An invalid extractor: its name, slug or metadata path."""


class InvalidArgumentError(ThreadRecallError, ValueError):
    """Any other bad argument: a blank thread id, a negative page, ..."""


class IndexNotFoundError(ThreadRecallError, LookupError):
    """A vector index that does not exist."""


class UnsupportedValueError(ThreadRecallError, TypeError):
    """A metadata or content value that JSON cannot hold (an object, a ``datetime``, bytes, a
    non-string key...); the message names its key."""


class StorageError(ThreadRecallError, OSError):
    """The database or an index file could not be read or written (a full disk, a missing
    permission, a directory in the way...); the message carries the operating system's error."""


class ModelError(ThreadRecallError):
    """A language or embedding model call that failed.

    Carries the ``provider``, the HTTP ``status`` (when there was one) and a ``hint``.
    """

    def __init__(self, message: str, *, provider: str = "", status: int | None = None,
                 hint: str = "") -> None:
        parts = [message]
        if provider:
            parts.append(f"provider={provider}")
        if status is not None:
            parts.append(f"status={status}")
        if hint:
            parts.append(f"hint: {hint}")
        super().__init__("; ".join(parts))
        self.provider = provider
        self.status = status
        self.hint = hint


class AbortedError(ThreadRecallError):
    """The caller's abort signal was set; the operation stopped."""

    def __init__(self, message: str = "The operation was aborted.") -> None:
        super().__init__(message)
