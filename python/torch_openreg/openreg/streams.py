"""Streams and events of torch.openreg, shaped like torch.cuda's.

`Stream` subclasses PyTorch's generic `torch.Stream` and `Event` wraps a
`torch.Event`; both reach openreg's `DeviceGuardImpl`
(torch_backend/device_guard.cc) through the PrivateUse1 key: a stream is a
runtime stream slot (one daemon worker thread), device d's default stream is
slot d, and an event is a runtime event whose record, query and wait become
commands on the stream's ring. Current streams are per thread and per
device, as on CUDA, and live in the device guard (torch_openreg._C's
`_current_stream`/`_set_stream`, not torch.accelerator).

New streams come from per-device pools, one per priority, handed out round
robin as CUDA's are (`_C._pool_streams_per_priority` streams each; CUDA
keeps 32). Priorities range from 0 (default, least) to -3 (greatest);
others are clamped. The daemon admits kernels of higher-priority streams
first when a device's execution slots are all busy (docs/ARCHITECTURE.md).
"""

import torch

from torch_openreg import _C

__all__ = [
    "Event",
    "ExternalStream",
    "Stream",
    "StreamContext",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
]

def _device_index(device):
    # Imported here: the package __init__ imports this module.
    from torch_openreg.openreg import _index
    return _index(device)


def _check_openreg(stream):
    if stream.device.type != "openreg":
        raise ValueError(f"expected an openreg stream, got {stream}")


class Stream(torch.Stream):
    """An openreg stream: an in-order queue of device work, independent of
    the device's other streams. Use it as a context manager (or with
    :func:`stream`) to enqueue the block's ops on it.

    Args:
        device (torch.device, str or int, optional): the stream's device;
            the current device when None.
        priority (int, optional): lower is higher priority, within
            :meth:`priority_range` (0 to -3; others are clamped). When a
            device's execution slots are all busy, kernels of
            higher-priority streams start first.

    Like ``torch.cuda.Stream``, a new stream comes from the device's pool
    for its priority: after enough streams, earlier ones are reused.
    """

    def __new__(cls, device=None, priority=0, **kwargs):
        if "stream_id" in kwargs:
            return super().__new__(cls, priority=priority, **kwargs)
        index = _device_index(device)
        return super().__new__(cls, device=torch.device("openreg", index),
                               priority=priority)

    @property
    def priority(self):
        """The stream's priority (0 for default streams)."""
        return _C._stream_priority(self.stream_id, self.device_index)

    @staticmethod
    def priority_range():
        """(least, greatest) priority, as ``torch.cuda.Stream.priority_range``
        returns it: ``(0, -3)``."""
        return tuple(_C._stream_priority_range)

    def wait_event(self, event):
        """Makes all future work on this stream wait for `event`; returns
        at once."""
        event.wait(self)

    def wait_stream(self, stream):
        """Makes all future work on this stream wait for the work queued on
        `stream` so far; returns at once."""
        self.wait_event(stream.record_event())

    def record_event(self, event=None):
        """Records `event` (a new :class:`Event` when None) on this stream
        and returns it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def query(self):
        """True when all work queued on this stream has finished."""
        return super().query()

    def synchronize(self):
        """Waits for all work queued on this stream. Errors of its kernels
        are raised here."""
        super().synchronize()

    def __eq__(self, other):
        if isinstance(other, torch.Stream):
            return super().__eq__(other)
        return False

    def __hash__(self):
        return hash((self.stream_id, self.device))

    def __repr__(self):
        return (f"<torch.openreg.Stream device={self.device} "
                f"stream_id={self.stream_id}>")


class ExternalStream(Stream):
    """Wraps an openreg stream created outside torch_openreg's pools, as
    torch.cuda.ExternalStream wraps a cudaStream_t: `stream_ptr` is the
    runtime's stream id (``openreg::StreamCreate`` in a C++ extension, or
    a Stream's ``stream_id``). It must be a live stream of this process's
    session; its device is asked of the runtime, and `device`, when
    given, must match it."""

    def __new__(cls, stream_ptr, device=None, **kwargs):
        if not isinstance(stream_ptr, int) or isinstance(stream_ptr, bool):
            raise TypeError("ExternalStream: stream_ptr must be the int id "
                            f"of an openreg stream, got "
                            f"{type(stream_ptr).__name__}")
        index = _C._stream_device(stream_ptr)
        if device is not None and _device_index(device) != index:
            raise ValueError(
                f"ExternalStream: stream {stream_ptr} is on openreg:{index}, "
                f"not on {device}")
        # The device type's enum value, as the runtime's streams carry it.
        device_type = _C._default_stream(index)[2]
        return super().__new__(cls, stream_id=stream_ptr, device_index=index,
                               device_type=device_type)

    def __repr__(self):
        return (f"<torch.openreg.ExternalStream device={self.device} "
                f"stream_id={self.stream_id}>")


class Event:
    """An openreg event: a marker in a stream, used to wait for the work
    before it, to order streams, and to time device work.

    It wraps a generic ``torch.Event`` (available as :attr:`torch_event`),
    created on its first :meth:`record` on the recording stream's device.
    (It does not subclass ``torch.Event``: in torch 2.13
    ``torch.Event.elapsed_time`` accepts only exact ``torch.Event`` objects.)

    Args:
        enable_timing (bool): record device timestamps, needed for
            :meth:`elapsed_time` (default False).
        blocking (bool): accepted for CUDA compatibility; waits always
            block the calling thread.
    """

    def __init__(self, enable_timing=False, blocking=False,
                 interprocess=False):
        if interprocess and enable_timing:
            raise ValueError(
                "openreg: an interprocess event cannot record timestamps; "
                "create it with enable_timing=False (as CUDA requires)")
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.interprocess = interprocess
        # Interprocess events are runtime events of their own (created on
        # the first record or ipc_handle(), or opened from a handle):
        # torch.Event has no interprocess flag.
        self._ipc_event = None
        self.torch_event = None if interprocess else torch.Event(
            device="openreg", enable_timing=enable_timing, blocking=blocking)
        self._recorded = False

    @classmethod
    def from_ipc_handle(cls, device, handle):
        """Opens the event another process shared with :meth:`ipc_handle`
        (same user, same daemon). Waits on it (:meth:`wait`,
        :meth:`query`, :meth:`synchronize`) wait for that process's latest
        record at the time of the call; it cannot be recorded here."""
        event = cls(interprocess=True)
        event._ipc_event = _C._InterprocessEvent.open(
            handle, _device_index(device))
        event._recorded = True
        return event

    def ipc_handle(self):
        """The 64-byte handle another process opens with
        :meth:`from_ipc_handle` (interprocess events only). Creates the
        event on the current device if it was never recorded."""
        if not self.interprocess:
            raise RuntimeError(
                "openreg: ipc_handle() needs an event created with "
                "interprocess=True")
        return self._ipc_for(None).handle()

    def _ipc_for(self, device_index):
        if self._ipc_event is None:
            if device_index is None:
                device_index = _C._current_device()
            self._ipc_event = _C._InterprocessEvent(device_index)
        return self._ipc_event

    @property
    def device(self):
        """The device of the stream that recorded the event (``openreg``
        without an index before the first record)."""
        if self.interprocess:
            if self._ipc_event is None:
                return torch.device("openreg")
            return torch.device("openreg", self._ipc_event.device)
        return self.torch_event.device

    def record(self, stream=None):
        """Records the event on `stream` (default: the current stream). All
        records of one event must be on the same device, as on CUDA."""
        if stream is None:
            stream = current_stream()
        _check_openreg(stream)
        if self._recorded and stream.device != self.device:
            raise RuntimeError(
                f"Event device {self.device} does not match recording "
                f"stream's device {stream.device}.")
        if self.interprocess:
            self._ipc_for(stream.device_index).record(stream.stream_id)
        else:
            self.torch_event.record(stream)
        self._recorded = True

    def wait(self, stream=None):
        """Makes future work on `stream` (default: the current stream) wait
        for this event; returns at once. Streams of any device may wait."""
        if stream is None:
            stream = current_stream()
        _check_openreg(stream)
        if self.interprocess:
            if self._ipc_event is not None:
                self._ipc_event.wait(stream.stream_id)
            return
        self.torch_event.wait(stream)

    def query(self):
        """True when the work captured by the event has finished (and when
        the event was never recorded)."""
        if self.interprocess:
            return self._ipc_event is None or self._ipc_event.query()
        return self.torch_event.query()

    def synchronize(self):
        """Waits for the work captured by the event."""
        if self.interprocess:
            if self._ipc_event is not None:
                self._ipc_event.synchronize()
            return
        self.torch_event.synchronize()

    def elapsed_time(self, end_event):
        """Milliseconds between this event and `end_event`. Both must be
        created with ``enable_timing=True``, recorded on the same device,
        and `end_event` must have completed."""
        end = getattr(end_event, "torch_event", end_event)
        if not (self.enable_timing
                and getattr(end_event, "enable_timing", True)):
            raise RuntimeError("Both events must be created with argument "
                               "'enable_timing=True'.")
        if not (self._recorded and getattr(end_event, "_recorded", True)):
            raise RuntimeError("Both events must be recorded before "
                               "calculating elapsed time.")
        if self.device != end.device:
            raise RuntimeError(
                "Both events must be recorded on the same device, got "
                f"{self.device} and {end.device}.")
        return self.torch_event.elapsed_time(end)

    def __repr__(self):
        state = "recorded" if self._recorded else "uninitialized"
        return f"<torch.openreg.Event {state} device={self.device}>"


def _from_args(args):
    stream_id, device_index, device_type = args
    return Stream(stream_id=stream_id, device_index=device_index,
                  device_type=device_type)


def current_stream(device=None):
    """The current :class:`Stream` of this thread on `device` (default: the
    current device); the device's default stream unless one was set."""
    return _from_args(_C._current_stream(_device_index(device)))


