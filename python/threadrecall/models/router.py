"""Model router: ``"provider/model"`` strings to OpenAI-compatible clients.

Each provider has its conventional key variable and base URL; the base URL can be overridden
with ``<PROVIDER>_BASE_URL`` (``OPENAI_BASE_URL`` for ``openai``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from .openai import OpenAIChatModel

__all__ = ["Provider", "PROVIDERS", "resolve_model"]


@dataclass(frozen=True)
class Provider:
    """An OpenAI-compatible provider: where it lives and which variables configure it."""

    name: str
    base_url: str
    key_env: str | None  # None: the provider takes no key (a local server)
    base_url_env: str

    def resolve_base_url(self, env: Mapping[str, str]) -> str:
        return env.get(self.base_url_env) or self.base_url


def _provider(name: str, base_url: str, key_env: str | None = "") -> Provider:
    upper = name.upper().replace("-", "_")
    key = f"{upper}_API_KEY" if key_env == "" else key_env
    return Provider(name, base_url, key, f"{upper}_BASE_URL")


PROVIDERS: dict[str, Provider] = {p.name: p for p in (
    _provider("openai", "https://api.openai.com/v1"),
    _provider("groq", "https://api.groq.com/openai/v1"),
    _provider("together", "https://api.together.xyz/v1"),
    _provider("openrouter", "https://openrouter.ai/api/v1"),
    _provider("deepseek", "https://api.deepseek.com/v1"),
    _provider("mistral", "https://api.mistral.ai/v1"),
    _provider("fireworks", "https://api.fireworks.ai/inference/v1"),
    _provider("xai", "https://api.x.ai/v1"),
    _provider("perplexity", "https://api.perplexity.ai"),
    _provider("cerebras", "https://api.cerebras.ai/v1"),
    _provider("deepinfra", "https://api.deepinfra.com/v1/openai"),
    _provider("google", "https://generativelanguage.googleapis.com/v1beta/openai",
              "GOOGLE_GENERATIVE_AI_API_KEY"),
    _provider("ollama", "http://localhost:11434/v1", None),
    _provider("lmstudio", "http://localhost:1234/v1", None),
    _provider("vllm", "http://localhost:8000/v1", None),
    _provider("llamacpp", "http://localhost:8080/v1", None),
)}


def resolve_model(model: Any, *, env: Mapping[str, str] | None = None, **options: Any) -> Any:
    """Turn ``"provider/model"`` into an ``OpenAIChatModel``; return a model object unchanged.

    ``options`` go to ``OpenAIChatModel`` (``timeout``, ``max_retries``...). Unknown
    providers, a missing key and malformed strings raise ``ConfigurationError``.

    >>> resolve_model("ollama/qwen3:8b", env={}).base_url
    'http://localhost:11434/v1'
    >>> resolve_model("openai/gpt-5-mini", env={}) # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    threadrecall.errors.ConfigurationError: ...
    """
    if not isinstance(model, str):
        if hasattr(model, "generate"):
            return model
        raise ConfigurationError(
            f"model must be a 'provider/model' string or an object with generate(), "
            f"got {type(model).__name__}")
    env = os.environ if env is None else env
    provider_name, sep, name = model.strip().partition("/")
    if not sep or not provider_name or not name.strip():
        raise ConfigurationError(
            f"model {model!r} is not of the form 'provider/model' (e.g. 'openai/gpt-5-mini')")
    provider = PROVIDERS.get(provider_name.lower())
    if provider is None:
        raise ConfigurationError(
            f"unknown model provider {provider_name!r} in {model!r}; known providers: "
            f"{', '.join(sorted(PROVIDERS))}. For another OpenAI-compatible server, pass "
            "OpenAIChatModel(name, base_url=...) instead of a string")
    api_key = None
    if provider.key_env is not None:
        api_key = env.get(provider.key_env)
        # A base URL override points at a self-hosted server, which may take no key.
        if not api_key and not env.get(provider.base_url_env):
            raise ConfigurationError(
                f"model {model!r} needs an API key: set the {provider.key_env} environment "
                "variable")
    return OpenAIChatModel(name, base_url=provider.resolve_base_url(env), api_key=api_key or "",
                           provider=provider.name, **options)
