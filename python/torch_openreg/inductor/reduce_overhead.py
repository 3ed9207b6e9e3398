"""torch.compile(mode="reduce-overhead") on openreg: each compiled graph of
an openreg-only program is captured in an openreg graph (docs/GRAPHS.md)
and replayed, one command per call, instead of Inductor's CUDA graph trees
(built on torch.cuda's graphs, pools and streams).

Installed as Inductor's `cudagraph_policy`, whose `wrap_output` sees every
compiled graph; graphs of other devices pass through untouched. Per
compiled graph and per input shape (and size arguments): the first call
runs as compiled (it loads the kernels' modules and warms the allocator);
the second captures on a side stream and replays; later calls copy the
inputs that are not static (parameters and buffers are) into the graph's
own and replay (a backward graph copies all its tensor inputs: the saved
activations it gets are new tensors each step). Outputs are returned as
fresh copies, so that a result
stays valid after the next call (CUDA graph trees track the liveness of
graph outputs instead; openreg pays one device copy per output). A graph
that mutates a non-static input runs uncaptured, as Inductor does on CUDA.
"""

import threading

import torch

DEVICE = "openreg"


def _key(inputs):
    return tuple((tuple(x.shape), tuple(x.stride()), x.dtype, x.device)
                 if isinstance(x, torch.Tensor) else x for x in inputs)


class _CapturedCall:
    """One capture of a compiled graph for one input signature."""

    def __init__(self, model, inputs, static_indices):
        self.copy_indices = [
            index for index, value in enumerate(inputs)
            if isinstance(value, torch.Tensor) and index not in static_indices]
        self.static_inputs = list(inputs)
        for index in self.copy_indices:
            value = inputs[index]
            self.static_inputs[index] = torch.empty_strided(
                value.shape, value.stride(), dtype=value.dtype,
                device=value.device).copy_(value)
        self.graph = torch.openreg.OpenRegGraph()
        current = torch.openreg.current_stream()
        side = torch.openreg.Stream()
        side.wait_stream(current)
        with torch.openreg.graph(self.graph, stream=side):
            outputs = model(list(self.static_inputs))
        current.wait_stream(side)
        self.static_outputs = outputs

    def __call__(self, inputs):
        for index in self.copy_indices:
            self.static_inputs[index].copy_(inputs[index])
        self.graph.replay()
        return [output.clone() if isinstance(output, torch.Tensor) else output
                for output in self.static_outputs]


class _GraphedCompiledFunction:
    def __init__(self, model, static_indices):
        self.model = model
        self.static_indices = frozenset(static_indices)
        self.seen = set()
        self.captured = {}
        self.lock = threading.Lock()

    def __call__(self, inputs):
        key = _key(inputs)
        with self.lock:
            captured = self.captured.get(key)
            if captured is None and key in self.seen:
                captured = self.captured[key] = _CapturedCall(
                    self.model, inputs, self.static_indices)
            first = key not in self.seen
            self.seen.add(key)
        if first or captured is None:
            return self.model(inputs)
        result = captured(inputs)
        inputs.clear()  # the boxed calling convention: inputs are consumed
        return result


def _graphable(output_code):
    import torch._inductor.config as config
    from torch._inductor.output_code import CompiledFxGraph

    if not config.triton.cudagraphs or not isinstance(output_code,
                                                      CompiledFxGraph):
        return False
    # Only graphs wholly on openreg: a host op cannot be captured.
    if set(output_code.device_types) != {DEVICE}:
        return False
    static = set(output_code.fx_kwargs.get("static_input_idxs") or ())
    mutated = set(output_code.mutated_input_idxs or ())
    return not (mutated - static) and output_code.current_callable is not None


def make_policy():
    from torch._inductor.cudagraph_utils import CUDAGraphPolicy

    class OpenRegGraphPolicy(CUDAGraphPolicy):
        def wrap_output(self, output_code):
            if _graphable(output_code):
                # A backward graph's inputs Inductor calls static are the
                # forward graph's saved outputs, stable in CUDA graph trees'
                # pool; here they are fresh copies each call: copy them in.
                static = (() if output_code.fx_kwargs.get("is_backward")
                          else output_code.fx_kwargs.get("static_input_idxs")
                          or ())
                output_code.current_callable = _GraphedCompiledFunction(
                    output_code.current_callable, static)
            return output_code

    return OpenRegGraphPolicy()
