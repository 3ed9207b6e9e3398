"""openreg tensors across processes (torch.multiprocessing): IPC handles
carry them with no copy; the daemon keeps shared memory alive while any
process holds it. Children use the spawn context and this test's daemon."""

import gc
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.multiprocessing as mp

from daemon_fixture import process_daemon, python_env

# Spawned children import this module too (before multiprocessing marks
# them as children): the variable they inherit makes them use the parent's
# daemon, whose socket is in their environment, instead of starting one.
_OWNER = "OPENREG_TEST_IPC_DAEMON_OWNER"
if _OWNER not in os.environ:
    os.environ[_OWNER] = str(os.getpid())
    process_daemon(devices=2)
CTX = mp.get_context("spawn")
TIMEOUT = 120


def _add_and_report(queue, results):
    x = queue.get()
    x.add_(100)
    torch.openreg.synchronize()
    results.put((x.cpu().tolist(), str(x.device), x.storage_offset()))
    queue.get()  # hold the tensor until the parent has looked


def _read_after_signal(queue, results):
    x = queue.get()
    results.put("received")
    queue.get()  # the parent wrote meanwhile
    results.put(x.cpu().tolist())


def _produce(count, queue, done):
    for i in range(count):
        queue.put(torch.full((256,), float(i), device="openreg"))
    done.get()


def _send_and_exit(queue):
    queue.put(torch.arange(8.0, device="openreg:1") * 3)


def _receive_and_crash(queue, results):
    x = queue.get()
    results.put(x.sum().item())
    results.close()
    results.join_thread()  # the value is sent before the crash
    os.kill(os.getpid(), signal.SIGKILL)


def _hold(queue, results):
    x = queue.get()
    results.put(x.data_ptr())
    queue.get()  # release on request
    del x
    gc.collect()
    results.put("released")
    queue.get()


def _import_then_die_busy(count, queue, results):
    tensors = [queue.get() for _ in range(count)]
    # A long kernel of this process's own, still running when it dies: its
    # session's teardown waits for it.
    a = torch.randn(4500, 4500, device="openreg")
    b = a @ a  # the signature's first launch is checked: synchronous
    b = a @ a  # noqa: F841 - asynchronous, runs while the process exits
    time.sleep(0.3)  # the kernel has started
    results.put(sum(t.numel() for t in tensors))
    results.close()
    results.join_thread()
    os._exit(0)  # no cleanup: the daemon learns of the exit by the hang-up


def _hogwild_worker(rank, weight, done):
    # Each process updates its own row of the one shared parameter.
    with torch.no_grad():
        for _ in range(5):
            weight[rank].add_(rank + 1)
    torch.openreg.synchronize()
    done.put(rank)


def _use_device_after_fork(results):
    results.put(torch.openreg._is_in_bad_fork())
    try:
        torch.ones(2, device="openreg").sum().item()
        results.put("no error")
    except RuntimeError as error:
        results.put(str(error))


def _wait_then_read(queue, results):
    x, event = queue.get()
    assert event.interprocess and event.device == x.device
    results.put("ready")
    assert queue.get() == "go"
    # This stream waits on the device for the parent's record (the host
    # does not block); the read after it sees the parent's delayed write.
    event.wait()
    copy = x.clone()
    results.put(copy.cpu().tolist())
    # The other direction: the parent waits for this process's work.
    x.add_(1)
    done = torch.openreg.Event(interprocess=True)
    done.record()
    results.put(done)
    queue.get()  # keep the event alive until the parent has waited


def _tensor_round_trip(queue, results):
    x = queue.get()
    results.put(x.sum().item())


def _start(target, *args, context=CTX):
    process = context.Process(target=target, args=args)
    process.start()
    return process


def _finish(process):
    process.join(TIMEOUT)
    if process.is_alive():
        process.kill()
        process.join()
    return process.exitcode


def test_a_queued_view_is_the_same_memory_in_the_receiver():
    queue, results = CTX.Queue(), CTX.Queue()
    child = _start(_add_and_report, queue, results)
    base = torch.arange(10.0, device="openreg")
    queue.put(base[2:6])
    values, device, offset = results.get(timeout=TIMEOUT)
    assert (values, device, offset) == ([102.0, 103.0, 104.0, 105.0],
                                        "openreg:0", 2)
    # The child wrote into this process's tensor: shared, not copied.
    assert base.cpu().tolist() == [0, 1, 102, 103, 104, 105, 6, 7, 8, 9]
    queue.put(None)
    assert _finish(child) == 0


def test_the_receiver_sees_the_senders_later_writes():
    queue, results = CTX.Queue(), CTX.Queue()
    child = _start(_read_after_signal, queue, results)
    x = torch.zeros(4, device="openreg")
    queue.put(x)
    assert results.get(timeout=TIMEOUT) == "received"
    x.fill_(7)
    torch.openreg.synchronize()
    queue.put("look")
    assert results.get(timeout=TIMEOUT) == [7.0] * 4
    assert _finish(child) == 0


