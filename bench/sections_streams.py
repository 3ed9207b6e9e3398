"""Stream and device concurrency: the same two independent workloads run
back to back on one stream (the baseline) and on two streams of one device,
then on two devices. A ratio below 1.0 means the overlap helps.

What can overlap depends on threads, not only on streams: each daemon
kernel is an ATen CPU kernel using the daemon's intra-op threads (by default
one per host core), and a device admits as many kernels at once as it has
execution slots (multi_processor_count, also the host's cores). A large
matmul already keeps every core busy, so a second stream only shares them;
kernels that use one thread (a 1-D cumsum is sequential in ATen) leave
cores idle that another stream can use. Kernels must also be long compared
with the client's launch cost (tens of microseconds), or the one Python
thread that submits both workloads is the bottleneck.
"""

from timing import compare, single_call


def _matmuls(torch, x, count):
    for _ in range(count):
        x = torch.mm(x, x)
    return x


def _cumsums(torch, x, count):
    for _ in range(count):
        x = torch.cumsum(x, 0)
    return x


def _one_vs_two(torch, name, work, inputs, repeats, streams_of):
    """Rows for `work` on inputs[0] and inputs[1]: both on the first stream
    of streams_of, then each on its own stream."""
    first, second = streams_of

    def one_stream():
        with torch.openreg.stream(first):
            work(inputs[0])
            work(inputs[1])

    def two_streams():
        with torch.openreg.stream(first):
            work(inputs[0])
        with torch.openreg.stream(second):
            work(inputs[1])

    def sync():
        for stream in (first, second):
            stream.synchronize()

    return (name, "one stream") + compare(
        one_stream, two_streams, repeats, measure=single_call,
        baseline_sync=sync, device_sync=sync)


def stream_overlap(torch, scale):
    repeats = max(1, int(2 * scale))
    rows = []
    # Matmuls of a few ms each (intra-op parallel: they use every core).
    count = 8
    size = 384
    a = torch.openreg.Stream()
    b = torch.openreg.Stream()
    scaled = 1.0 / size
    matmul_inputs = [torch.full((size, size), scaled, device="openreg"),
                     torch.full((size, size), scaled, device="openreg")]
    torch.openreg.synchronize()
    rows.append(_one_vs_two(
        torch, f"2 x {count} matmuls {size}: two streams",
        lambda x, count=count: _matmuls(torch, x, count), matmul_inputs,
        repeats, (a, b)))
    # Single-threaded kernels of a few ms each.
    count = 8
    elements = 1 << 20
    vectors = [torch.rand(elements).to("openreg"),
               torch.rand(elements).to("openreg")]
    torch.openreg.synchronize()
    rows.append(_one_vs_two(
        torch, f"2 x {count} cumsum (1M): two streams",
        lambda x, count=count: _cumsums(torch, x, count), vectors, repeats,
        (a, b)))
    # Two devices: the second workload on device 1's stream.
    if torch.openreg.device_count() >= 2:
        c = torch.openreg.Stream(1)
        device_inputs = [matmul_inputs[0],
                         matmul_inputs[1].to("openreg:1")]
        torch.openreg.synchronize(0)
        torch.openreg.synchronize(1)

        def on_its_device(x):
            with torch.openreg.device(x.device):
                return _matmuls(torch, x, 8)

        def one_device():
            on_its_device(matmul_inputs[0])
            on_its_device(matmul_inputs[1])

        def two_devices():
            with torch.openreg.stream(a):
                on_its_device(device_inputs[0])
            with torch.openreg.stream(c):
                on_its_device(device_inputs[1])

        def sync_both():
            a.synchronize()
            c.synchronize()

        rows.append((f"2 x 8 matmuls {size}: two devices", "one device") +
                    compare(one_device, two_devices, repeats,
                            measure=single_call,
                            baseline_sync=lambda: torch.openreg.synchronize(0),
                            device_sync=sync_both))
    return rows


SECTIONS = [stream_overlap]
