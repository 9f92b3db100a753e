"""OpenAIChatModel and the router against a real chat-completions server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from threadrecall.errors import AbortedError, ConfigurationError, ModelError
from threadrecall.models import OpenAIChatModel, resolve_model

HELLO = [{"role": "user", "content": "hello"}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def completion(text, prompt_tokens=7, completion_tokens=3):
    return {
        "id": "cmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


class ChatServer:
    """A chat-completions server answering from a script of (status, body, headers, delay)."""

    def __init__(self):
        self.script = []
        self.requests = []
        self.on_request = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                server.requests.append({"path": self.path, "body": body,
                                        "auth": self.headers.get("authorization")})
                if server.on_request:
                    server.on_request(len(server.requests))
                status, payload, headers, delay = (server.script.pop(0) if server.script
                                                   else (200, completion("ok"), {}, 0))
                if delay:
                    time.sleep(delay)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def reply(self, status, payload, headers=None, delay=0):
        self.script.append((status, payload, headers or {}, delay))

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = ChatServer()
    yield s
    s.close()


def client(server, **kw):
    kw.setdefault("backoff_base", 0.001)
    return OpenAIChatModel("test-model", base_url=server.base_url, api_key="sk-test", **kw)


def test_plain_completion_sends_model_messages_settings_and_key(server):
    server.reply(200, completion("Bonjour"))
    gen = client(server).generate(HELLO, temperature=0.3, max_output_tokens=50)
    assert gen.text == "Bonjour"
    assert gen.usage == {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
    assert gen.parsed is None
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["auth"] == "Bearer sk-test"
    assert req["body"]["model"] == "test-model"
    assert req["body"]["messages"] == HELLO
    assert req["body"]["temperature"] == 0.3 and req["body"]["max_tokens"] == 50


def test_no_key_sends_no_authorization(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    OpenAIChatModel("m", base_url=server.base_url).generate(HELLO)
    assert server.requests[0]["auth"] is None


def test_base_url_and_key_from_environment(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    OpenAIChatModel("m").generate(HELLO)
    assert server.requests[0]["auth"] == "Bearer sk-env"


def test_429_then_success_honours_retry_after(server):
    server.reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})
    server.reply(503, {"error": {"message": "overloaded"}})
    server.reply(200, completion("done"))
    assert client(server).generate(HELLO).text == "done"
    assert len(server.requests) == 3


def test_retries_give_up_with_model_error(server):
    for _ in range(3):
        server.reply(500, {"error": {"message": "boom"}})
    with pytest.raises(ModelError) as info:
        client(server, max_retries=2).generate(HELLO)
    assert info.value.status == 500 and "boom" in str(info.value)
    assert len(server.requests) == 3


def test_400_is_not_retried(server):
    server.reply(400, {"error": {"message": "messages must not be empty"}})
    with pytest.raises(ModelError) as info:
        client(server).generate(HELLO)
    assert info.value.status == 400 and "messages must not be empty" in str(info.value)
    assert len(server.requests) == 1


def test_401_carries_a_hint(server):
    server.reply(401, {"error": {"message": "bad key"}})
    with pytest.raises(ModelError) as info:
        client(server).generate(HELLO)
    assert info.value.status == 401 and "API key" in info.value.hint


def test_timeout_becomes_model_error(server):
    server.reply(200, completion("late"), delay=1.0)
    with pytest.raises(ModelError) as info:
        client(server, timeout=0.2, max_retries=0).generate(HELLO)
    assert "no answer within" in str(info.value)


def test_connection_refused_becomes_model_error():
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="", max_retries=1,
                            backoff_base=0.001)
    with pytest.raises(ModelError) as info:
        model.generate(HELLO)
    assert "could not reach" in str(info.value)


@pytest.mark.parametrize("payload", [b"<html>oops</html>", {"choices": []}, {"nothing": 1}])
def test_malformed_body(server, payload):
    server.reply(200, payload)
    with pytest.raises(ModelError) as info:
        client(server).generate(HELLO)
    assert "not a chat completion" in str(info.value)


def test_structured_output_uses_json_schema(server):
    server.reply(200, completion('{"city": "Lyon"}'))
    gen = client(server).generate(HELLO, response_format=SCHEMA)
    assert gen.parsed == {"city": "Lyon"}
    fmt = server.requests[0]["body"]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == SCHEMA


def test_fallback_to_schema_in_prompt(server):
    server.reply(400, {"error": {"message": "response_format json_schema is not supported"}})
    server.reply(200, completion('Here you go:\n```json\n{"city": "Nantes"}\n```'))
    model = client(server)
    gen = model.generate(HELLO, response_format=SCHEMA)
    assert gen.parsed == {"city": "Nantes"}
    retry = server.requests[1]["body"]
    assert "response_format" not in retry
    assert '"city"' in retry["messages"][-1]["content"]
    # the model remembers: the next structured call goes straight to the prompt form
    server.reply(200, completion('{"city": "Brest"}'))
    assert model.generate(HELLO, response_format=SCHEMA).parsed == {"city": "Brest"}
    assert "response_format" not in server.requests[2]["body"]


def test_refused_setting_is_dropped(server):
    server.reply(400, {"error": {"message": "Unsupported value: 'temperature' does not support "
                                            "0.3 with this model."}})
    server.reply(200, completion("fine"))
    assert client(server).generate(HELLO, temperature=0.3).text == "fine"
    assert "temperature" not in server.requests[1]["body"]


def test_structured_answer_that_is_not_json(server):
    server.reply(200, completion("I cannot do that"))
    with pytest.raises(ModelError, match="not valid JSON"):
        client(server).generate(HELLO, response_format=SCHEMA)


def test_abort_mid_retry(server):
    stop = threading.Event()
    server.on_request = lambda n: stop.set()
    server.reply(503, {"error": {"message": "busy"}}, {"Retry-After": "30"})
    with pytest.raises(AbortedError):
        client(server).generate(HELLO, abort_signal=stop)
    assert len(server.requests) == 1


def test_abort_before_first_attempt(server):
    stop = threading.Event()
    stop.set()
    with pytest.raises(AbortedError):
        client(server).generate(HELLO, abort_signal=stop)
    assert server.requests == []


def test_async_generate_retries_and_parses(server):
    server.reply(429, {"error": {"message": "slow"}}, {"Retry-After": "0"})
    server.reply(200, completion('{"city": "Caen"}'))
    gen = asyncio.run(client(server).agenerate(HELLO, response_format=SCHEMA))
    assert gen.parsed == {"city": "Caen"}
    assert len(server.requests) == 2


def test_async_abort_mid_retry(server):
    stop = threading.Event()
    server.on_request = lambda n: stop.set()
    server.reply(500, {"error": {"message": "busy"}})
    with pytest.raises(AbortedError):
        asyncio.run(client(server).agenerate(HELLO, abort_signal=stop))
    assert len(server.requests) == 1


# ---------------------------------------------------------------------------- router

def test_router_resolves_providers_from_environment():
    env = {"GROQ_API_KEY": "gk", "OPENAI_API_KEY": "ok"}
    groq = resolve_model("groq/llama-3.3-70b-versatile", env=env)
    assert isinstance(groq, OpenAIChatModel)
    assert groq.base_url == "https://api.groq.com/openai/v1" and groq.api_key == "gk"
    assert groq.model == "llama-3.3-70b-versatile"
    nested = resolve_model("openrouter/anthropic/claude-sonnet-4", env={"OPENROUTER_API_KEY": "k"})
    assert nested.model == "anthropic/claude-sonnet-4"
    local = resolve_model("ollama/qwen3:8b", env={"OPENAI_API_KEY": "must-not-leak"})
    assert local.base_url == "http://localhost:11434/v1" and not local.api_key


def test_router_base_url_override_and_options(server):
    model = resolve_model("openai/test", env={"OPENAI_BASE_URL": server.base_url},
                          max_retries=0)
    assert model.generate(HELLO).text == "ok"
    assert model.max_retries == 0


def test_router_returns_model_objects_unchanged():
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1", api_key="")
    assert resolve_model(model) is model


@pytest.mark.parametrize("spec, text", [
    ("openai/gpt-5-mini", "OPENAI_API_KEY"),
    ("nosuch/model", "unknown model provider"),
    ("gpt-5-mini", "provider/model"),
    ("openai/", "provider/model"),
    ("/gpt", "provider/model"),
    (42, "provider/model"),
])
def test_router_errors(spec, text):
    with pytest.raises(ConfigurationError, match=text):
        resolve_model(spec, env={})


# ---------------------------------------------------------------------------- end to end

def test_summary_with_structured_extractor_over_http(server):
    from threadrecall import extractors, summarize

    server.reply(200, completion("<observations>\n* 🔴 (09:30) User wants a plumber.\n"
                                 "</observations>", 120, 30))
    server.reply(400, {"error": {"message": "'response_format' of type 'json_schema' is not "
                                            "supported with this model"}})
    server.reply(200, completion('{"service": "plumbing"}'))
    service = extractors.Extractor("service", instructions="The service asked for.",
                                   schema={"type": "string"})
    result = summarize.summarize_conversation(
        [{"role": "user", "content": "I need a plumber"}], client(server), extract=[service])
    assert result.summary == "* 🔴 (09:30) User wants a plumber."
    assert result.extracted == {"service": "plumbing"}
    assert result.usage == {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}
    assert server.requests[0]["body"]["temperature"] == 0.3
    assert "response_format" in server.requests[1]["body"]
    assert "response_format" not in server.requests[2]["body"]


def test_error_body_with_status_200_is_reported(server):
    server.reply(200, {"error": {"message": "model is loading"}})
    with pytest.raises(ModelError, match="model is loading"):
        client(server).generate(HELLO)
