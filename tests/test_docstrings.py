"""The public docstrings: their examples run, and they name every parameter."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil

import pytest

import threadrecall
from threadrecall import Memory, summarize_conversation
from threadrecall.processors import MessageHistory, SemanticRecall
from threadrecall.vector import HnswVectorStore

MODULES = sorted(info.name for info in pkgutil.walk_packages(threadrecall.__path__, "threadrecall.")
                 if ".integrations." not in info.name)  # integrations import their extras


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_of_every_module_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, report=True, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_the_main_modules_have_examples():
    counts = {name: doctest.testmod(importlib.import_module(name)).attempted for name in (
        "threadrecall.memory", "threadrecall.vector.hnsw", "threadrecall.processors.semantic_recall",
        "threadrecall.processors.message_history", "threadrecall.types", "threadrecall.semantic")}
    assert all(counts.values()), counts


def _public(cls: type) -> list[tuple[str, object, str]]:
    out = []
    for name, value in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if not inspect.isfunction(value):
            continue
        doc = (cls.__doc__ if name == "__init__" else value.__doc__) or ""
        if ">>>" not in doc and f".{name}(" in (cls.__doc__ or ""):  # the class's example calls it
            doc += "\n>>> (see the class example)"
        out.append((f"{cls.__name__}.{name}", value, doc))
    return out


CALLABLES = [entry for cls in (Memory, HnswVectorStore, SemanticRecall, MessageHistory) for entry in _public(cls)]
CALLABLES.append(("summarize_conversation", summarize_conversation, summarize_conversation.__doc__ or ""))


@pytest.mark.parametrize("name, function, doc", CALLABLES, ids=[c[0] for c in CALLABLES])
def test_every_parameter_is_documented_with_an_example(name, function, doc):
    if "async twin of" in doc:
        return  # documented by its sync method
    params = [p for p in inspect.signature(function).parameters if p not in ("self", "cls")]
    assert [p for p in params if p not in doc] == []
    assert ">>>" in doc
