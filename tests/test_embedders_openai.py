"""OpenAIEmbedder against a real HTTP server on 127.0.0.1, started by each test."""

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from threadrecall.embedders import Embedder, HashEmbedder, OpenAIEmbedder
from threadrecall.errors import (
    ConfigurationError,
    DimensionMismatchError,
    InvalidArgumentError,
    ModelError,
)


class FakeEmbeddingsServer:
    """Answers POST /v1/embeddings: scripted replies first, then real HashEmbedder vectors."""

    def __init__(self, dim: int = 16) -> None:
        self.dim = dim
        self.requests: list[dict] = []
        self.script: list[tuple[int, object, dict]] = []  # (status, body, headers)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with server._lock:
                    server.requests.append(
                        {
                            "path": self.path,
                            "headers": dict(self.headers),
                            "body": json.loads(raw),
                        }
                    )
                    scripted = server.script.pop(0) if server.script else None
                status, body, headers = scripted or (200, server.answer(json.loads(raw)), {})
                payload = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, body: dict) -> dict:
        texts = body["input"]
        vectors = HashEmbedder(dim=self.dim).embed(texts) * 3.0  # unnormalised on purpose
        data = [
            {"object": "embedding", "index": i, "embedding": v.tolist()}
            for i, v in enumerate(vectors)
        ]
        tokens = sum(len(t.split()) for t in texts)
        return {
            "object": "list",
            "data": data[::-1],
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    fake = FakeEmbeddingsServer()
    yield fake
    fake.close()


def make(server, **kwargs):
    kwargs.setdefault("model", "test-model")
    kwargs.setdefault("dimension", server.dim)
    kwargs.setdefault("backoff", 0)
    model = kwargs.pop("model")
    return OpenAIEmbedder(model, base_url=server.base_url, api_key="sk-test", **kwargs)


def test_protocol_and_known_dimensions():
    for model, dim in [
        ("text-embedding-3-small", 1536),
        ("text-embedding-3-large", 3072),
        ("text-embedding-ada-002", 1536),
    ]:
        embedder = OpenAIEmbedder(model, base_url="http://127.0.0.1:9/v1", api_key="k")
        assert embedder.dimension == dim and embedder.model_id == model
        assert isinstance(embedder, Embedder)


def test_batching_order_usage_and_headers(server):
    embedder = make(server, batch_size=3)
    texts = [f"text number {i}" for i in range(7)]
    vectors = embedder.embed(texts)
    assert [len(r["body"]["input"]) for r in server.requests] == [3, 3, 1]
    assert all(r["path"] == "/v1/embeddings" for r in server.requests)
    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-test"
    assert server.requests[0]["body"]["model"] == "test-model"
    assert server.requests[0]["body"]["encoding_format"] == "float"
    assert "dimensions" not in server.requests[0]["body"]
    np.testing.assert_allclose(vectors, HashEmbedder(dim=server.dim).embed(texts), atol=1e-6)
    assert vectors.dtype == np.float32
    assert embedder.last_usage == {"tokens": 21}


def test_empty_list_and_empty_string(server):
    embedder = make(server)
    assert embedder.embed([]).shape == (0, server.dim)
    assert server.requests == []
    embedder.embed(["", "x"])
    assert server.requests[0]["body"]["input"] == [" ", "x"]


def test_429_then_success_is_retried(server):
    server.script = [(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})]
    vectors = make(server).embed(["hello"])
    assert len(server.requests) == 2
    assert vectors.shape == (1, server.dim)


def test_5xx_then_success_is_retried(server):
    server.script = [(500, {"error": "boom"}, {}), (503, b"unavailable", {})]
    make(server).embed(["hello"])
    assert len(server.requests) == 3


def test_retries_are_bounded(server):
    server.script = [(429, {"error": {"message": "slow down"}}, {})] * 10
    with pytest.raises(ModelError) as caught:
        make(server, max_retries=2).embed(["hello"])
    assert len(server.requests) == 3
    assert caught.value.status == 429
    assert caught.value.provider == "openai"
    assert "slow down" in str(caught.value)
    assert "gave up after 2 retries" in caught.value.hint


