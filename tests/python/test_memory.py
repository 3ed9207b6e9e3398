"""Device memory lives in the daemon; capacity is enforced there."""

import os
import subprocess
import sys

import pytest
import torch
import torch_openreg.testing

from daemon_fixture import module_daemon, read_rss_bytes

GIB = 1024**3
DAEMON, setup_module, teardown_module = module_daemon(devices=2, memory_per_device="2GiB")


def test_one_gib_on_device_grows_daemon_memory_not_client_memory():
    torch.ones(1, device="openreg").item()  # attach first
    daemon_before = read_rss_bytes(DAEMON.pid)
    client_before = read_rss_bytes(os.getpid())
    big = torch.ones(256, 1024, 1024, device="openreg")  # 1 GiB of float32
    torch.openreg.synchronize()
    daemon_after = read_rss_bytes(DAEMON.pid)
    client_after = read_rss_bytes(os.getpid())
    assert daemon_after - daemon_before > 0.9 * GIB
    assert client_after - client_before < 0.1 * GIB
    assert big[-1, -1, -1].item() == 1.0
    del big
    torch.openreg.synchronize()


def test_out_of_memory_raises_and_recovers():
    with pytest.raises(torch.OutOfMemoryError) as caught:
        torch.empty(3 * GIB, dtype=torch.uint8, device="openreg")
    message = str(caught.value)
    assert "out of memory" in message.lower()
    assert str(3 * GIB) in message or "3.00 GiB" in message
    # Nothing sticky: normal allocations keep working.
    x = torch.ones(1024, device="openreg")
    assert x.sum().item() == 1024
    a = torch.empty(GIB, dtype=torch.uint8, device="openreg")
    del a
    b = torch.empty(GIB + GIB // 2, dtype=torch.uint8, device="openreg")
    del b


def test_memory_allocated_follows_allocations():
    device = torch.device("openreg:1")
    torch.openreg.empty_cache()
    daemon_before = torch.openreg.daemon_stats()["devices"][1]["allocated_bytes"]
    allocated_before = torch.openreg.memory_allocated(1)
    x = torch.empty(1024 * 1024, dtype=torch.uint8, device=device)
    assert torch.openreg.memory_allocated(1) - allocated_before == 1024 * 1024
    assert torch.openreg.memory_reserved(1) >= torch.openreg.memory_allocated(1)
    daemon_during = torch.openreg.daemon_stats()["devices"][1]["allocated_bytes"]
    assert daemon_during - daemon_before >= 1024 * 1024
    free, total = torch.openreg.mem_get_info(1)
    assert total - free >= 1024 * 1024
    del x
    assert torch.openreg.memory_allocated(1) == allocated_before
    # The block stays cached in this process until empty_cache().
    assert torch.openreg.memory_reserved(1) >= 1024 * 1024
    torch.openreg.empty_cache()
    torch.openreg.synchronize(1)
    assert torch.openreg.memory_reserved(1) == 0
    daemon_after = torch.openreg.daemon_stats()["devices"][1]["allocated_bytes"]
    assert daemon_after == daemon_before


def test_caching_allocator_reuses_blocks_without_asking_the_daemon():
    torch.openreg.empty_cache()
    x = torch.empty(256, 1024, device="openreg")  # 1 MiB: a 2 MiB segment
    address = x.data_ptr()
    stats = torch.openreg.memory_stats()
    segments = stats["segment.all.current"]
    del x
    y = torch.empty(256, 1024, device="openreg")
    assert y.data_ptr() == address  # same block, same stream
    small = [torch.empty(100, device="openreg") for _ in range(8)]
    assert torch.openreg.memory_stats()["segment.all.current"] == segments
    assert len({t.data_ptr() for t in small}) == 8
    del y, small


def test_split_blocks_merge_back_so_empty_cache_returns_everything():
    import gc
    import random
    gc.collect()  # tensors of earlier tests kept alive by reference cycles
    torch.openreg.empty_cache()
    assert torch.openreg.memory_allocated() == 0
    rng = random.Random(7)
    sizes = [rng.choice([100, 3000, 70_000, 900_000, 3_000_000, 12_000_000])
             for _ in range(60)]
    tensors = [torch.empty(size, dtype=torch.uint8, device="openreg")
               for size in sizes]
    addresses = {t.data_ptr() for t in tensors}
    assert len(addresses) == len(tensors)  # no block handed out twice
    reserved = torch.openreg.memory_reserved()
    assert reserved >= sum(sizes)
    rng.shuffle(tensors)
    while tensors:
        tensors.pop()
    assert torch.openreg.memory_allocated() == 0
    assert torch.openreg.memory_reserved() == reserved  # kept for reuse
    torch.openreg.empty_cache()
    assert torch.openreg.memory_reserved() == 0  # every split merged back
    assert torch.openreg.memory_stats()["segment.all.current"] == 0


def test_peak_stats_and_reset():
    torch.openreg.reset_peak_memory_stats()
    base = torch.openreg.memory_allocated()
    x = torch.empty(4 * 1024 * 1024, dtype=torch.uint8, device="openreg")
    del x
    assert torch.openreg.max_memory_allocated() >= base + 4 * 1024 * 1024
    torch.openreg.reset_peak_memory_stats()
    assert torch.openreg.max_memory_allocated() == torch.openreg.memory_allocated()
    assert torch.accelerator.memory_allocated(0) == torch.openreg.memory_allocated(0)


def test_per_process_memory_fraction_limits_reservations():
    torch.openreg.empty_cache()
    torch.openreg.set_per_process_memory_fraction(0.25, 1)  # 512 MiB of 2 GiB
    try:
        with pytest.raises(torch.OutOfMemoryError, match="limit"):
            torch.empty(600 * 1024 * 1024, dtype=torch.uint8, device="openreg:1")
        ok = torch.empty(400 * 1024 * 1024, dtype=torch.uint8, device="openreg:1")
        del ok
    finally:
        torch.openreg.set_per_process_memory_fraction(1.0, 1)
        torch.openreg.empty_cache()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))