def default_stream(device=None):
    """The default :class:`Stream` of `device` (default: the current
    device): the stream ops use when no other one is set. Runtime stream
    slot d is device d's default stream."""
    return _from_args(_C._default_stream(_device_index(device)))


def set_stream(stream):
    """Makes `stream` the current stream of its device for this thread, and
    its device the current device (like torch.cuda.set_stream). No-op for
    None. Prefer the :func:`stream` context manager."""
    if stream is None:
        return
    _check_openreg(stream)
    _C._set_stream(stream.stream_id, stream.device_index)


class StreamContext:
    """Context manager that makes `stream` current (and its device, inside
    the block) and restores the previous streams and device on exit. A
    no-op for None.

    Args:
        stream (Stream or torch.Stream, optional): the selected stream.
    """

    def __init__(self, stream):
        self.stream = stream
        self.src_prev_stream = None
        self.dst_prev_stream = None

    def __enter__(self):
        if self.stream is None:
            return
        _check_openreg(self.stream)
        self.src_prev_stream = current_stream()
        if self.src_prev_stream.device != self.stream.device:
            self.dst_prev_stream = current_stream(self.stream.device)
        set_stream(self.stream)

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        if self.dst_prev_stream is not None:
            set_stream(self.dst_prev_stream)
        set_stream(self.src_prev_stream)  # also restores the device
        return False


def stream(stream):
    """Context manager selecting `stream` (a :class:`StreamContext`)."""
    return StreamContext(stream)
