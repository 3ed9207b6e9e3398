"""Device memory lives in the daemon; capacity is enforced there."""

import os
import sys

import pytest
import torch

from daemon_fixture import Daemon, read_rss_bytes

GIB = 1024**3
DAEMON = None


def setup_module():
    global DAEMON
    DAEMON = Daemon(devices=2, memory_per_device="2GiB").start()
    os.environ["OPENREG_DAEMON_SOCKET"] = DAEMON.socket
    os.environ["OPENREG_AUTOSPAWN"] = "0"


def teardown_module():
    DAEMON.stop()


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
    stats_before = torch.openreg.daemon_stats()["devices"][1]["allocated_bytes"]
    x = torch.empty(1024 * 1024, dtype=torch.uint8, device=device)
    stats_during = torch.openreg.daemon_stats()["devices"][1]["allocated_bytes"]
    assert stats_during - stats_before >= 1024 * 1024
    free, total = torch.openreg.mem_get_info(1)
    assert total - free >= 1024 * 1024
    del x
    torch.openreg.synchronize(1)
    stats_after = torch.openreg.daemon_stats()["devices"][1]["allocated_bytes"]
    assert stats_after == stats_before


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
