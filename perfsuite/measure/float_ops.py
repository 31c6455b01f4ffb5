"""Float operations of a traced TensorFlow graph, nested functions, conditionals and loops followed: the
counting the work fingerprint (perfsuite.measure.work) does on every graph it reads.

How (``FLOAT_OPS_METHOD``): TensorFlow's registered ``flops`` statistics per op at fully known shapes, plus FFT
ops, for which TensorFlow registers none, at 2.5·N·log2(N) per real transform of length N (5·N·log2(N) per
complex one). An op with no statistic counts 0 (it shows in the op histogram); an op whose shapes are not known,
or a body that cannot be found, is counted as unresolved, never as a silent 0. Ops are keyed by op and dtype.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Sequence

from perfsuite._tensorflow import tensorflow
from perfsuite.workload.op_table import BOOKKEEPING_OPS, OP_TABLE
from perfsuite.workload.pipeline_model import function_names

FLOAT_OPS_METHOD = ("TensorFlow's registered 'flops' statistics per op (what tf.compat.v1.profiler's "
                    "float_operation sums) at shapes resolved on the reference inputs, plus FFT ops at "
                    "2.5*N*log2(N) per real transform (5*N*log2(N) complex)")
FFT_OPS = {"RFFT": (1, 2.5), "RFFT2D": (2, 2.5), "RFFT3D": (3, 2.5), "IRFFT": (1, 2.5), "IRFFT2D": (2, 2.5),
           "IRFFT3D": (3, 2.5), "FFT": (1, 5.0), "FFT2D": (2, 5.0), "FFT3D": (3, 5.0), "IFFT": (1, 5.0),
           "IFFT2D": (2, 5.0), "IFFT3D": (3, 5.0)}  # op: (transformed dimensions, flops per N*log2(N))


def _registered_float_ops(graph, op) -> int | None:
    """The op's float ops at its graph's shapes: TF's registered statistic, our FFT estimate, 0 for an op
    with neither, None when a shape it needs is unknown."""
    from tensorflow.python.framework import ops as tf_ops
    from tensorflow.python.util import deprecation

    if op.type in FFT_OPS:
        return _fft_float_ops(op)
    try:
        with deprecation.silence():  # the registry's v1 shape helper warns on every first use
            stats = tf_ops.get_stats_for_node_def(graph, op.node_def, "flops")
    except (ValueError, TypeError):
        return None
    return int(stats.value or 0)


def _fft_float_ops(op) -> int | None:
    dims, per = FFT_OPS[op.type]
    shape = op.inputs[0].shape if not op.type.startswith("I") or op.type.startswith("IFFT") else op.outputs[0].shape
    if not shape.is_fully_defined():
        return None
    sizes = shape.as_list()
    n = math.prod(sizes[-dims:])
    transforms = math.prod(sizes[:-dims])
    return round(transforms * per * n * math.log2(n)) if n > 1 else 0


def count_graph(graph, functions: dict, flops: Counter, histogram: Counter, unresolved: Counter,
                 depth: int = 0, skip: frozenset | set = frozenset()) -> int:
    """Float ops of one traced graph (nested calls followed, those in ``skip`` left to the caller),
    adding to the counters; returns its total. A call whose body cannot be found is unresolved."""
    total = 0
    for op in graph.get_operations():
        key = typed_op(op.node_def)
        if op.type not in BOOKKEEPING_OPS:
            histogram[key] += 1
        if op.name in skip:
            continue
        if op.type in OP_TABLE and function_names(op.node_def):  # a dataset built inside the function:
            unresolved[f"{op.type} (its functions run per element of a dataset built here)"] += 1
            continue  # its functions run once per element it reads, unknown here
        bodies = _bodies(op, functions)
        if bodies is None or (bodies and depth >= 32):
            unresolved[op.type] += 1
            continue
        if bodies:
            totals = []
            for body in bodies:
                body_flops = Counter()
                totals.append((count_graph(body, functions, body_flops, histogram, unresolved, depth + 1),
                               body_flops))
            chosen, chosen_flops = max(totals, key=lambda item: item[0])
            flops.update(chosen_flops)
            total += chosen
            continue
        value = _registered_float_ops(graph, op)
        if value is None:
            unresolved[op.type] += 1
        elif value:
            flops[key] += value
            total += value
    return total


def typed_op(node_def) -> str:
    """'MatMul:float32', 'Cast:float16', 'RFFT:complex128': an op kind with its dtype (its ``T`` or ``dtype``
    attr, else its first output's type), so a change of precision shows; the op kind alone where it has none."""
    from tensorflow.python.framework import dtypes, op_def_registry

    attrs = node_def.attr
    for key in ("T", "dtype"):
        if key in attrs and attrs[key].type:
            return f"{node_def.op}:{dtypes.as_dtype(attrs[key].type).name}"
    op_def = op_def_registry.get(node_def.op)
    output = op_def.output_arg[0] if op_def is not None and op_def.output_arg else None
    if output is not None:
        kind = output.type or (attrs[output.type_attr].type if output.type_attr in attrs else 0)
        if not kind and output.type_list_attr in attrs and attrs[output.type_list_attr].list.type:
            kind = attrs[output.type_list_attr].list.type[0]
        if kind:
            with contextlib.suppress(TypeError, ValueError):
                return f"{node_def.op}:{dtypes.as_dtype(kind).name}"
    return node_def.op


def _bodies(op, functions: dict) -> list | None:
    """The traced graphs an op runs: a call's function, a conditional's branches, a loop's body, each at
    the shapes of the op's inputs; None when one of them cannot be found (its float ops cannot be counted).
    A function imported from a GraphDef has no graph of its own: it is built from its definition."""
    names = []
    for key in ("f", "then_branch", "else_branch", "body"):
        if key in op.node_def.attr and op.node_def.attr[key].func.name:
            names.append(op.node_def.attr[key].func.name)
    if "branches" in op.node_def.attr:
        names += [f.name for f in op.node_def.attr["branches"].list.func]
    arguments = list(op.inputs)[1:] if op.type.endswith(("If", "Case")) else list(op.inputs)
    graphs = [_body(functions.get(name), arguments) for name in names]
    return None if None in graphs else graphs


def _body(function, arguments: list):
    graph = getattr(function, "graph", None)
    definition = getattr(function, "definition", None)
    if graph is not None or definition is None:
        return graph
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

    with contextlib.suppress(ValueError, TypeError, KeyError):
        return function_def_to_graph(definition, input_shapes=[t.shape for t in arguments])
    return None


def function_registry(graph) -> dict:
    """Every function a traced graph can call, by name, nested ones included."""
    found, stack = {}, [graph]
    while stack:
        current = stack.pop()
        for name, function in getattr(current, "_functions", {}).items():
            key = name.decode() if isinstance(name, bytes) else name
            if key not in found:
                found[key] = function
                inner = getattr(function, "graph", None)
                if inner is not None:
                    stack.append(inner)
    return found


def float_ops_at(graph_def, tensors: Sequence[str], shapes: Sequence[list], run_apart: set) -> tuple[Counter, Counter]:
    """Float ops of a graph at the given shapes; the calls in ``run_apart`` are counted by running them."""
    tf = tensorflow()
    graph = tf.Graph()
    flops, unresolved = Counter(), Counter()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        for tensor, shape in zip(tensors, shapes):
            graph.get_tensor_by_name(tensor).set_shape(shape)
        count_graph(graph, function_registry(graph), flops, Counter(), unresolved, skip=run_apart)
    return flops, unresolved
