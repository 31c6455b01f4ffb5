"""Float operations of a traced TensorFlow graph, nested functions, conditionals and loops followed: the
counting the work fingerprint (perfsuite.measure.work) does on every graph it reads.

How (``FLOAT_OPS_METHOD``): TensorFlow's registered ``flops`` statistics per op at fully known shapes, plus FFT
ops, for which TensorFlow registers none, at 2.5·N·log2(N) per real transform of length N (5·N·log2(N) per
complex one). An op whose shapes are not known, or a body that cannot be found, is counted as unresolved, never
as a silent 0. Ops are keyed by op and dtype.

Beside them, ``elements``: the output elements of the elementwise and data-movement ops TensorFlow registers no
statistic for (the op table's ``ELEMENTWISE_OPS``: casts, transposes, pads, gathers, square roots, exponentials,
sines ...), a count of their own, so float ops keep meaning what the profiler means by them while a cast or a
transpose added still moves a figure.

A loop's body (and its condition, one pass more) counts times its trip count: the one measured at run time where
the caller has it (``trips``: the pipeline runner reads while_v2's loop counter, the While op's first output),
else one fixed by constants and static shapes (``static_trips``: the loop variables its condition reads, closed
over what the body computes them from, run through the condition and body alone from initial values that
constants and static shapes fix, as autograph's ``for i in tf.range(tf.shape(x)[0])`` has). A loop whose count
is neither is counted once and listed as ``While (trip count unknown)``. Why: a trip count from the values of
the data is exact only at run time; one from shapes is the same on every machine, and never a guess.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Sequence

from perfsuite._tensorflow import tensorflow
from perfsuite.workload.function_library import graph_def_of
from perfsuite.workload.op_table import (
    BOOKKEEPING_OPS,
    BRANCH_OPS,
    CONST_OP,
    ELEMENTWISE_OPS,
    LOOP_OPS,
    OP_TABLE,
    PLACEHOLDER_OP,
    STATIC_SHAPE_OPS,
)
from perfsuite.workload.pipeline_model import function_names

FLOAT_OPS_METHOD = ("TensorFlow's registered 'flops' statistics per op (what tf.compat.v1.profiler's "
                    "float_operation sums) at shapes resolved on the reference inputs, plus FFT ops at "
                    "2.5*N*log2(N) per real transform (5*N*log2(N) complex)")
FFT_OPS = {"RFFT": (1, 2.5), "RFFT2D": (2, 2.5), "RFFT3D": (3, 2.5), "IRFFT": (1, 2.5), "IRFFT2D": (2, 2.5),
           "IRFFT3D": (3, 2.5), "FFT": (1, 5.0), "FFT2D": (2, 5.0), "FFT3D": (3, 5.0), "IFFT": (1, 5.0),
           "IFFT2D": (2, 5.0), "IFFT3D": (3, 5.0)}  # op: (transformed dimensions, flops per N*log2(N))
MAX_STATIC_TRIPS = 10_000  # a loop run statically for longer is listed with its trip count unknown
MAX_STATIC_OPS = 256  # the most ops a static value is computed from


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
                depth: int = 0, skip: frozenset | set = frozenset(), elements: Counter | None = None,
                trips: dict | None = None) -> int:
    """Float ops of one traced graph (nested calls followed, those in ``skip`` left to the caller),
    adding to the counters; returns its total. A call whose body cannot be found is unresolved.
    ``elements``: the output elements of its ``ELEMENTWISE_OPS``, by op and dtype. ``trips``: loop op name to
    the trip count measured at run time; a loop not in it counts the trip count ``static_trips`` finds."""
    elements = Counter() if elements is None else elements
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
        if op.type in LOOP_OPS:
            total += _count_loop(op, functions, (flops, histogram, unresolved, elements), depth,
                                 (trips or {}).get(op.name))
            continue
        bodies = _bodies(op, functions)
        if bodies is None or (bodies and depth >= 32):
            unresolved[op.type] += 1
            continue
        if bodies:
            totals = []
            for body in bodies:
                body_flops, body_elements = Counter(), Counter()
                body_total = count_graph(body, functions, body_flops, histogram, unresolved, depth + 1,
                                         elements=body_elements)
                totals.append((body_total, sum(body_elements.values()), body_flops, body_elements))
            chosen, _, chosen_flops, chosen_elements = max(totals, key=lambda item: item[:2])
            flops.update(chosen_flops)
            elements.update(chosen_elements)
            total += chosen
            continue
        value = _registered_float_ops(graph, op)
        if value is None:
            unresolved[op.type] += 1
        elif value:
            flops[key] += value
            total += value
        if op.type in ELEMENTWISE_OPS:
            count = _output_elements(op)
            if count is None:
                unresolved[op.type] += 1
            elif count:
                elements[key] += count
    return total


def _output_elements(op) -> int | None:
    sizes = [t.shape.num_elements() for t in op.outputs]
    return None if None in sizes else sum(sizes)


def _count_loop(op, functions: dict, counters: tuple, depth: int, trips: int | None) -> int:
    """A loop's body times its trip count, its condition once more (see the module docstring); a loop whose
    count is unknown counts one pass and is listed as such."""
    flops, histogram, unresolved, elements = counters
    names = {key: op.node_def.attr[key].func.name for key in ("cond", "body")
             if key in op.node_def.attr and op.node_def.attr[key].func.name}
    graphs = {key: _body(functions.get(name), list(op.inputs)) for key, name in names.items()}
    if "body" not in graphs or None in graphs.values() or depth >= 32:
        unresolved[op.type] += 1
        return 0
    if trips is None:
        trips = static_trips(op, graphs.get("cond"), graphs["body"])
    if trips is None:
        unresolved[f"{op.type} (trip count unknown)"] += 1
    total = 0
    for key, part in graphs.items():
        part_flops, part_elements = Counter(), Counter()
        part_total = count_graph(part, functions, part_flops, histogram, unresolved, depth + 1, elements=part_elements)
        times = (1 if trips is None else trips) + (key == "cond")
        flops.update({k: v * times for k, v in part_flops.items()})
        elements.update({k: v * times for k, v in part_elements.items()})
        total += part_total * times
    return total


def static_trips(op, cond, body) -> int | None:
    """A loop's trip count where constants and static shapes fix it, None where they do not: the loop
    variables its condition reads, closed over the ones the body computes them from, with initial values
    ``static_value`` finds, run through the condition and the body alone (the other variables, the data, are
    never computed), up to ``MAX_STATIC_TRIPS`` passes. Stateful ops among them (random, variables) leave it
    unknown."""
    if cond is None or len(cond.outputs) != 1:
        return None
    cond_in, body_in, body_out = list(cond.inputs), list(body.inputs), list(body.outputs)
    if not len(cond_in) == len(body_in) == len(body_out) == len(op.inputs):
        return None
    needed = _inputs_reached(cond_in, cond.outputs)
    frontier = needed
    while frontier:
        reached = _inputs_reached(body_in, [body_out[i] for i in sorted(frontier)])
        if reached is None:
            return None
        frontier = reached - needed
        needed = needed | reached
    if needed is None:
        return None
    order = sorted(needed)
    state = [static_value(op.inputs[i]) for i in order]
    if any(value is None for value in state):
        return None
    with _evaluation_fails(), _Evaluator(cond, cond.outputs[:1], [cond_in[i] for i in order]) as check, \
            _Evaluator(body, [body_out[i] for i in order], [body_in[i] for i in order]) as step:
        for passes in range(MAX_STATIC_TRIPS + 1):
            if not truth(check(state)[0]):
                return passes
            state = step(state)
    return None


@contextlib.contextmanager
def _evaluation_fails():
    """A static evaluation that TensorFlow cannot import or run leaves the value unknown (its caller's None)."""
    tf = tensorflow()
    with contextlib.suppress(tf.errors.OpError, ValueError, TypeError, KeyError):
        yield


def truth(value) -> bool:
    """A predicate's value as TensorFlow's If reads it: a scalar by its value (a string: non-empty), any
    other by whether it holds elements."""
    return bool(value) if getattr(value, "ndim", 0) == 0 else value.size > 0


def _inputs_reached(inputs: list, tensors) -> set | None:
    """The indices of ``inputs`` (a function graph's placeholders) the tensors are computed from; None where
    a stateful op or a placeholder that is not one of them is on the way."""
    index = {t.name: i for i, t in enumerate(inputs)}
    found, seen, stack = set(), set(), [t.op for t in tensors]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.outputs and op.outputs[0].name in index:
            found.add(index[op.outputs[0].name])
            continue
        if op.type == PLACEHOLDER_OP or op.op_def.is_stateful or len(seen) > MAX_STATIC_OPS:
            return None
        stack.extend(t.op for t in op.inputs)
    return found


class _Evaluator:
    """A function graph's tensors computed from values fed to some of its placeholders, in a session of
    its own (the graph imported with its library, without its control edges: the ones tf.function adds to
    order stateful ops would make the session run them)."""

    def __init__(self, graph, fetches, feeds):
        tf = tensorflow()
        definition = graph_def_of(graph)
        for node in definition.node:
            kept = [name for name in node.input if not name.startswith("^")]
            del node.input[:]
            node.input.extend(kept)
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.graph_util.import_graph_def(definition, name="")
        self.session = tf.compat.v1.Session(graph=self.graph)
        self.fetches, self.feeds = [t.name for t in fetches], [t.name for t in feeds]

    def __call__(self, values: list) -> list:
        return self.session.run(self.fetches, dict(zip(self.feeds, values)))

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.session.close()


def static_value(tensor):
    """A tensor's value where constants and static shapes fix it (``Shape``, ``Size``, ``Rank`` of a tensor whose
    shape is fully known), computed from at most ``MAX_STATIC_OPS`` ops; None where a placeholder, a stateful op
    or a function call is on the way."""
    import numpy as np
    from tensorflow.core.framework import graph_pb2, node_def_pb2
    from tensorflow.python.framework import tensor_util

    tf = tensorflow()
    value = None
    with _evaluation_fails():
        value = tensor_util.constant_value(tensor)
    if value is not None:
        return value
    nodes, seen, stack = [], set(), [tensor.op]
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        node = node_def_pb2.NodeDef()
        if op.type in STATIC_SHAPE_OPS and op.inputs[0].shape.is_fully_defined():
            shape = op.inputs[0].shape
            known = {"Shape": shape.as_list(), "Size": shape.num_elements(), "Rank": shape.rank}[op.type]
            node.name, node.op = op.name, CONST_OP
            node.attr["dtype"].type = op.outputs[0].dtype.as_datatype_enum
            node.attr["value"].tensor.CopyFrom(
                tensor_util.make_tensor_proto(np.asarray(known, dtype=op.outputs[0].dtype.as_numpy_dtype)))
        elif (op.type == PLACEHOLDER_OP or op.op_def.is_stateful or len(seen) > MAX_STATIC_OPS
              or function_names(op.node_def)):
            return None
        else:
            node.CopyFrom(op.node_def)
            node.ClearField("device")
            kept = [name for name in node.input if not name.startswith("^")]
            del node.input[:]
            node.input.extend(kept)
            stack.extend(t.op for t in op.inputs)
        nodes.append(node)
    graph = tf.Graph()
    with _evaluation_fails():
        with graph.as_default():
            tf.graph_util.import_graph_def(graph_pb2.GraphDef(node=nodes), name="")
        with tf.compat.v1.Session(graph=graph) as session:
            value = session.run(tensor.name)
    return value


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
    arguments = list(op.inputs)[1:] if op.type in BRANCH_OPS else list(op.inputs)
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


def float_ops_at(graph_def, tensors: Sequence[str], shapes: Sequence[list], run_apart: set,
                 trips: dict | None = None) -> tuple[Counter, Counter, Counter]:
    """Float ops, unresolved ops and elementwise elements of a graph at the given shapes; the calls in
    ``run_apart`` are counted by running them; ``trips``: the trip counts of its loops, by op name, measured."""
    tf = tensorflow()
    graph = tf.Graph()
    flops, unresolved, elements = Counter(), Counter(), Counter()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        for tensor, shape in zip(tensors, shapes):
            graph.get_tensor_by_name(tensor).set_shape(shape)
        count_graph(graph, function_registry(graph), flops, Counter(), unresolved, skip=run_apart, elements=elements,
                    trips=trips)
    return flops, unresolved, elements
