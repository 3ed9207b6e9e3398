"""Latency at the median and the 99th percentile, where a synchronizing
call waits for the daemon: `.item()` of one element, and one client
iteration of a few small ops and a synchronize, against the same on CPU
eager. Samples of both sides alternate in blocks, so both see the same
machine."""

import time

BLOCK = 100


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
    return rows


SECTIONS = [latency_percentiles]
