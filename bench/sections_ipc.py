"""Device tensors across processes (torch.multiprocessing, IPC handles):
receiving a 64 MiB openreg tensor through a Queue and reading one element
of it, against copying 64 MiB on the host (the cost of any transfer that
copied the data). The issue's bar: <= 0.1x. The receiving side includes
opening the handle (one control round trip) and the one-element copy.

Opening a handle, alone: IpcOpenMemHandle and IpcOpenEventHandle against
the plainest control round trip (torch.openreg.mem_get_info), in the
receiving process; the report gives the microseconds."""

import time

import torch.multiprocessing as mp

BYTES = 64 << 20


def _receiver(queue, times):
    import torch

    while True:
        start_event = queue.get()
        if start_event is None:
            return
        start = time.perf_counter()
        tensor = queue.get()
        value = tensor[12345].item()
        times.put((time.perf_counter() - start, value))
        del tensor


def queue_transfer(torch, scale):
    rounds = max(3, int(10 * scale))
    context = mp.get_context("spawn")
    queue, times = context.Queue(), context.Queue()
    receiver = context.Process(target=_receiver, args=(queue, times))
    receiver.start()
    try:
        source = torch.randn(BYTES // 4)
        host_target = torch.empty_like(source)
        copy = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            host_target.copy_(source)
            copy = min(copy, time.perf_counter() - start)
        device = source.to("openreg")
        best = float("inf")
        for _ in range(rounds):
            queue.put("go")
            queue.put(device)
            elapsed, value = times.get(timeout=120)
            assert value == source[12345].item()
            best = min(best, elapsed)
    finally:
        queue.put(None)
        receiver.join(60)
        if receiver.is_alive():
            receiver.kill()
    return [("64 MiB tensor through a Queue, read 1 element", "host memcpy",
             copy, best)]


def _open_handles(memory_handle, nbytes, event_handle, rounds, times):
    import statistics

    import torch
    from torch_openreg import _C

    def median_seconds(call):
        samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            call()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    torch.openreg.mem_get_info(0)  # attach first
    kept = []
    round_trip = median_seconds(lambda: torch.openreg.mem_get_info(0))
    memory = median_seconds(
        lambda: kept.append(_C._ipc_open(memory_handle, nbytes, 0)))
    event = median_seconds(lambda: kept.append(
        torch.openreg.Event.from_ipc_handle(0, event_handle)))
    times.put((round_trip, memory, event))


def handle_open(torch, scale):
    from torch_openreg import _C

    rounds = max(50, int(500 * scale))
    tensor = torch.empty(1 << 20, device="openreg")
    memory_handle = _C._ipc_share(tensor.data_ptr(), 0)
    event = torch.openreg.Event(interprocess=True)
    event.record()
    context = mp.get_context("spawn")
    times = context.Queue()
    opener = context.Process(
        target=_open_handles,
        args=(memory_handle, tensor.untyped_storage().nbytes(),
              event.ipc_handle(), rounds, times))
    opener.start()
    try:
        round_trip, memory, event_open = times.get(timeout=300)
    finally:
        opener.join(60)
        if opener.is_alive():
            opener.kill()
    baseline = "1 control round trip (mem_get_info)"
    return [
        (f"open an IPC memory handle ({memory * 1e6:.0f} us)", baseline,
         round_trip, memory),
        (f"open an IPC event handle ({event_open * 1e6:.0f} us)", baseline,
         round_trip, event_open),
    ]


SECTIONS = [queue_transfer, handle_open]
