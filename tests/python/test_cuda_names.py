"""The torch.cuda names torch.openreg adds for training and monitoring
scripts: each does what torch.cuda's does, or refuses with a clear error."""

import sys
import warnings

import pytest
import torch

from daemon_fixture import module_daemon

DAEMON, setup_module, teardown_module = module_daemon(devices=2)


def test_memory_summary_is_laid_out_like_cudas_with_this_processs_numbers():
    torch.openreg.empty_cache()
    x = torch.empty(3 * 1024 * 1024, dtype=torch.uint8, device="openreg:1")
    summary = torch.openreg.memory_summary(1)
    lines = summary.splitlines()
    assert "PyTorch openreg memory summary, device ID 1" in summary
    assert all(line.startswith("|") and line.endswith("|") for line in lines)
    allocated = [line for line in lines if "Allocated memory" in line][0]
    # 3 MiB current, in torch.cuda's units (KiB up to 768 MiB).
    assert allocated.split("|")[2].strip() == "3072 KiB"
    assert "from large pool" in summary and "from small pool" in summary
    # The 20 MiB segment's free rest cannot be returned: non-releasable.
    non_releasable = [line for line in lines
                      if "Non-releasable memory" in line][0]
    assert non_releasable.split("|")[2].strip() == "17408 KiB"
    short = torch.openreg.memory_summary(1, abbreviated=True)
    assert "from large pool" not in short
    assert len(short.splitlines()) < len(lines)
    del x


def test_reset_max_memory_allocated_and_cached_reset_the_peaks_with_cudas_warning():
    for reset in (torch.openreg.reset_max_memory_allocated,
                  torch.openreg.reset_max_memory_cached):
        x = torch.empty(2 * 1024 * 1024, dtype=torch.uint8, device="openreg")
        del x
        assert torch.openreg.max_memory_allocated() > torch.openreg.memory_allocated()
        with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
            reset()
        assert torch.openreg.max_memory_allocated() == torch.openreg.memory_allocated()


def test_host_memory_stats_count_pinned_allocations():
    before = torch.openreg.host_memory_stats()
    pinned = torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
    after = torch.openreg.host_memory_stats()
    assert list(after) == sorted(after)
    assert after["active_requests.current"] == before.get("active_requests.current", 0) + 1
    assert after["active_bytes.current"] >= before.get("active_bytes.current", 0) + (1 << 20)
    assert "num_host_alloc" in after and "host_alloc_time.avg" in after
    del pinned


def test_get_allocator_backend_is_native():
    assert torch.openreg.get_allocator_backend() == "native"


def test_every_pair_of_devices_can_access_each_other_and_copies_work():
    assert torch.openreg.can_device_access_peer(0, 1)
    assert torch.openreg.can_device_access_peer("openreg:1", 0)
    x = torch.arange(10, device="openreg:0")
    assert torch.equal(x.to("openreg:1").cpu(), torch.arange(10))
    with pytest.raises(ValueError, match="invalid peer device 5"):
        torch.openreg.can_device_access_peer(0, 5)
    with pytest.raises(ValueError, match="invalid device 7"):
        torch.openreg.can_device_access_peer(7, 0)


def test_device_of_makes_the_tensors_device_current():
    y = torch.ones(1, device="openreg:1")
    assert torch.openreg.current_device() == 0
    with torch.openreg.device_of(y):
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 0
    with torch.openreg.device_of(torch.ones(1)):  # a CPU tensor: no change
        assert torch.openreg.current_device() == 0


def test_get_arch_list_names_the_devices_capability():
    major, minor = torch.openreg.get_device_capability(0)
    assert torch.openreg.get_arch_list() == [f"openreg_{major}{minor}"]


def test_out_of_memory_error_is_torchs():
    assert torch.openreg.OutOfMemoryError is torch.OutOfMemoryError
    with pytest.raises(torch.openreg.OutOfMemoryError):
        torch.empty(1 << 45, dtype=torch.uint8, device="openreg")


def test_external_stream_wraps_a_stream_by_its_id():
    stream = torch.openreg.Stream(device=1)
    external = torch.openreg.ExternalStream(stream.stream_id)
    assert external.device == torch.device("openreg:1")
    assert external == stream
    with torch.openreg.stream(external):
        z = torch.full((4,), 3.0, device="openreg:1") * 2
    external.synchronize()
    assert z.tolist() == [6.0] * 4
    with pytest.raises(ValueError, match="is on openreg:1, not on openreg:0"):
        torch.openreg.ExternalStream(stream.stream_id, device="openreg:0")
    with pytest.raises(RuntimeError, match="stream"):
        torch.openreg.ExternalStream(12345)


def test_allocations_inside_use_mem_pool_come_from_the_pools_own_segments():
    pool = torch.openreg.MemPool()
    assert pool.id[0] == 0 and pool.id[1] > 0 and pool.use_count() == 1
    with torch.openreg.use_mem_pool(pool):
        assert pool.use_count() == 2
        inside = torch.empty(1000, device="openreg")
    outside = torch.empty(1000, device="openreg")
    assert pool.use_count() == 1

    def segment_of(tensor, segments):
        return [s for s in segments if s["address"] <= tensor.data_ptr()
                < s["address"] + s["total_size"]]

    assert segment_of(inside, pool.snapshot())
    assert not segment_of(outside, pool.snapshot())
    default = torch.openreg.memory_snapshot((0, 0))
    assert segment_of(outside, default) and not segment_of(inside, default)
    del inside, outside, pool


