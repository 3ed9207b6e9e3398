"""One rank of a test_distributed scenario: `python distributed_ranks.py
SCENARIO RANK WORLD PORT`. Uses the daemon in $OPENREG_DAEMON_SOCKET and
device rank % device_count; prints its results as one JSON line (prefix
RESULT) for the test to compare with its CPU reference."""

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

# (dtype, whether reductions are meaningful for it)
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int32, torch.int64, torch.uint8, torch.int8, torch.bool,
          torch.complex64]


def part(rank, dtype, count=6):
    """Rank `rank`'s input: distinct per rank, exact in every dtype."""
    values = torch.arange(count, dtype=torch.float64) + 1 + 3 * rank
    if dtype == torch.bool:
        return (values.long() % 2 == rank % 2)
    if dtype.is_complex:
        return torch.complex(values, -values).to(dtype)
    if dtype in (torch.uint8, torch.int8):
        return (values % 7).to(dtype)
    return (values / (2 if dtype.is_floating_point else 1)).to(dtype)


def reference_reduce(parts, op):
    """The documented order: ((p0 op p1) op p2) ..., in the dtype."""
    result = parts[0].clone()
    for value in parts[1:]:
        if op == "sum":
            result = result + value if result.dtype == torch.bool else result.add_(value)
        elif op == "product":
            result = result * value if result.dtype == torch.bool else result.mul_(value)
        elif op == "min":
            result = torch.minimum(result, value)
        elif op == "max":
            result = torch.maximum(result, value)
    return result


def ops_for(dtype):
    ops = ["sum", "product", "max", "min"]
    if dtype.is_complex:
        ops = ["sum"]  # c10d refuses the others on complex tensors
    return ops


def encode(tensor):
    tensor = tensor.detach().cpu()
    if tensor.dtype.is_complex:
        tensor = torch.view_as_real(tensor)
    if tensor.dtype in (torch.float16, torch.bfloat16):
        tensor = tensor.float()
    if tensor.dtype == torch.bool:
        tensor = tensor.long()
    return tensor.tolist()


REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT,
              "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}


def collectives(rank, world, device):
    out = {}
    for dtype in DTYPES:
        name = str(dtype).split(".")[1]
        mine = part(rank, dtype).to(device)
        for op in ops_for(dtype):
            tensor = mine.clone()
            dist.all_reduce(tensor, op=REDUCE_OPS[op])
            out[f"all_reduce/{op}/{name}"] = encode(tensor)
        if dtype.is_floating_point:
            tensor = mine.clone()
            dist.all_reduce(tensor, op=dist.ReduceOp.AVG)
            out[f"all_reduce/avg/{name}"] = encode(tensor)
        tensor = mine.clone()
        dist.broadcast(tensor, src=world - 1)
        out[f"broadcast/{name}"] = encode(tensor)
        tensor = mine.clone()
        dist.reduce(tensor, dst=0)
        if rank == 0:
            out[f"reduce/{name}"] = encode(tensor)
        gathered = torch.empty(world * 6, dtype=dtype, device=device)
        dist.all_gather_into_tensor(gathered, mine)
        out[f"all_gather_into_tensor/{name}"] = encode(gathered)
        parts = [torch.empty(6, dtype=dtype, device=device)
                 for _ in range(world)]
        dist.all_gather(parts, mine)
        out[f"all_gather/{name}"] = encode(torch.cat(parts))
        if dtype != torch.bool:
            big = torch.cat([part(rank + 10 * q, dtype) for q in range(world)]
                            ).to(device)
            scattered = torch.empty(6, dtype=dtype, device=device)
            dist.reduce_scatter_tensor(scattered, big)
            out[f"reduce_scatter_tensor/{name}"] = encode(scattered)
            listed = torch.empty(6, dtype=dtype, device=device)
            dist.reduce_scatter(listed, list(big.chunk(world)))
            out[f"reduce_scatter/{name}"] = encode(listed)
        sent = torch.cat([part(rank + 10 * q, dtype) for q in range(world)]
                         ).to(device)
        received = torch.empty_like(sent)
        dist.all_to_all_single(received, sent)
        out[f"all_to_all_single/{name}"] = encode(received)
        outputs = [torch.empty(6, dtype=dtype, device=device)
                   for _ in range(world)]
        dist.all_to_all(outputs, list(sent.chunk(world)))
        out[f"all_to_all/{name}"] = encode(torch.cat(outputs))
        gather_list = ([torch.empty(6, dtype=dtype, device=device)
                        for _ in range(world)] if rank == 0 else None)
        dist.gather(mine, gather_list, dst=0)
        if rank == 0:
            out[f"gather/{name}"] = encode(torch.cat(gather_list))
        received = torch.empty(6, dtype=dtype, device=device)
        dist.scatter(received, list(sent.chunk(world)) if rank == 0 else None,
                     src=0)
        out[f"scatter/{name}"] = encode(received)
    # PREMUL_SUM (FSDP's gradient scaling), a non-contiguous view, an empty
    # tensor, and an asynchronous call waited on through its Work.
    tensor = part(rank, torch.float32).to(device)
    dist.all_reduce(tensor, op=dist._make_nccl_premul_sum(0.5))
    out["all_reduce/premul_sum/float32"] = encode(tensor)
    matrix = (torch.arange(12, dtype=torch.float32) + rank).reshape(3, 4)
    view = matrix.to(device).t()
    dist.all_reduce(view)
    out["all_reduce/non_contiguous"] = encode(view)
    empty = torch.empty(0, device=device)
    dist.all_reduce(empty)
    out["all_reduce/empty"] = encode(empty)
    tensor = part(rank, torch.float32).to(device)
    work = dist.all_reduce(tensor, async_op=True)
    work.wait()
    out["all_reduce/async"] = encode(tensor * 2)
    future = dist.all_reduce(part(rank, torch.float32).to(device),
                             async_op=True).get_future()
    out["all_reduce/future"] = encode(future.wait()[0])
    dist.barrier()
    return out


