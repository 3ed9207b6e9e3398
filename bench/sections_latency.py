"""Latency at the median and the 99th percentile, where a synchronizing
call waits for the daemon: `.item()` of one element, and one client
iteration of a few small ops and a synchronize, against the same on CPU
eager. Samples of both sides alternate in blocks, so both see the same
machine. And the first matrix product after the process idled (a data
loader's gap, a request arriving): on a 2-vCPU VM, libgomp's spinning
workers made it cost milliseconds (docs/ARCHITECTURE.md, "The cost of one
op")."""

import statistics
import time

BLOCK = 100
IDLE_SECONDS = 0.02
IDLE_SAMPLES = 15


def _percentiles(samples):
    samples = sorted(samples)
    return (samples[len(samples) // 2], samples[int(len(samples) * 0.99)])


def _sample(fn, count):
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def _compare(baseline, device, blocks):
    for fn in (baseline, device):
        _sample(fn, BLOCK)  # warm-up
    baseline_samples, device_samples = [], []
    for _ in range(blocks):
        baseline_samples += _sample(baseline, BLOCK)
        device_samples += _sample(device, BLOCK)
    return _percentiles(baseline_samples), _percentiles(device_samples)


def _after_idle(torch):
    """Median seconds of one addmm (the transformer's qkv projection: 256x64
    by 64x192, with bias) after IDLE_SECONDS of sleep, CPU eager and
    openreg (its launch and a synchronize), samples alternating."""
    generator = torch.Generator().manual_seed(0)
    cpu = [torch.randn(*shape, generator=generator)
           for shape in ((192,), (256, 64), (192, 64))]
    device = [t.to("openreg") for t in cpu]

    def cpu_product():
        torch.addmm(cpu[0], cpu[1], cpu[2].t())

    def device_product():
        torch.addmm(device[0], device[1], device[2].t())
        torch.openreg.synchronize()

    samples = {cpu_product: [], device_product: []}
    for fn in (cpu_product, device_product) * 2:
        fn()  # warm-up: the meta cache, the checked first launch
    for _ in range(IDLE_SAMPLES):
        for fn, times in samples.items():
            time.sleep(IDLE_SECONDS)
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return (statistics.median(samples[cpu_product]),
            statistics.median(samples[device_product]))


def latency_percentiles(torch, scale):
    blocks = max(2, int(30 * scale))
    cpu_scalar, cpu_vector = torch.randn(16), torch.randn(1024)
    scalar, vector = cpu_scalar.to("openreg"), cpu_vector.to("openreg")

    def cpu_iteration():
        for _ in range(4):
            torch.add(cpu_vector, cpu_vector)

    def device_iteration():
        for _ in range(4):
            torch.add(vector, vector)
        torch.openreg.synchronize()

    rows = []
    for name, baseline, device in [
            (".item()", lambda: cpu_scalar[3].item(),
             lambda: scalar[3].item()),
            ("iteration: 4 adds + synchronize", cpu_iteration,
             device_iteration)]:
        (base50, base99), (dev50, dev99) = _compare(baseline, device, blocks)
        rows.append((f"{name} p50", "CPU eager", base50, dev50))
        rows.append((f"{name} p99", "CPU eager", base99, dev99))
    rows.append((f"addmm after {IDLE_SECONDS * 1e3:.0f} ms idle, p50",
                 "CPU eager", *_after_idle(torch)))
    return rows


SECTIONS = [latency_percentiles]