@pytest.mark.parametrize(
    "status, hint",
    [(400, "not retried"), (401, "API key"), (404, "base_url"), (422, "not retried")],
)
def test_other_4xx_is_not_retried(server, status, hint):
    server.script = [(status, {"error": {"message": "bad input"}}, {})]
    with pytest.raises(ModelError) as caught:
        make(server).embed(["hello"])
    assert len(server.requests) == 1
    assert caught.value.status == status
    assert "bad input" in str(caught.value)
    assert hint in caught.value.hint


def test_connection_errors_are_retried_then_reported():
    with socket.socket() as sock:  # a port with nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    embedder = OpenAIEmbedder(
        "m",
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key="k",
        dimension=4,
        max_retries=2,
        backoff=0,
    )
    with pytest.raises(ModelError) as caught:
        embedder.embed(["hello"])
    assert caught.value.status is None
    assert "base_url" in caught.value.hint


def test_dimension_mismatch_with_declared_dimension(server):
    with pytest.raises(DimensionMismatchError, match="length 16, expected 8"):
        make(server, dimension=8).embed(["hello"])


def test_dimension_mismatch_with_known_model(server):
    embedder = make(server, model="text-embedding-3-small", dimension=None)
    assert embedder.dimension == 1536
    with pytest.raises(DimensionMismatchError):
        embedder.embed(["hello"])


def test_shortened_dimension_is_requested_from_text_embedding_3(server):
    embedder = make(server, model="text-embedding-3-small", dimension=16)
    embedder.embed(["hello"])
    assert server.requests[0]["body"]["dimensions"] == 16


def test_unknown_model_probes_once_lazily(server):
    embedder = make(server, dimension=None)
    assert server.requests == []
    assert embedder.dimension == server.dim
    assert embedder.dimension == server.dim
    assert [r["body"]["input"] for r in server.requests] == [["a"]]


def test_unknown_model_learns_its_dimension_from_the_first_call(server):
    embedder = make(server, dimension=None)
    embedder.embed(["x", "y"])
    assert embedder.dimension == server.dim
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        b"not json at all",
        {"nothing": "here"},
        {"data": "nope"},
        {"data": []},
        {"data": [{"index": 0, "embedding": "base64?"}]},
        {"data": [{"index": 0}]},
        {"data": [{"index": 0, "embedding": []}]},
        {"data": [{"index": 0, "embedding": [1.0, "x"]}]},
        {"data": [{"index": 0, "embedding": [1.0, float("nan")]}]},
    ],
)
def test_malformed_body(server, body):
    server.script = [(200, body, {})]
    with pytest.raises(ModelError, match="malformed") as caught:
        make(server).embed(["hello"])
    assert caught.value.status == 200


def test_ragged_batch_is_malformed(server):
    server.script = [
        (
            200,
            {"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 1, "embedding": [1.0]}]},
            {},
        )
    ]
    with pytest.raises(ModelError, match="different lengths"):
        make(server).embed(["a", "b"])


def test_environment_variables(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    embedder = OpenAIEmbedder("test-model", dimension=server.dim, backoff=0)
    embedder.embed(["hello"])
    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-env"


def test_openai_without_a_key_is_a_configuration_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIEmbedder()


def test_aembed_retries_and_matches_embed(server):
    server.script = [(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})]
    embedder = make(server, batch_size=2)
    texts = ["one", "two", "three"]
    vectors = asyncio.run(embedder.aembed(texts))
    assert len(server.requests) == 3
    np.testing.assert_allclose(vectors, embedder.embed(texts), atol=1e-6)
    assert embedder.last_usage == {"tokens": 3}


def test_aembed_does_not_retry_400(server):
    server.script = [(400, {"error": {"message": "bad input"}}, {})]
    with pytest.raises(ModelError):
        asyncio.run(make(server).aembed(["x"]))
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "kwargs",
    [{"batch_size": 0}, {"max_retries": -1}, {"dimension": 0}, {"timeout": -1}, {"model": " "}],
)
def test_bad_arguments(kwargs):
    model = kwargs.pop("model", "m")
    with pytest.raises(InvalidArgumentError):
        OpenAIEmbedder(model, base_url="http://127.0.0.1:9/v1", api_key="k", **kwargs)


def test_isinstance_check_does_not_probe(server):
    embedder = make(server, dimension=None)
    assert isinstance(embedder, Embedder)
    assert server.requests == []


def test_context_manager_closes_the_client(server):
    with make(server) as embedder:
        embedder.embed(["x"])
    assert embedder._client is None
    assert embedder.embed(["y"]).shape == (1, server.dim)  # reopens