def models(rank, world, device, steps=4, cases=None):
    """DDP: an MLP, tied weights, no_sync accumulation, unused parameters
    and a compression hook; each returns its parameters after `steps`."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    import model_zoo

    out = {}
    index = device.index
    for name in cases or model_zoo.CASES:
        model, optimizer, batches, options = model_zoo.build(name, steps)
        ddp = DDP(model.to(device), device_ids=[index], **options["ddp"])
        if options.get("fp16_hook"):
            from torch.distributed.algorithms.ddp_comm_hooks import (
                default_hooks)
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        optimizer = optimizer(ddp.parameters())
        for x, y in batches:
            x = x.chunk(world)[rank].to(device)
            y = y.chunk(world)[rank].to(device)
            optimizer.zero_grad()
            if options.get("accumulate"):
                halves = list(zip(x.chunk(2), y.chunk(2)))
                with ddp.no_sync():
                    model_zoo.loss(name, ddp, *halves[0]).div(2).backward()
                model_zoo.loss(name, ddp, *halves[1]).div(2).backward()
            else:
                model_zoo.loss(name, ddp, x, y).backward()
            optimizer.step()
        out[name] = [encode(p) for p in ddp.module.parameters()]
    return out


def fsdp(rank, world, device, steps=3):
    from torch.distributed.fsdp import fully_shard
    import model_zoo

    model, optimizer, batches, _ = model_zoo.build("transformer", steps)
    model = model.to(device)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    optimizer = optimizer(model.parameters())
    for x, y in batches:
        x = x.chunk(world)[rank].to(device)
        y = y.chunk(world)[rank].to(device)
        optimizer.zero_grad()
        model_zoo.loss("transformer", model, x, y).backward()
        optimizer.step()
    return {"transformer": [encode(p.full_tensor())
                            for p in model.parameters()]}


def dies(rank, world, device):
    """Rank 1 exits after the first collective; the others' next one must
    fail, naming it, and so must reading what was computed from its output
    (`.cpu()` synchronizes only the current stream, which waited for the
    collective): never stale values, even when the collective had already
    failed by the time the caller waited for it."""
    tensor = torch.ones(4, device=device)
    dist.all_reduce(tensor)
    torch.openreg.synchronize()
    if rank == 1:
        os._exit(0)
    import time
    start = time.monotonic()
    try:
        work = dist.all_reduce(tensor, async_op=True)
        time.sleep(0.5)  # it fails meanwhile: rank 1 ended
        work.wait()
        return {"error": None, "read": encode(tensor.mul(2))}
    except Exception as error:  # noqa: BLE001 - reported to the test
        return {"error": f"{type(error).__name__}: {error}",
                "seconds": time.monotonic() - start}


def stopped(rank, world, device):
    """Rank 1 stops itself (SIGSTOP) after the first collective, as a rank
    stuck in a debugger or a swapped-out host: it never ends, so only the
    group's timeout can fail the others' next collective, naming it. The
    test kills it by pid once the others reported."""
    import signal
    import time
    tensor = torch.ones(4, device=device)
    dist.all_reduce(tensor)
    torch.openreg.synchronize()
    if rank == 1:
        print("STOPPING", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(0)  # not reached: the test kills it
    start = time.monotonic()
    try:
        dist.all_reduce(tensor)
        torch.openreg.synchronize()
        return {"error": None}
    except Exception as error:  # noqa: BLE001 - reported to the test
        return {"error": f"{type(error).__name__}: {error}",
                "seconds": time.monotonic() - start}


def reinit(rank, world, device):
    """After a failed collective (the ranks disagree), every rank destroys
    the group and initializes a new one (on a new store, a file: a port
    chosen before the ranks started could be taken by then, and was once,
    by another test's connection), whose collectives work: the failure
    poisoned the communicator, not the process or its session."""
    tensor = torch.ones(4 - rank, device=device)
    try:
        dist.all_reduce(tensor)
        torch.openreg.synchronize()
        first_error = None
    except Exception as error:  # noqa: BLE001 - reported to the test
        first_error = f"{type(error).__name__}: {error}"
    dist.destroy_process_group()
    dist.init_process_group(
        init_method=f"file://{os.environ['OPENREG_TEST_STORE_FILE']}",
        rank=rank, world_size=world)
    tensor = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(tensor)
    return {"first_error": first_error, "value": encode(tensor)}


def flight_recorder(rank, world, device):
    """Five collectives of several kinds, then this rank's trace from the
    job's flight recorder traces (run with TORCH_FR_BUFFER_SIZE=3)."""
    import pickle
    import torch_openreg.distributed
    tensor = torch.ones(6, device=device)
    dist.all_reduce(tensor)
    dist.broadcast(tensor, src=0)
    gathered = torch.empty(6 * world, device=device)
    dist.all_gather_into_tensor(gathered, tensor)
    dist.all_reduce(torch.ones(4, dtype=torch.int64, device=device))
    # With device_ids the barrier is occl's (else the CPU backend's, gloo).
    dist.barrier(device_ids=[device.index])
    torch.openreg.synchronize()
    traces = torch_openreg.distributed.flight_recorder_traces()
    trace = pickle.loads(traces[rank])
    keys = ("record_id", "collective_seq_id", "profiling_name", "input_sizes",
            "output_sizes", "input_dtypes", "state", "process_group",
            "occl_state", "retired", "is_p2p")
    return {"ranks": sorted(traces), "version": trace["version"],
            "pg_config": trace["pg_config"],
            "entries": [[entry[key] for key in keys]
                        for entry in trace["entries"]]}


def mismatch(rank, world, device):
    tensor = torch.ones(4 - rank, device=device)
    try:
        dist.all_reduce(tensor)
        torch.openreg.synchronize()
        return {"error": None}
    except Exception as error:  # noqa: BLE001 - reported to the test
        return {"error": f"{type(error).__name__}: {error}"}


def tensor_parallel(rank, world, device):
    """A 2-D DeviceMesh (dp x tp): a tensor-parallel MLP on the tp
    dimension, and a sub-group all_reduce on the dp dimension."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel,
                                                   RowwiseParallel,
                                                   parallelize_module)
    import model_zoo

    mesh = init_device_mesh("openreg", (2, world // 2),
                            mesh_dim_names=("dp", "tp"))
    model = model_zoo.tensor_parallel_mlp().to(device)
    model = parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(),
                                                   "2": RowwiseParallel()})
    x = model_zoo.tensor_parallel_input().to(device)
    y = model(x)
    y.sum().backward()
    grads = [encode(p.grad.full_tensor()) for p in model.parameters()]
    mine = torch.tensor([float(rank)], device=device)
    dist.all_reduce(mine, group=mesh["dp"].get_group())
    return {"y": encode(y), "grads": grads, "dp_sum": encode(mine),
            "dp_ranks": dist.get_process_group_ranks(mesh["dp"].get_group())}


def checkpoint(rank, world, device):
    """torch.distributed.checkpoint: save an FSDP2-sharded model, load it
    into a fresh one (in $OPENREG_TEST_CHECKPOINT_DIR)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard
    import model_zoo

    def sharded():
        model = model_zoo.SmallTransformer().to(device)
        for block in model.blocks:
            fully_shard(block)
        return fully_shard(model)

    torch.manual_seed(0)
    saved = sharded()
    with torch.no_grad():
        for parameter in saved.parameters():
            parameter.add_(float(rank + 1))  # differs from a fresh init
    path = os.environ["OPENREG_TEST_CHECKPOINT_DIR"]
    dcp.save({"model": saved.state_dict()}, checkpoint_id=path)
    torch.manual_seed(1)
    loaded = sharded()
    state = {"model": loaded.state_dict()}
    dcp.load(state, checkpoint_id=path)
    loaded.load_state_dict(state["model"])
    return {"saved": [encode(p.full_tensor()) for p in saved.parameters()],
            "loaded": [encode(p.full_tensor()) for p in loaded.parameters()]}


def hosts(rank, world, device):
    """Ranks on two daemons standing for two hosts: the collectives that
    run across daemons, DDP training, and one that cannot yet."""
    out = {}
    for op in ("sum", "max"):
        tensor = part(rank, torch.float32).to(device)
        dist.all_reduce(tensor, op=REDUCE_OPS[op])
        out[f"all_reduce/{op}"] = encode(tensor)
    tensor = part(rank, torch.float32).to(device)
    dist.all_reduce(tensor, op=dist.ReduceOp.AVG)
    out["all_reduce/avg"] = encode(tensor)
    for root in (0, world - 1):
        tensor = part(rank, torch.float32).to(device)
        dist.broadcast(tensor, src=root)
        out[f"broadcast/{root}"] = encode(tensor)
    gathered = torch.empty(world * 6, device=device)
    dist.all_gather_into_tensor(gathered, part(rank, torch.float32).to(device))
    out["all_gather"] = encode(gathered)
    dist.barrier()
    out.update(models(rank, world, device, cases=("mlp",)))
    big = torch.cat([part(rank + 10 * q, torch.float32)
                     for q in range(world)]).to(device)
    scattered = torch.empty(6, device=device)
    dist.reduce_scatter_tensor(scattered, big)
    out["reduce_scatter"] = encode(scattered)
    received = torch.empty_like(big)
    dist.all_to_all_single(received, big)
    out["all_to_all"] = encode(received)
    tensor = part(rank, torch.float32).to(device)
    dist.reduce(tensor, dst=world - 1)
    out["reduce"] = encode(tensor)
    gathered = ([torch.empty(6, device=device) for _ in range(world)]
                if rank == 1 else None)
    dist.gather(part(rank, torch.float32).to(device), gathered, dst=1)
    out["gather"] = encode(torch.cat(gathered)) if rank == 1 else None
    received = torch.empty(6, device=device)
    dist.scatter(received, list(big.chunk(world)) if rank == 2 else None,
                 src=2)
    out["scatter"] = encode(received)
    # Point to point within a daemon (0 -> 1, 2 -> 3) and across (1 -> 2,
    # 3 -> 0): a ring, every rank sending before it receives.
    out["ring"] = encode(ring(rank, world, device))
    out["all_to_all_single/unequal"] = encode(
        unequal_all_to_all_single(rank, world, device)[0])
    return out


def unequal_splits(rank, world):
    """Rows rank `rank` sends to each rank (some none), and receives."""
    sends = [(rank + 1) * (q + 2) % 5 for q in range(world)]
    receives = [(q + 1) * (rank + 2) % 5 for q in range(world)]
    return sends, receives


def rows_for(sender, receiver, count):
    """The rows `sender` sends `receiver`: 3 columns, distinct values."""
    base = 1000 * sender + 100 * receiver
    return (torch.arange(count * 3, dtype=torch.float32) + base).reshape(
        count, 3)


def ring(rank, world, device):
    """batch_isend_irecv around the ring: every rank sends its part to the
    next and receives the previous one's."""
    received = torch.empty(6, device=device)
    works = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, part(rank, torch.float32).to(device),
                   (rank + 1) % world),
        dist.P2POp(dist.irecv, received, (rank - 1) % world)])
    for work in works:
        work.wait()
    return received


