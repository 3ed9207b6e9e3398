"""Runs a callback right after a module is imported, without importing it:
how torch_openreg registers with Dynamo and Inductor at autoload while
`import torch` stays cheap (importing torch._dynamo or torch._inductor
costs seconds)."""

import importlib.abc
import importlib.util
import sys


class _AfterImport(importlib.abc.MetaPathFinder):
    """Wraps the loader of one module so that `callback(module)` runs right
    after the module's code, then leaves sys.meta_path."""

    def __init__(self, name, callback):
        self.name = name
        self.callback = callback
        self._finding = False

    def find_spec(self, name, path, target=None):
        if name != self.name or self._finding:
            return None
        self._finding = True  # find the real spec without finding ourselves
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module
        callback = self.callback

        def run_then_call_back(module):
            run_module(module)
            callback(module)

        spec.loader.exec_module = run_then_call_back
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        return spec


def after_import(name, callback):
    """callback(module) now if `name` is imported, else right after it is
    (once)."""
    if name in sys.modules:
        callback(sys.modules[name])
    elif not any(isinstance(finder, _AfterImport) and finder.name == name
                 for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, callback))
