"""Graph capture and replay on openreg, with torch.cuda's shapes
(docs/GRAPHS.md): :class:`OpenRegGraph` (what ``torch.accelerator.Graph``
is for openreg), the :class:`graph` context manager, :func:`graph_pool_handle`,
:func:`is_current_stream_capturing` and :func:`make_graphed_callables`.

A capture records the commands the capturing stream would run; the daemon
keeps them as a graph of this process, and a replay is one command on the
current stream that runs them all, in order.
"""

import functools
import gc
import types

import torch
from torch._C import _acceleratorGraph

from torch_openreg import _C

__all__ = [
    "OpenRegGraph",
    "graph",
    "graph_pool_handle",
    "is_current_stream_capturing",
    "make_graphed_callables",
]

_CAPTURE_MODES = ("default", "global", "thread_local", "relaxed")


def _check_mode(capture_error_mode):
    if capture_error_mode not in _CAPTURE_MODES:
        raise ValueError(
            f"capture_error_mode must be one of {_CAPTURE_MODES}, not "
            f"{capture_error_mode!r}")


def is_current_stream_capturing():
    """True when the current openreg stream is capturing a graph (it began
    a capture, or joined one by waiting for an event recorded in it)."""
    from torch_openreg import openreg
    if not openreg.is_initialized():
        return False
    return _C._is_stream_capturing(openreg.current_stream().stream_id)


def graph_pool_handle():
    """An opaque token naming a memory pool that graphs may share
    (``graph(..., pool=graph_pool_handle())``), as
    ``torch.cuda.graph_pool_handle``."""
    return (0, _C._graph_pool_handle())


class OpenRegGraph(_acceleratorGraph):
    """A graph of openreg work, as ``torch.cuda.CUDAGraph``: capture with
    :class:`graph` (or ``capture_begin`` / ``capture_end`` on a non-default
    stream), then ``replay()``. ``torch.accelerator.Graph`` creates the
    same implementation for openreg."""

    def __new__(cls, keep_graph=False):
        return super().__new__(cls, keep_graph)

    def __init__(self, keep_graph=False):
        super().__init__(keep_graph)

    def capture_begin(self, pool=None, capture_error_mode="global"):
        """Begins capturing the current stream; its allocations come from
        ``pool`` (a :func:`graph_pool_handle` or another graph's
        ``pool()``) or from a new private pool."""
        _check_mode(capture_error_mode)
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode)

    def capture_end(self):
        """Ends the capture; the graph can then be replayed."""
        super().capture_end()

    def replay(self):
        """Enqueues the captured work on the current stream."""
        super().replay()

    def reset(self):
        """Frees the graph (the daemon's copy and the pool reference)."""
        super().reset()

    def pool(self):
        """The token of this graph's memory pool."""
        return super().pool()

    def enable_debug_mode(self):
        super().enable_debug_mode()

    def debug_dump(self, path):
        """Writes the recorded commands to ``path``, one line each."""
        super().debug_dump(path)


class graph:
    """Captures the work of its block into ``openreg_graph``, as
    ``torch.cuda.graph``: the device is synchronized, the cache emptied,
    and the block runs on ``stream`` (by default a side stream shared by
    all captures) with allocations from ``pool``."""

    default_capture_stream = None

    def __init__(self, openreg_graph, pool=None, stream=None,
                 capture_error_mode="global"):
        from torch_openreg import openreg
        _check_mode(capture_error_mode)
        if stream is None:
            if self.__class__.default_capture_stream is None:
                self.__class__.default_capture_stream = openreg.Stream()
            stream = self.__class__.default_capture_stream
        self.pool = () if pool is None else (pool,)
        self.capture_stream = stream
        self.stream_ctx = openreg.stream(stream)
        self.openreg_graph = openreg_graph
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        from torch_openreg import openreg
        openreg.synchronize()
        if torch.compiler.config.force_cudagraph_gc:
            gc.collect()
        openreg.empty_cache()
        self.stream_ctx.__enter__()
        self.openreg_graph.capture_begin(
            *self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *exc_info):
        try:
            self.openreg_graph.capture_end()
        finally:
            self.stream_ctx.__exit__(*exc_info)


def _openreg_as_cuda():
    """torch.cuda's graph names, bound to openreg's."""
    from torch_openreg import openreg
    return types.SimpleNamespace(
        CUDAGraph=OpenRegGraph,
        graph=graph,
        graph_pool_handle=graph_pool_handle,
        Stream=openreg.Stream,
        stream=openreg.stream,
        current_stream=openreg.current_stream,
        synchronize=openreg.synchronize,
        is_current_stream_capturing=is_current_stream_capturing,
    )


class _TorchWithOpenRegAsCuda(types.ModuleType):
    """``torch`` as torch.cuda.graphs' code sees it, with ``torch.cuda``
    answered by openreg's graph names."""

    def __init__(self):
        super().__init__("torch")
        self.cuda = _openreg_as_cuda()

    def __getattr__(self, name):
        return getattr(torch, name)


@functools.lru_cache(maxsize=None)
def _openreg_make_graphed_callables():
    # PyTorch's own algorithm (warm-up on a side stream, forward graphs in
    # order, backward graphs in reverse, one shared pool), run with openreg
    # in place of torch.cuda: the function's code with its globals'
    # `torch` replaced.
    from torch.cuda import graphs as cuda_graphs
    original = cuda_graphs.make_graphed_callables
    namespace = dict(original.__globals__)
    namespace["torch"] = _TorchWithOpenRegAsCuda()
    namespace["CUDAGraph"] = OpenRegGraph
    namespace["graph"] = graph
    namespace["graph_pool_handle"] = graph_pool_handle
    return types.FunctionType(original.__code__, namespace, original.__name__,
                              original.__defaults__, original.__closure__)


def make_graphed_callables(callables, sample_args, num_warmup_iters=3,
                           allow_unused_input=False, pool=None):
    """Graphed versions of ``callables`` (functions or modules), whose
    forward and backward each replay a graph, as
    ``torch.cuda.make_graphed_callables`` (same arguments and rules: the
    sample arguments' shapes are fixed, modules have no hooks, autocast
    caching disabled)."""
    return _openreg_make_graphed_callables()(
        callables, sample_args, num_warmup_iters=num_warmup_iters,
        allow_unused_input=allow_unused_input, pool=pool)