def _device_bytes():
    return sum(d["allocated_bytes"]
               for d in torch.openreg.daemon_stats()["devices"])


def test_a_thousand_tensors_through_a_queue_leak_nothing():
    torch.openreg.synchronize()
    baseline = _device_bytes()
    queue, done = CTX.Queue(), CTX.Queue()
    child = _start(_produce, 1000, queue, done)
    total = 0.0
    for _ in range(1000):
        tensor = queue.get(timeout=TIMEOUT)
        total += tensor[0].item()
        del tensor
    done.put(None)
    assert _finish(child) == 0
    assert total == sum(range(1000))
    gc.collect()
    assert [shared for shared in torch.openreg.daemon_stats()["shared"]
            if shared["exporter_pid"] == child.pid] == []
    assert _device_bytes() == baseline


def _kernels_executed(device=0):
    return torch.openreg.daemon_stats()["devices"][device]["kernels_executed"]


def test_a_dead_importers_memory_comes_back_at_its_hang_up():
    # The importer holds the only references to 200 tensors the sender has
    # dropped. They come back as soon as the daemon sees it die, while its
    # own last kernel still runs, not once that kernel is done.
    count = 200
    queue, results = CTX.Queue(), CTX.Queue()
    child = _start(_import_then_die_busy, count, queue, results)
    # Kept until the importer has them: a block dropped before it is opened
    # could be reused (as on CUDA, the sender keeps what it shares alive).
    sent = [torch.ones(1024, 256, device="openreg") for _ in range(count)]
    for tensor in sent:
        queue.put(tensor)  # 1 MiB each
    assert results.get(timeout=TIMEOUT) == count * 1024 * 256
    del sent, tensor
    torch.openreg.synchronize()
    torch.openreg.empty_cache()
    baseline = _device_bytes()
    # Every kernel but the importer's last one has run: that one counts
    # when it ends.
    kernels_before_its_last = _kernels_executed()
    assert _finish(child) == 0
    for _ in range(5000):
        # The sender's shared blocks go back once no import holds them.
        torch.openreg.ipc_collect()
        torch.openreg.empty_cache()
        if _device_bytes() <= baseline - count * (1 << 20):
            break
    else:
        pytest.fail("the dead importer's memory never came back")
    assert _kernels_executed() == kernels_before_its_last, (
        "the memory came back only once the dead importer's last kernel "
        "had ended")
    # The observable is sound: that kernel does end, and counts.
    for _ in range(600):
        if _kernels_executed() > kernels_before_its_last:
            break
        time.sleep(0.1)
    assert _kernels_executed() == kernels_before_its_last + 1


def test_the_data_outlives_the_process_that_sent_it():
    queue = CTX.Queue()
    child = _start(_send_and_exit, queue)
    x = queue.get(timeout=TIMEOUT)
    assert _finish(child) == 0  # the sender is gone
    assert x.device == torch.device("openreg:1")
    assert x.cpu().tolist() == [0, 3, 6, 9, 12, 15, 18, 21]
    x.add_(1)  # still ours to use
    assert x.sum().item() == 92.0


def test_a_crashed_receiver_leaves_the_senders_memory_intact():
    queue, results = CTX.Queue(), CTX.Queue()
    child = _start(_receive_and_crash, queue, results)
    x = torch.ones(64, device="openreg")
    queue.put(x)
    assert results.get(timeout=TIMEOUT) == 64.0
    assert _finish(child) == -signal.SIGKILL
    assert x.sum().item() == 64.0
    x.mul_(2)
    assert x.sum().item() == 128.0


def test_a_shared_block_is_not_reused_while_a_receiver_holds_it():
    queue, results = CTX.Queue(), CTX.Queue()
    child = _start(_hold, queue, results)
    x = torch.full((1024,), 5.0, device="openreg")
    ptr = x.data_ptr()
    queue.put(x)
    assert results.get(timeout=TIMEOUT) == ptr
    del x
    gc.collect()
    y = torch.zeros(1024, device="openreg")  # would reuse x's block
    assert y.data_ptr() != ptr
    assert torch.openreg.ipc_collect() == 1  # the receiver holds it
    queue.put("release")
    assert results.get(timeout=TIMEOUT) == "released"
    assert torch.openreg.ipc_collect() == 0
    queue.put(None)
    assert _finish(child) == 0


def test_parameters_keep_requires_grad_and_non_leaves_are_refused():
    queue = CTX.SimpleQueue()
    weight = torch.nn.Parameter(torch.ones(3, device="openreg"))
    queue.put(weight)
    received = queue.get()  # same process: opens its own handle's storage
    assert isinstance(received, torch.nn.Parameter)
    assert received.requires_grad
    with pytest.raises(RuntimeError, match="Cowardly refusing"):
        queue.put(weight * 2)


