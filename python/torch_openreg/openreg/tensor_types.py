"""Legacy tensor types: torch.openreg.FloatTensor and friends, as torch.cuda
has them. PyTorch creates such type objects only for CPU and CUDA, so these
are Python classes with the same behaviour: calling one makes a tensor of
that dtype on the current openreg device, isinstance() checks device type
and dtype, and `tensor.type()` names them ("torch.openreg.FloatTensor")."""

import torch

__all__ = [
    "BFloat16Tensor",
    "BoolTensor",
    "ByteTensor",
    "CharTensor",
    "DoubleTensor",
    "FloatTensor",
    "HalfTensor",
    "IntTensor",
    "LongTensor",
    "ShortTensor",
]


class _LegacyTensorType(type):
    def __instancecheck__(cls, instance):
        return (isinstance(instance, torch.Tensor)
                and instance.device.type == "openreg"
                and instance.dtype == cls.dtype)

    def __repr__(cls):
        return f"<class 'torch.openreg.{cls.__name__}'>"


class _LegacyTensor(metaclass=_LegacyTensorType):
    dtype = None
    is_cuda = False
    is_sparse = False

    def __new__(cls, *args, device=None):
        device = torch.device("openreg" if device is None else device)
        if device.type != "openreg":
            raise ValueError(
                f"torch.openreg.{cls.__name__} makes openreg tensors; "
                f"got device={device}")
        if len(args) == 1 and not isinstance(args[0], int):
            if isinstance(args[0], torch.Size):
                return torch.empty(args[0], dtype=cls.dtype, device=device)
            # Data: a sequence, array or tensor.
            return torch.tensor(args[0], dtype=cls.dtype, device=device)
        return torch.empty(args if args else (0,), dtype=cls.dtype,
                           device=device)


def _make(name, dtype):
    return _LegacyTensorType(name, (_LegacyTensor,), {
        "dtype": dtype,
        "__module__": "torch.openreg",
        "__doc__": f"{dtype} tensors on openreg (legacy type, like "
                   f"torch.cuda.{name}).",
    })


DoubleTensor = _make("DoubleTensor", torch.float64)
FloatTensor = _make("FloatTensor", torch.float32)
HalfTensor = _make("HalfTensor", torch.float16)
BFloat16Tensor = _make("BFloat16Tensor", torch.bfloat16)
ByteTensor = _make("ByteTensor", torch.uint8)
CharTensor = _make("CharTensor", torch.int8)
ShortTensor = _make("ShortTensor", torch.int16)
IntTensor = _make("IntTensor", torch.int32)
LongTensor = _make("LongTensor", torch.int64)
BoolTensor = _make("BoolTensor", torch.bool)