def unequal_all_to_all_single(rank, world, device):
    """all_to_all_single with unequal_splits; (received, sent, splits)."""
    sends, receives = unequal_splits(rank, world)
    source = torch.cat([rows_for(rank, q, sends[q])
                        for q in range(world)]).to(device)
    target = torch.empty(sum(receives), 3, device=device)
    dist.all_to_all_single(target, source, output_split_sizes=receives,
                           input_split_sizes=sends)
    return target, source, sends, receives


def point_to_point(rank, world, device):
    """send/recv, isend/irecv and batch_isend_irecv; unequal all_to_all."""
    out = {}
    # A ring through batch_isend_irecv.
    out["ring"] = encode(ring(rank, world, device))
    # Both ranks of a pair send first, then receive, 4 MiB each way: sends
    # and receives must not wait for each other.
    peer = rank ^ 1
    if peer < world:
        big = torch.full((1 << 20,), float(rank), device=device)
        into = torch.empty_like(big)
        sent = dist.isend(big, peer)
        got = dist.irecv(into, peer)
        sent.wait()
        got.wait()
        out["exchange"] = [into.min().item(), into.max().item()]
    # Rank 0 sends every dtype, a non-contiguous tensor and three messages
    # in order to every other rank (blocking send and recv).
    if rank == 0:
        for dtype in DTYPES:
            for to in range(1, world):
                dist.send(part(to, dtype).to(device), to)
        matrix = (torch.arange(12, dtype=torch.float32)).reshape(3, 4)
        for to in range(1, world):
            dist.send(matrix.to(device).t(), to)
            for count in (1, 5, 2):
                dist.send(torch.full((count,), float(count), device=device),
                          to)
    else:
        for dtype in DTYPES:
            into = torch.empty(6, dtype=dtype, device=device)
            dist.recv(into, 0)
            out[f"dtype/{str(dtype).split('.')[1]}"] = encode(into)
        into = torch.empty(3, 4, device=device).t()
        dist.recv(into, 0)
        out["non_contiguous"] = encode(into)
        out["in_order"] = []
        for count in (1, 5, 2):
            into = torch.empty(count, device=device)
            dist.recv(into, src=0)
            out["in_order"].append(encode(into))
    # float8 moves (all_gather, send/recv) and is refused at the call for
    # a reduction, on this rank alone: the group goes on.
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        name = str(dtype).split(".")[1]
        value = part(rank, torch.float32).to(dtype).to(device)
        gathered = torch.empty(world * 6, dtype=dtype, device=device)
        dist.all_gather_into_tensor(gathered, value)
        out[f"float8/{name}/all_gather"] = encode(gathered.float())
        if rank == 0:
            dist.send(value, 1)
        elif rank == 1:
            into = torch.empty(6, dtype=dtype, device=device)
            dist.recv(into, 0)
            out[f"float8/{name}/recv"] = encode(into.float())
        try:
            dist.all_reduce(value)
            out[f"float8/{name}/all_reduce"] = None
        except Exception as error:  # noqa: BLE001 - reported to the test
            out[f"float8/{name}/all_reduce"] = f"{type(error).__name__}: {error}"
    # all_to_all_single with split sizes, and all_to_all of unequal tensors.
    target, source, sends, receives = unequal_all_to_all_single(
        rank, world, device)
    out["all_to_all_single"] = encode(target)
    targets = [torch.empty(receives[q], 3, device=device)
               for q in range(world)]
    dist.all_to_all(targets, list(source.split(sends)))
    out["all_to_all"] = encode(torch.cat(targets))
    torch.openreg.synchronize()
    return out


