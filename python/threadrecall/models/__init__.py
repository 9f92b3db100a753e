"""Language models: the ``LanguageModel`` protocol, an OpenAI-compatible HTTP client, the
``"provider/model"`` router and ``ScriptedModel`` for tests."""

from .base import AbortSignal, Generation, LanguageModel, raise_if_aborted
from .openai import OpenAIChatModel
from .router import PROVIDERS, resolve_model
from .scripted import ScriptedCall, ScriptedModel

__all__ = [
    "AbortSignal",
    "Generation",
    "LanguageModel",
    "OpenAIChatModel",
    "PROVIDERS",
    "ScriptedCall",
    "ScriptedModel",
    "raise_if_aborted",
    "resolve_model",
]