def test_a_pools_freed_blocks_are_reused_only_inside_it():
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        first = torch.empty(1000, device="openreg")
    address = first.data_ptr()
    del first
    outside = torch.empty(1000, device="openreg")
    assert outside.data_ptr() != address
    with torch.openreg.use_mem_pool(pool):
        again = torch.empty(1000, device="openreg")
    assert again.data_ptr() == address
    # empty_cache keeps a live pool's segments.
    del again
    torch.openreg.empty_cache()
    assert pool.snapshot()
    del outside, pool


def test_deleting_a_pool_returns_its_memory_to_the_daemon():
    import gc
    gc.collect()
    torch.openreg.empty_cache()
    reserved = torch.openreg.memory_reserved(1)
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool, device=1):
        x = torch.empty(8 * 1024 * 1024, dtype=torch.uint8, device="openreg:1")
    assert torch.openreg.memory_reserved(1) >= reserved + 8 * 1024 * 1024
    del x
    torch.openreg.empty_cache()
    assert torch.openreg.memory_reserved(1) >= reserved + 8 * 1024 * 1024
    del pool
    gc.collect()
    assert torch.openreg.memory_reserved(1) == reserved


def test_mem_pool_options_openreg_lacks_are_refused_saying_why():
    with pytest.raises(NotImplementedError, match="no pluggable allocators"):
        torch.openreg.MemPool(allocator=object())
    with pytest.raises(NotImplementedError, match="use_on_oom"):
        torch.openreg.MemPool(use_on_oom=True)
    with pytest.raises(TypeError, match="MemPool"):
        with torch.openreg.use_mem_pool(None):
            pass


def test_caching_allocator_alloc_and_delete_use_the_cache():
    torch.openreg.empty_cache()
    before = torch.openreg.memory_allocated(1)
    stream = torch.openreg.Stream(device=1)
    ptr = torch.openreg.caching_allocator_alloc(5000, device=1, stream=stream)
    assert ptr != 0
    assert torch.openreg.memory_allocated(1) == before + 5120
    # Usable device memory: a tensor over it reads back what was written.
    blocks = {b["address"] for s in torch.openreg.memory._snapshot()["segments"]
              for b in s["blocks"] if b["state"] == "active_allocated"}
    assert ptr in blocks
    torch.openreg.caching_allocator_delete(ptr)
    assert torch.openreg.memory_allocated(1) == before
    ptr = torch.openreg.caching_allocator_alloc(100)
    assert torch.openreg.memory_allocated(0) >= 512
    torch.openreg.caching_allocator_delete(ptr)
    with pytest.raises(ValueError, match="pass a stream of that device"):
        torch.openreg.caching_allocator_alloc(10, device=0, stream=stream)


def test_the_new_names_are_exported():
    for name in ("memory_summary", "memory_snapshot", "host_memory_stats",
                 "reset_max_memory_allocated", "reset_max_memory_cached",
                 "get_allocator_backend", "can_device_access_peer",
                 "device_of", "get_arch_list", "OutOfMemoryError",
                 "ExternalStream", "MemPool", "use_mem_pool",
                 "caching_allocator_alloc", "caching_allocator_delete",
                 "set_sync_debug_mode", "get_sync_debug_mode"):
        assert name in torch.openreg.__all__, name
        assert hasattr(torch.openreg, name), name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hasattr(torch.cuda, "memory_summary")  # the model followed


def test_utilization_is_the_daemons_share_of_the_last_second_busy():
    import time

    time.sleep(1.1)  # a window without work from the tests before
    assert torch.openreg.utilization(0) == 0
    a = torch.randn(256, 256, device="openreg:1")
    for _ in range(200):
        a = torch.tanh(a @ a)
    torch.openreg.synchronize(1)
    assert 0 < torch.openreg.utilization(1) <= 100
    assert torch.openreg.utilization(0) == 0
    with pytest.raises(ValueError, match="openreg device 5 does not exist"):
        torch.openreg.utilization(5)


def test_list_gpu_processes_names_this_process_with_its_memory():
    import os

    held = torch.empty(5 * 1024 * 1024, dtype=torch.uint8, device="openreg:1")
    torch.openreg.synchronize(1)
    text = torch.openreg.list_gpu_processes(1)
    lines = text.splitlines()
    assert lines[0] == "GPU:1"
    mine = [line for line in lines if f" {os.getpid()} uses " in line]
    assert len(mine) == 1, text
    assert float(mine[0].split()[3]) >= 5.0 and mine[0].endswith(
        "MB GPU memory")
    del held
    with pytest.raises(ValueError, match="openreg device 9 does not exist"):
        torch.openreg.list_gpu_processes(9)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
