"""The one table of tf.data dataset op kinds (``OP_TABLE``) and the op names the pipeline's readers
recognise: Python-function ops, TFRecord readers, function calls, bookkeeping ops, control flow, the
elementwise and data-movement ops the work fingerprint counts by element. Every reader of a
user's pipeline asks here (through perfsuite.workload.pipeline_model); none keeps an op list of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

PYTHON_FUNCTION_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
PRINT_OPS = frozenset({"PrintV2", "Print"})
TFRECORD_OPS = frozenset({"TFRecordDataset", "TFRecordDatasetV2"})  # readers whose bytes the fingerprint counts
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
BOOKKEEPING_OPS = frozenset({"Placeholder", "Const", "Identity", "IdentityN", "NoOp", "_Arg", "_Retval"})
RANDOM_WORDS = ("Random", "Shuffle", "Sample")  # an op whose name holds one is not deterministic
FILE_READ_OPS = frozenset({"TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDataset",
                           "FixedLengthRecordDatasetV2", "ReadFile"})
READ_FILE_OP = "ReadFile"  # tf.io.read_file: the bytes it reads count where it runs
# Control flow and the graph ops the work fingerprint's loop and branch reading follows (perfsuite.measure.float_ops).
LOOP_OPS = frozenset({"While", "StatelessWhile", "For"})  # a body run a trip count of times
BRANCH_OPS = frozenset({"If", "StatelessIf", "Case", "StatelessCase"})  # one branch run, chosen by the first input
CASE_OPS = frozenset({"Case", "StatelessCase"})  # chosen by an index (out of range: the last branch)
STATIC_SHAPE_OPS = frozenset({"Shape", "Size", "Rank"})  # a value a fully known static shape fixes
CONST_OP, PLACEHOLDER_OP, IDENTITY_OP = "Const", "Placeholder", "Identity"
ADD_OPS = frozenset({"Add", "AddV2"})  # while_v2's loop counter: counter + 1
# Elementwise and data-movement ops TensorFlow registers no 'flops' statistic for: the fingerprint counts their
# output elements as a figure of its own (elementwise_elements_per_*), so float ops keep their meaning. Views
# (Reshape, ExpandDims, Squeeze, Bitcast) move nothing and are left out; so are reductions (their output is
# no measure of their work). None of these has a registered statistic (tests/test_work_graph.py checks).
ELEMENTWISE_OPS = frozenset({
    # data movement
    "Cast", "Transpose", "ConjugateTranspose", "Pad", "PadV2", "MirrorPad", "Gather", "GatherV2", "GatherNd", "Tile",
    "Concat", "ConcatV2", "Slice", "StridedSlice", "Pack", "Unpack", "Split", "SplitV", "Reverse", "ReverseV2", "Roll",
    "Select", "SelectV2", "BroadcastTo", "OneHot", "Fill", "ZerosLike", "OnesLike", "ScatterNd", "TensorScatterUpdate",
    "TensorScatterAdd", "TensorStridedSliceUpdate", "MatrixBandPart", "MatrixDiag", "MatrixDiagV3", "MatrixDiagPart",
    "MatrixDiagPartV3", "DepthToSpace", "SpaceToDepth", "ExtractImagePatches", "ResizeBilinear",
    "ResizeNearestNeighbor", "ResizeBicubic",
    # elementwise math with no statistic
    "Abs", "ComplexAbs", "Sqrt", "Exp", "Expm1", "Log1p", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Atan2", "Sinh",
    "Cosh", "Tanh", "Sigmoid", "Softplus", "Softsign", "Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "Sign", "Floor",
    "Ceil", "Round", "Rint", "Erf", "Erfc", "Erfinv", "Lgamma", "Digamma", "Real", "Imag", "Angle", "Conj", "Complex",
    "IsFinite", "IsNan", "IsInf", "FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod", "Mod", "Div", "DivNoNan",
    "MulNoNan", "Xlogy", "Xdivy", "LogicalAnd", "LogicalOr", "LogicalNot", "ClipByValue", "Cumsum", "Cumprod",
    "CumulativeLogsumexp", "LogSoftmax", "Invert", "BitwiseAnd", "BitwiseOr", "LeftShift", "RightShift"})


@dataclass(frozen=True)
class OpKind:
    """One row of the op table. method: the tf.data method in words. role: 'source', 'stage' (work per
    element), 'wrapper' (no work per element) or 'pass-through' (hands elements on untouched). family: what
    it does ('map', 'filter', 'batch', 'prefetch', 'cache', 'shuffle', 'interleave', 'branches', ...).
    buffers: it holds elements ready (a prefetch, parallel calls in flight)."""

    method: str
    role: str
    family: str
    buffers: bool = False


def _kinds(role: str, family: str, methods: dict[str, str], buffers: bool = False) -> dict[str, OpKind]:
    return {op: OpKind(method, role, family, buffers) for op, method in methods.items()}


FUSED_MAP_AND_BATCH = "map and batch (fused)"  # the method of a map fused with its batch
OP_TABLE: dict[str, OpKind] = {
    **_kinds("source", "source", {
        "RangeDataset": "range", "TensorSliceDataset": "from_tensor_slices", "TensorDataset": "from_tensors",
        "GeneratorDataset": "from_generator", "TFRecordDataset": "TFRecordDataset",
        "TFRecordDatasetV2": "TFRecordDataset", "TextLineDataset": "TextLineDataset",
        "FixedLengthRecordDataset": "FixedLengthRecordDataset", "FixedLengthRecordDatasetV2": "FixedLengthRecordDataset",
        "SparseTensorSliceDataset": "from_tensor_slices (sparse)", "DatasetFromGraph": "from_graph"}),
    **_kinds("stage", "map", {"MapDataset": "map", "ExperimentalMapDataset": "map"}),
    **_kinds("stage", "map", {"ParallelMapDataset": "map (parallel)", "ParallelMapDatasetV2": "map (parallel)"},
             buffers=True),
    **_kinds("stage", "map", {"MapAndBatchDataset": FUSED_MAP_AND_BATCH,
                              "ExperimentalMapAndBatchDataset": FUSED_MAP_AND_BATCH}, buffers=True),
    **_kinds("stage", "filter", {"FilterDataset": "filter"}),
    **_kinds("stage", "filter", {"ParallelFilterDataset": "filter (parallel)"}, buffers=True),
    **_kinds("stage", "interleave", {"FlatMapDataset": "flat_map", "InterleaveDataset": "interleave"}),
    **_kinds("stage", "interleave", {"ParallelInterleaveDatasetV2": "interleave (parallel)",
                                     "ParallelInterleaveDatasetV3": "interleave (parallel)",
                                     "ParallelInterleaveDatasetV4": "interleave (parallel)"}, buffers=True),
    **_kinds("stage", "batch", {"BatchDataset": "batch", "BatchDatasetV2": "batch",
                                "PaddedBatchDataset": "padded_batch", "PaddedBatchDatasetV2": "padded_batch",
                                "UnbatchDataset": "unbatch", "RebatchDataset": "rebatch",
                                "RebatchDatasetV2": "rebatch", "WindowDataset": "window",
                                "DenseToSparseBatchDataset": "dense_to_sparse_batch",
                                "ExperimentalDenseToSparseBatchDataset": "dense_to_sparse_batch"}),
    **_kinds("stage", "batch", {"ParallelBatchDataset": "batch (parallel)"}, buffers=True),
    **_kinds("stage", "group", {"GroupByWindowDataset": "group_by_window", "GroupByReducerDataset": "group_by_reducer",
                                "ScanDataset": "scan", "ReduceDataset": "reduce"}),
    **_kinds("stage", "branches", {"ZipDataset": "zip", "ConcatenateDataset": "concatenate",
                                   "DirectedInterleaveDataset": "sample_from_datasets / choose_from_datasets",
                                   "ChooseFastestBranchDataset": "choose fastest branch"}),
    **_kinds("stage", "shuffle", {"ShuffleDataset": "shuffle", "ShuffleDatasetV2": "shuffle",
                                  "ShuffleDatasetV3": "shuffle", "ShuffleAndRepeatDataset": "shuffle and repeat",
                                  "ShuffleAndRepeatDatasetV2": "shuffle and repeat"}),
    **_kinds("stage", "cache", {"CacheDataset": "cache", "CacheDatasetV2": "cache", "SnapshotDatasetV2": "snapshot"}),
    **_kinds("stage", "prefetch", {"PrefetchDataset": "prefetch", "PrefetchToDevice": "prefetch_to_device"},
             buffers=True),
    **_kinds("stage", "copy", {"CopyToDeviceDataset": "prefetch_to_device (copy_to_device)"}, buffers=True),
    **_kinds("pass-through", "repeat", {"RepeatDataset": "repeat"}),
    **_kinds("pass-through", "take", {"TakeDataset": "take", "SkipDataset": "skip", "ShardDataset": "shard"}),
    **_kinds("wrapper", "wrapper", {
        "OptionsDataset": "with_options", "ModelDataset": "model", "OptimizeDataset": "optimize",
        "OptimizeDatasetV2": "optimize", "FinalizeDataset": "finalize",
        "MaxIntraOpParallelismDataset": "max_intra_op_parallelism",
        "ExperimentalMaxIntraOpParallelismDataset": "max_intra_op_parallelism",
        "PrivateThreadPoolDataset": "private_threadpool", "ExperimentalPrivateThreadPoolDataset": "private_threadpool",
        "ThreadPoolDataset": "threadpool", "ExperimentalThreadPoolDataset": "threadpool",
        "AssertCardinalityDataset": "assert_cardinality", "AssertNextDataset": "assert_next",
        "ExperimentalAssertNextDataset": "assert_next", "AssertPrevDataset": "assert_prev",
        "NonSerializableDataset": "non_serializable", "ExperimentalNonSerializableDataset": "non_serializable",
        "SetStatsAggregatorDataset": "stats", "ExperimentalSetStatsAggregatorDataset": "stats",
        "LatencyStatsDataset": "stats", "ExperimentalLatencyStatsDataset": "stats",
        "BytesProducedStatsDataset": "stats", "ExperimentalBytesProducedStatsDataset": "stats",
        "WrapDatasetVariant": "variant", "UnwrapDatasetVariant": "variant", "IgnoreErrorsDataset": "ignore_errors"}),
}
UNKNOWN_KIND = OpKind("", "stage", "other")
# The ops diagnose's rewrites turn a stage into or recognise (tools/diagnose/rewrite.py), named here with the table.
SEQUENTIAL_MAP_OP, PARALLEL_MAP_OP = "MapDataset", "ParallelMapDatasetV2"
FLAT_MAP_OP, PARALLEL_INTERLEAVE_OP = "FlatMapDataset", "ParallelInterleaveDatasetV4"
GENERATOR_OP = "GeneratorDataset"  # from_generator: its Python generator is counted per element
TENSOR_SLICES_OP = "TensorSliceDataset"  # a constant list of file names the fingerprint's reader bytes follow


def kind_of(op: str) -> OpKind:
    return OP_TABLE.get(op, UNKNOWN_KIND)


def one_to_one(op: str) -> bool:
    """Whether a dataset op gives exactly one element per input element (its pass as long as its input's)."""
    return kind_of(op).family in ("map", "prefetch", "copy", "wrapper") and "Batch" not in op