def _run_on(daemon, code):
    result = subprocess.run([sys.executable, "-c", code], env=daemon.env(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_the_default_device_size_is_half_the_host_shared_by_the_devices():
    host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    granule = 256 * 1024**2
    expected = min(max(host // 2 // 2 // granule * granule, 2 * GIB),
                   16 * GIB)
    with torch_openreg.testing.Daemon(devices=2,
                                      memory_per_device="auto") as daemon:
        totals = _run_on(daemon, "import torch; print(*(torch.openreg."
                         "mem_get_info(d)[1] for d in range(2)))")
        # Reserved, not committed: a large device costs the host nothing
        # until it is touched.
        assert read_rss_bytes(daemon.pid) < GIB
    assert [int(total) for total in totals] == [expected, expected]


def test_a_tensor_of_more_than_2_to_the_31_elements_is_indexed_as_on_cpu():
    # PyTorch's test_index_put_accumulate_large_tensor: 64-bit indexing in
    # the daemon's kernels. A 3 GiB device, reserved: what is not touched
    # costs nothing.
    code = """
import torch
N = (1 << 31) + 5
a = torch.ones(N, dtype=torch.int8, device="openreg")
indices = torch.tensor([-2, 0, -2, -1, 0, -1, 1], device="openreg")
values = torch.tensor([6, 5, 6, 6, 5, 7, 11], dtype=torch.int8,
                      device="openreg")
a.index_put_((indices,), values, accumulate=True)
print(a[0].item(), a[1].item(), a[-1].item(), a[-2].item(), a[2].item(),
      a.numel())
"""
    with torch_openreg.testing.Daemon(devices=1,
                                      memory_per_device="3GiB") as daemon:
        values = _run_on(daemon, code)
    # CPU's answer for the same call (the values the PyTorch test asserts).
    assert [int(v) for v in values] == [11, 12, 14, 13, 1, (1 << 31) + 5]