def test_cpu_tensors_keep_pytorchs_own_sharing():
    queue, results = CTX.Queue(), CTX.Queue()
    child = _start(_add_and_report, queue, results)
    x = torch.zeros(4)
    queue.put(x)
    values, device, _ = results.get(timeout=TIMEOUT)
    assert (values, device) == ([100.0] * 4, "cpu")
    assert x.tolist() == [100.0] * 4  # CPU shared memory, PyTorch's way
    queue.put(None)
    assert _finish(child) == 0


def test_hogwild_processes_update_one_shared_model():
    model = torch.nn.Linear(3, 4, bias=False).to("openreg")
    torch.nn.init.zeros_(model.weight)
    model.share_memory()
    done = CTX.Queue()
    workers = [_start(_hogwild_worker, rank, model.weight, done)
               for rank in range(4)]
    assert sorted(done.get(timeout=TIMEOUT) for _ in workers) == [0, 1, 2, 3]
    assert [_finish(worker) for worker in workers] == [0, 0, 0, 0]
    assert model.weight.cpu().tolist() == [[5.0 * (rank + 1)] * 3
                                           for rank in range(4)]


def test_a_forked_child_gets_a_clear_error_and_the_parent_is_untouched():
    x = torch.ones(2, device="openreg")  # the parent has a session
    assert not torch.openreg._is_in_bad_fork()
    fork = mp.get_context("fork")
    results = fork.Queue()
    child = fork.Process(target=_use_device_after_fork, args=(results,))
    child.start()
    assert results.get(timeout=TIMEOUT) is True
    message = results.get(timeout=TIMEOUT)
    # CUDA's sentence first (scripts match it), then openreg's detail.
    assert message.startswith(
        "Cannot re-initialize OpenReg in forked subprocess. To use OpenReg "
        "with multiprocessing, you must use the 'spawn' start method")
    assert "start children with 'spawn'" in message
    assert _finish(child) == 0
    assert (x + 1).cpu().tolist() == [2.0, 2.0]


def test_two_processes_order_work_through_an_interprocess_event():
    from torch_openreg.openreg import faults

    queue, results = CTX.Queue(), CTX.Queue()
    child = _start(_wait_then_read, queue, results)
    x = torch.zeros(4, device="openreg")
    event = torch.openreg.Event(interprocess=True)
    queue.put((x, event))  # an event travels by its IPC handle
    assert results.get(timeout=TIMEOUT) == "ready"
    # The parent's next fill is held on the device for 2 s; the event is
    # recorded after it and nothing here waits for it. (The same fill runs
    # once first: an op signature's first launch is checked synchronously.)
    torch.empty(4, device="openreg").fill_(7)
    faults.arm(faults.hang(seconds=2), op="aten::fill_")
    x.fill_(7)
    event.record()
    queue.put("go")
    assert results.get(timeout=TIMEOUT) == [7.0] * 4
    done = results.get(timeout=TIMEOUT)
    assert isinstance(done, torch.openreg.Event)
    done.synchronize()  # the child's add_ has run
    assert x.cpu().tolist() == [8.0] * 4
    queue.put(None)
    assert _finish(child) == 0
    faults.disarm()


def test_events_that_are_not_interprocess_cannot_be_shared():
    with pytest.raises(ValueError, match="enable_timing=False"):
        torch.openreg.Event(enable_timing=True, interprocess=True)
    with pytest.raises(RuntimeError, match="interprocess=True"):
        CTX.SimpleQueue().put(torch.openreg.Event())
    event = torch.openreg.Event(interprocess=True)
    event.record()
    queue = CTX.SimpleQueue()
    queue.put(event)
    assert queue.get() is event  # its own handle: the same event
    with pytest.raises(ValueError, match="64 bytes"):
        torch.openreg.Event.from_ipc_handle(0, b"short")


def test_the_forkserver_context_carries_openreg_tensors():
    forkserver = mp.get_context("forkserver")
    queue, results = forkserver.Queue(), forkserver.Queue()
    child = _start(_tensor_round_trip, queue, results, context=forkserver)
    x = torch.arange(6.0, device="openreg:1")
    queue.put(x[1:4])
    assert results.get(timeout=TIMEOUT) == 6.0
    assert _finish(child) == 0


def test_the_ipc_pipeline_example_sums_every_batch():
    example = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           os.pardir, os.pardir, "examples", "ipc_pipeline.py")
    run = subprocess.run([sys.executable, example, "--batches", "40"],
                         env=python_env(), capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "OK" in run.stdout


class _Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        x = torch.tensor([float(index)])
        return x, x * x


def test_a_dataloader_with_workers_feeds_training_on_openreg():
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(
        _Squares(), batch_size=16, num_workers=2,
        multiprocessing_context="spawn")
    model = torch.nn.Linear(1, 1).to("openreg")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-5)
    seen = 0
    for x, y in loader:
        x, y = x.to("openreg"), y.to("openreg")
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen += len(x)
    assert seen == 64
    assert torch.isfinite(model.weight).all().item()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