def transfer_mismatch(rank, world, device):
    try:
        if rank == 0:
            dist.send(torch.ones(4, device=device), 1)
        else:
            dist.recv(torch.empty(3, device=device), 0)
        torch.openreg.synchronize()
        return {"error": None}
    except Exception as error:  # noqa: BLE001 - reported to the test
        return {"error": f"{type(error).__name__}: {error}"}


def split(rank, world, device):
    """split_group into [[0, 2], [1, 3]]: each subgroup's all_reduce and a
    send/recv by group rank."""
    group = dist.split_group(split_ranks=[[0, 2], [1, 3]])
    tensor = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(tensor, group=group)
    out = {"all_reduce": encode(tensor),
           "group_rank": dist.get_rank(group),
           "group_size": dist.get_world_size(group)}
    message = torch.full((3,), float(rank), device=device)
    if dist.get_rank(group) == 0:
        dist.send(message, group_dst=1, group=group)
    else:
        dist.recv(message, group_src=0, group=group)
    out["received"] = encode(message)
    torch.openreg.synchronize()
    dist.destroy_process_group(group)
    return out


def late_rank(rank, world, device):
    """Rank 1 joins its second all_reduce only once the test created the
    file $OPENREG_TEST_GO (after it saw the daemon's view of the wait)."""
    import time
    tensor = torch.ones(4, device=device)
    dist.all_reduce(tensor)
    torch.openreg.synchronize()
    if rank == 1:
        while not os.path.exists(os.environ["OPENREG_TEST_GO"]):
            time.sleep(0.05)
    dist.all_reduce(tensor)
    torch.openreg.synchronize()
    return {"value": encode(tensor)}


