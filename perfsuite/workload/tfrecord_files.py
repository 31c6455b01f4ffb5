"""Which TFRecord files a pipeline reads, from its graphs: the readers among the stages of the serialized
graph and among a function's operations, and the file names where the graph fixes them (a constant list,
``list_files``' sorted matches, through stages that only reorder or repeat them and through take / skip /
shard by constants). The work fingerprint (perfsuite.measure.work) asks this module; none reads the graph
for it again. Names computed at run time are None, for the reader to name as unresolved.
"""

from __future__ import annotations

from typing import Any

from perfsuite._tensorflow import tensorflow
from perfsuite.workload.op_table import CONST_OP, TENSOR_SLICES_OP, TFRECORD_OPS, kind_of


def tfrecord_stages(pipeline) -> list[tuple[Any, Any, str | None]]:
    """Every stage of a read ``Pipeline`` that reads TFRecords: (stage, file names or None where the graph does
    not fix them, compression; None where the reader is known only as a Python object, so its names too)."""
    graph = pipeline.stages_graph_def
    nodes = {node.name: node for node in graph.node} if graph is not None else {}
    readers = reader_functions({f.signature.name: f for f in graph.library.function}) if graph is not None else {}
    found = []
    for stage in pipeline.model.stages:
        node = nodes.get(stage.node)
        if node is None:
            if stage.op in TFRECORD_OPS:
                found.append((stage, None, None))
            continue
        read = stage_record_read(node, nodes, readers)
        if read is not None:
            found.append((stage, *read))
    return found


def stage_record_read(node, nodes: dict, readers: dict[str, str]):
    """(file names or None where the graph does not fix them, compression) of a stage that reads TFRecords;
    None for a stage that does not."""
    if node.op in TFRECORD_OPS:
        names = constant_value(nodes.get(node_name(node.input[0])))
        compression = constant_value(nodes.get(node_name(node.input[1])))
        return names, "" if compression is None else compression[0]
    function = node.attr["f"].func.name if "f" in node.attr else ""
    if function in readers and node.input:
        return _dataset_names(nodes.get(node_name(node.input[0])), nodes), readers[function]
    return None


_NAME_ORDER_FAMILIES = ("shuffle", "repeat", "prefetch", "cache", "wrapper")  # hand elements on, reordered at most
_KEEP_ORDER_FAMILIES = ("prefetch", "cache", "wrapper")  # hand elements on in their order
# Stages that select file names by constants, by their tf.data method (the op table's): (how many constant
# inputs follow the dataset, the selection).
_NAME_SLICES = {"take": (1, lambda names, count: names if count < 0 else names[:count]),
                "skip": (1, lambda names, count: names[:0] if count < 0 else names[count:]),
                "shard": (2, lambda names, shards, index: names[index::shards])}


def _dataset_names(node, nodes: dict):
    """The file names a dataset node yields where the serialized graph fixes them: a tensor slice of a
    constant (list_files' too: it matches its pattern when the dataset is built, and the graph holds the
    sorted matches), through stages that only reorder or repeat them (a shuffle's names count in their listed
    order), and through take, skip and shard by constants where nothing nearer the source reorders or repeats
    the names (a shard of shuffled names is not fixed); None for names computed at run time."""
    chain = []  # from the reader's input down to the source
    while node is not None and node.input and (kind_of(node.op).family in _NAME_ORDER_FAMILIES
                                               or kind_of(node.op).method in _NAME_SLICES):
        chain.append(node)
        node = nodes.get(node_name(node.input[0]))
    if node is None or node.op != TENSOR_SLICES_OP:
        return None
    names = constant_value(nodes.get(node_name(node.input[0])))
    slices = [i for i, stage in enumerate(chain) if kind_of(stage.op).method in _NAME_SLICES]
    moved = [i for i, stage in enumerate(chain)
             if i not in slices and kind_of(stage.op).family not in _KEEP_ORDER_FAMILIES]
    if slices and moved and max(moved) > min(slices):  # reordered or repeated before a selection
        return None
    for stage in reversed([chain[i] for i in slices]):  # the selection nearest the source first
        count, select = _NAME_SLICES[kind_of(stage.op).method]
        values = [constant_value(nodes.get(node_name(name))) for name in stage.input[1:1 + count]]
        if names is None or len(values) < count or any(value is None for value in values):
            return None
        names = select(names, *(int(value[0]) for value in values))
    return names


def constant_value(node):
    """A Const node's value as a flat numpy array (strings as bytes), None for any other node. Parsed by
    TensorFlow: a serialized graph packs a list of strings into ``tensor_content``, which numpy cannot read."""
    if node is None or node.op != CONST_OP:
        return None
    tf = tensorflow()
    dtype = tf.dtypes.as_dtype(node.attr["dtype"].type)
    return tf.io.parse_tensor(node.attr["value"].tensor.SerializeToString(), dtype).numpy().reshape(-1)


def node_name(text: str) -> str:
    return text.split(":")[0].lstrip("^")


def reader_functions(library: dict) -> dict[str, str]:
    """The library functions that open a TFRecord reader on their first argument (TFRecordDataset's
    per-file flat_map function), by name, with the compression their constant names."""
    from tensorflow.python.framework import tensor_util

    found = {}
    for name, function in library.items():
        first = function.signature.input_arg[0].name if function.signature.input_arg else None
        nodes = {node.name: node for node in function.node_def}
        for node in function.node_def:
            if node.op in TFRECORD_OPS and first is not None and node.input and node.input[0] == first:
                constant = nodes.get(node.input[1].split(":")[0]) if len(node.input) > 1 else None
                value = tensor_util.MakeNdarray(constant.attr["value"].tensor).reshape(-1) \
                    if constant is not None and constant.op == CONST_OP else []
                found[name] = value[0].decode() if len(value) else ""
    return found


def record_reads(operations, readers: dict[str, str]) -> list[tuple[str, Any, Any]]:
    """The TFRecord reads of a graph's operations: (op type, file names tensor, compression tensor or text) of
    each reader op, and of each per-file flat_map / interleave over a dataset of file names (TFRecordDataset
    (names)): a tensor's slices, through stages that only reorder or repeat them (list_files(shuffle=True)).
    The names are None where they come from another dataset (computed at run time from its data)."""
    out = []
    for op in operations:
        if op.type in TFRECORD_OPS:
            out.append((op.type, op.inputs[0], op.inputs[1]))
        elif "f" in op.node_def.attr and op.node_def.attr["f"].func.name in readers and op.inputs:
            out.append((op.type, _sliced_names(op.inputs[0].op), readers[op.node_def.attr["f"].func.name]))
    return out


def _sliced_names(op):
    """The tensor whose slices a dataset op of file names yields, through stages that only reorder or
    repeat them; None where they come from anything else."""
    while kind_of(op.type).family in _NAME_ORDER_FAMILIES and op.inputs:
        op = op.inputs[0].op
    return op.inputs[0] if op.type == TENSOR_SLICES_OP else None
