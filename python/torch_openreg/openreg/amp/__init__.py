"""torch.openreg.amp: automatic mixed precision on openreg devices.

The cast policy (which ops run in float16/bfloat16, which in float32) is
registered in C++ (torch_backend/autocast.cc) and mirrors CUDA's.
"""

import torch

__all__ = ["autocast", "get_amp_supported_dtype"]


def get_amp_supported_dtype():
    """The target dtypes torch.autocast("openreg") accepts: float16 and
    bfloat16, and float32 (as CUDA and PyTorch's reference backend accept
    it: the lower-precision ops then run in float32, a way to switch a
    region to full precision without removing its autocast)."""
    return [torch.float16, torch.bfloat16, torch.float32]


class autocast(torch.amp.autocast_mode.autocast):
    """torch.autocast("openreg", ...): the device-specific shorthand, like
    torch.cuda.amp.autocast."""

    def __init__(self, enabled=True, dtype=torch.float16, cache_enabled=True):
        super().__init__("openreg", dtype=dtype, enabled=enabled,
                         cache_enabled=cache_enabled)