def dies_on_another_host(rank, world, device):
    """Ranks on two daemons (two hosts); the last rank exits after the
    first all_reduce. Every other rank's next all_reduce must fail, never
    hang: its own daemon's ranks at once, the other daemon's through gloo
    (the connection to the failed host's first rank breaks, or the group's
    timeout passes)."""
    import time
    tensor = torch.ones(4, device=device)
    dist.all_reduce(tensor)
    torch.openreg.synchronize()
    if rank == world - 1:
        os._exit(0)
    start = time.monotonic()
    try:
        dist.all_reduce(tensor)
        torch.openreg.synchronize()
        return {"error": None}
    except Exception as error:  # noqa: BLE001 - reported to the test
        return {"error": f"{type(error).__name__}: {error}",
                "seconds": time.monotonic() - start}


def collective_fault(rank, world, device):
    """Every rank arms the fault of $OPENREG_TEST_FAULT (a FaultSpec as
    JSON, scoped to the rank's own session; its trigger says which rank it
    hits), then runs three all_reduces of rank + 1 (the first is #0). Each
    step's value or error and seconds; the daemon's fault log."""
    import time
    faults = torch.openreg.faults
    # The daemon's log holds the earlier tests' firings too.
    since = max((record.index + 1 for record in faults.log()), default=0)
    faults.arm_plan({"faults": [json.loads(os.environ["OPENREG_TEST_FAULT"])]})
    steps = []
    for _ in range(3):
        tensor = torch.full((4,), float(rank + 1), device=device)
        start = time.monotonic()
        try:
            dist.all_reduce(tensor)
            value = encode(tensor)  # .cpu(): waits for the collective
            steps.append({"value": value,
                          "seconds": time.monotonic() - start})
        except Exception as error:  # noqa: BLE001 - reported to the test
            steps.append({"error": f"{type(error).__name__}: {error}",
                          "seconds": time.monotonic() - start})
            break
    try:
        log = [{"model": record.model, "command": record.command,
                "rank": record.rank, "group": record.group,
                "phase": record.phase, "element": record.element}
               for record in faults.log(since)]
    except Exception as error:  # noqa: BLE001 - a dropped session
        log = f"{type(error).__name__}: {error}"
    return {"steps": steps, "log": log}


