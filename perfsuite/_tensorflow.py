"""The one way perfsuite reaches TensorFlow: its start-up logs quieted first, imported only when asked
(so the CLI can check its arguments, and NVML/baseline code can run, without paying for the import)."""

import functools
import os


@functools.cache  # a C wrapper: AutoGraph calls it as it is when a traced function asks for TensorFlow
def tensorflow():
    """The ``tensorflow`` module, imported on first use."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow

    return tensorflow
