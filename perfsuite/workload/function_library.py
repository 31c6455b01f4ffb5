"""Questions about the functions of a graph's library (FunctionDefs by name), asked by the work fingerprint's
graph runner: the library itself, a graph's GraphDef, a conditional's branches, whether a loop counts its own
trips, whether functions hold a Python function or a file read. Op names come from the op table.
"""

from __future__ import annotations

from perfsuite.workload.op_table import ADD_OPS, CONST_OP, FILE_READ_OPS, IDENTITY_OP, PYTHON_FUNCTION_OPS
from perfsuite.workload.pipeline_model import function_names


def graph_def_of(graph):
    """The GraphDef of a TensorFlow graph (a traced function's ``graph``): the one place outside the
    pipeline model that serializes a graph, so a reader never walks graphs of its own."""
    return graph.as_graph_def()


def function_definitions(stages_graph_def, traced: dict) -> dict:
    """FunctionDefs by name: the library of ``stages_graph_def`` (the serialized graph a pipeline's stages
    were read from; None: none), then each traced function's own and those its graph calls (``traced``:
    name -> (wrapper, input dataset)); a function that cannot be serialized is left out."""
    library = {}
    if stages_graph_def is not None:
        library.update((f.signature.name, f) for f in stages_graph_def.library.function)
    for function_name, (wrapper, _) in traced.items():
        try:
            library.setdefault(function_name, wrapper.function.function_def)
            for inner in graph_def_of(wrapper.function.graph).library.function:
                library.setdefault(inner.signature.name, inner)
        except (AttributeError, ValueError):
            continue
    return library


def branch_names(op) -> list[str]:
    """A conditional's branch functions, in order: then, else (If); by index (Case)."""
    attrs = op.node_def.attr
    if "branches" in attrs:
        return [f.name for f in attrs["branches"].list.func]
    return [attrs["then_branch"].func.name, attrs["else_branch"].func.name]


def counts_its_trips(op, library: dict) -> bool:
    """Whether a loop is while_v2's, whose first loop variable is its counter (the body returns it plus 1), so
    that its first output is its trip count."""
    from tensorflow.python.framework import tensor_util

    body = library.get(op.node_def.attr["body"].func.name) if "cond" in op.node_def.attr else None
    if body is None or not body.signature.input_arg or not body.signature.output_arg:
        return False
    nodes = {node.name: node for node in body.node_def}
    counter = body.signature.input_arg[0].name
    node = nodes.get(body.ret.get(body.signature.output_arg[0].name, "").split(":")[0])
    while node is not None and node.op == IDENTITY_OP and node.input:
        node = nodes.get(node.input[0].split(":")[0])
    if node is None or node.op not in ADD_OPS:
        return False
    inputs = [name.split(":")[0] for name in node.input if not name.startswith("^")]
    others = [nodes.get(name) for name in inputs if name != counter]
    return (len(inputs) == 2 and len(others) == 1 and others[0] is not None and others[0].op == CONST_OP
            and tensor_util.MakeNdarray(others[0].attr["value"].tensor).reshape(-1).tolist() == [1])


def holds_reads(names, library: dict, seen: set | None = None) -> bool:
    """Whether the functions named (and those they call) hold a Python-function op or a file read."""
    seen = set() if seen is None else seen
    for name in names:
        if name in seen or name not in library:
            continue
        seen.add(name)
        for node in library[name].node_def:
            if node.op in PYTHON_FUNCTION_OPS or node.op in FILE_READ_OPS \
                    or holds_reads(function_names(node), library, seen):
                return True
    return False