SCENARIOS = {"collective_fault": collective_fault,
             "dies_on_another_host": dies_on_another_host, "late_rank": late_rank, "point_to_point": point_to_point,
             "transfer_mismatch": transfer_mismatch, "split": split,
             "hosts": hosts, "checkpoint": checkpoint, "tensor_parallel": tensor_parallel, "collectives": collectives, "models": models, "fsdp": fsdp,
             "dies": dies, "mismatch": mismatch, "stopped": stopped,
             "reinit": reinit, "flight_recorder": flight_recorder}


def main():
    scenario, rank, world, port = sys.argv[1], *map(int, sys.argv[2:5])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("openreg", rank % torch.openreg.device_count())
    torch.openreg.set_device(device)
    # split_group needs the default group bound to a device, as with NCCL.
    timeout = os.environ.get("OPENREG_TEST_GROUP_TIMEOUT")
    dist.init_process_group(
        rank=rank, world_size=world,
        device_id=device if scenario == "split" else None,
        timeout=datetime.timedelta(seconds=float(timeout)) if timeout else None)
    result = SCENARIOS[scenario](rank, world, device)
    print("RESULT " + json.dumps(result), flush=True)
    if scenario not in ("dies", "stopped", "collective_fault",
                        "dies_on_another_host"):
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
