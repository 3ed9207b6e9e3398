"""torch.distributed on openreg: the occl backend's collectives and
transfers run in the daemon across processes (2 and 4 ranks on 2
devices), against CPU references computed in the documented reduction
order; DDP and FSDP2 training against single-process training; split
groups; two daemons standing for two hosts; torchrun. Each test starts its
ranks as processes on the test process's daemon (distributed_launch.py),
on a free port, and waits for all of them. Failures are
test_distributed_failures.py's."""

import os
import re
import subprocess
import sys

import pytest
import torch
import torch_openreg.testing

from daemon_fixture import python_env
from distributed_launch import DAEMON, HERE, TIMEOUT, encoded, free_port
from distributed_launch import communicate_all, run_ranks

import distributed_ranks
import model_zoo

def expected_collectives(world):
    """What every rank must hold after distributed_ranks.collectives."""
    part = distributed_ranks.part
    per_rank = [dict() for _ in range(world)]
    for dtype in distributed_ranks.DTYPES:
        name = str(dtype).split(".")[1]
        parts = [part(r, dtype) for r in range(world)]
        for op in distributed_ranks.ops_for(dtype):
            value = encoded(distributed_ranks.reference_reduce(parts, op))
            for rank in range(world):
                per_rank[rank][f"all_reduce/{op}/{name}"] = value
        if dtype.is_floating_point:
            average = distributed_ranks.reference_reduce(parts, "sum")
            average = average.div_(world)
            for rank in range(world):
                per_rank[rank][f"all_reduce/avg/{name}"] = encoded(average)
        for rank in range(world):
            per_rank[rank][f"broadcast/{name}"] = encoded(parts[world - 1])
            gathered = encoded(torch.cat(parts))
            per_rank[rank][f"all_gather_into_tensor/{name}"] = gathered
            per_rank[rank][f"all_gather/{name}"] = gathered
        per_rank[0][f"reduce/{name}"] = encoded(
            distributed_ranks.reference_reduce(parts, "sum"))
        per_rank[0][f"gather/{name}"] = encoded(torch.cat(parts))
        sent = [[part(r + 10 * q, dtype) for q in range(world)]
                for r in range(world)]
        for rank in range(world):
            if dtype != torch.bool:
                value = encoded(distributed_ranks.reference_reduce(
                    [sent[q][rank] for q in range(world)], "sum"))
                per_rank[rank][f"reduce_scatter_tensor/{name}"] = value
                per_rank[rank][f"reduce_scatter/{name}"] = value
            received = encoded(torch.cat([sent[q][rank]
                                          for q in range(world)]))
            per_rank[rank][f"all_to_all_single/{name}"] = received
            per_rank[rank][f"all_to_all/{name}"] = received
            per_rank[rank][f"scatter/{name}"] = encoded(sent[0][rank])
    floats = [part(r, torch.float32) for r in range(world)]
    premul = floats[0] * 0.5
    for value in floats[1:]:
        premul.add_(value, alpha=0.5)
    matrices = [(torch.arange(12, dtype=torch.float32) + r).reshape(3, 4)
                for r in range(world)]
    total = distributed_ranks.reference_reduce(floats, "sum")
    for rank in range(world):
        per_rank[rank]["all_reduce/premul_sum/float32"] = encoded(premul)
        per_rank[rank]["all_reduce/non_contiguous"] = encoded(
            distributed_ranks.reference_reduce(matrices, "sum").t())
        per_rank[rank]["all_reduce/empty"] = []
        per_rank[rank]["all_reduce/async"] = encoded(total * 2)
        per_rank[rank]["all_reduce/future"] = encoded(total)
    return per_rank


@pytest.mark.parametrize("world", [2, 4])
def test_every_collective_and_dtype_matches_the_cpu_reference_bitwise(world):
    results, processes = run_ranks("collectives", world)
    expected = expected_collectives(world)
    for rank in range(world):
        assert processes[rank].returncode == 0
        assert sorted(results[rank]) == sorted(expected[rank])
        for key, value in expected[rank].items():
            assert results[rank][key] == value, (rank, key)


def test_ddp_training_equals_single_process_training_on_the_global_batch():
    steps = 4
    results, _ = run_ranks("models", 2)
    for name in model_zoo.CASES:
        reference = model_zoo.reference(name, steps)
        # Gradients are averaged over 2 ranks in float32 (the fp16 hook in
        # float16): equal up to the rounding of that average.
        tolerance = 2e-3 if name == "fp16_hook" else 1e-6
        for rank in range(2):
            for got, want in zip(results[rank][name], reference):
                assert torch.allclose(torch.tensor(got), want, rtol=0,
                                      atol=tolerance), (name, rank)


def test_fsdp2_training_of_a_small_transformer_equals_single_process():
    results, _ = run_ranks("fsdp", 2)
    reference = model_zoo.reference("transformer", 3)
    for rank in range(2):
        assert results[rank]["transformer"] == results[0]["transformer"]
        for got, want in zip(results[rank]["transformer"], reference):
            assert torch.allclose(torch.tensor(got), want, rtol=0, atol=1e-5)


def test_a_2d_device_mesh_runs_a_tensor_parallel_layer_and_sub_groups():
    results, _ = run_ranks("tensor_parallel", 4)
    model = model_zoo.tensor_parallel_mlp()
    y = model(model_zoo.tensor_parallel_input())
    y.sum().backward()
    for rank, result in enumerate(results):
        assert torch.allclose(torch.tensor(result["y"]), y.detach(),
                              rtol=0, atol=1e-6), rank
        for got, parameter in zip(result["grads"], model.parameters()):
            assert torch.allclose(torch.tensor(got), parameter.grad, rtol=0,
                                  atol=1e-6), rank
        # dp groups are the mesh's columns: ranks {r, r + 2}.
        assert result["dp_ranks"] == [rank % 2, rank % 2 + 2]
        assert result["dp_sum"] == [float(2 * (rank % 2) + 2)]


def test_a_sharded_checkpoint_saves_and_loads(tmp_path):
    results, _ = run_ranks("checkpoint", 2,
                           OPENREG_TEST_CHECKPOINT_DIR=str(tmp_path))
    # The loaded model was initialized from another seed, and each rank
    # offset its own shards before saving: only a real load matches.
    for result in results:
        assert result["loaded"] == result["saved"]
        assert result["saved"] == results[0]["saved"]


def expected_unequal_all_to_all(rank, world):
    """What all_to_all with distributed_ranks.unequal_splits delivers to
    `rank`: from each rank q, in rank order, the rows q sends it."""
    _, receives = distributed_ranks.unequal_splits(rank, world)
    return encoded(torch.cat([distributed_ranks.rows_for(q, rank, receives[q])
                              for q in range(world)]))


@pytest.mark.parametrize("world", [2, 4])
def test_point_to_point_and_unequal_all_to_all_move_the_right_data(world):
    """send/recv of every dtype and of a non-contiguous tensor, messages
    matched in order, a batch_isend_irecv ring, pairs that both send
    before they receive (4 MiB each way), and all_to_all with unequal
    (some empty) blocks."""
    results, _ = run_ranks("point_to_point", world)
    part = distributed_ranks.part
    for rank, result in enumerate(results):
        assert result["ring"] == encoded(part((rank - 1) % world,
                                              torch.float32)), rank
        peer = rank ^ 1
        assert result["exchange"] == [float(peer), float(peer)], rank
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            name = str(dtype).split(".")[1]
            values = [part(r, torch.float32).to(dtype).float()
                      for r in range(world)]
            assert result[f"float8/{name}/all_gather"] == encoded(
                torch.cat(values)), name
            if rank == 1:
                assert result[f"float8/{name}/recv"] == encoded(values[0])
            error = result[f"float8/{name}/all_reduce"]
            assert error.startswith("RuntimeError: occl: all_reduce of "
                                    "Float8_"), error
            assert "not reduced" in error, error
        want = expected_unequal_all_to_all(rank, world)
        assert result["all_to_all_single"] == want, rank
        assert result["all_to_all"] == want, rank
        if rank == 0:
            continue
        for dtype in distributed_ranks.DTYPES:
            name = str(dtype).split(".")[1]
            assert result[f"dtype/{name}"] == encoded(part(rank, dtype)), name
        matrix = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        assert result["non_contiguous"] == encoded(matrix.t())
        assert result["in_order"] == [[1.0], [5.0] * 5, [2.0] * 2]


def test_split_group_forms_subgroups_that_run_collectives_and_transfers():
    results, _ = run_ranks("split", 4)
    for rank, result in enumerate(results):
        members = [0, 2] if rank % 2 == 0 else [1, 3]
        assert result["group_size"] == 2
        assert result["group_rank"] == members.index(rank)
        total = float(sum(member + 1 for member in members))
        assert result["all_reduce"] == [total] * 4, rank
        assert result["received"] == [float(members[0])] * 3, rank


def test_ranks_on_two_daemons_standing_for_two_hosts():
    """Ranks 0-1 on this module's daemon, 2-3 on another: every collective
    runs hierarchically (within each daemon, then gloo between the
    daemons' first ranks), and DDP trains as on one daemon."""
    with torch_openreg.testing.Daemon(devices=2,
                                      memory_per_device="1GiB") as other:
        results, _ = run_ranks("hosts", 4, sockets=[DAEMON.socket] * 2 +
                               [other.socket] * 2)
    part = distributed_ranks.part
    floats = [part(r, torch.float32) for r in range(4)]
    # Within each daemon in rank order, then across daemons.
    local = [floats[0] + floats[1], floats[2] + floats[3]]
    total = local[0] + local[1]
    reference = model_zoo.reference("mlp", 4)
    for rank, result in enumerate(results):
        assert result["all_reduce/sum"] == encoded(total), rank
        assert result["all_reduce/max"] == encoded(
            torch.maximum(torch.maximum(floats[0], floats[1]),
                          torch.maximum(floats[2], floats[3]))), rank
        assert result["all_reduce/avg"] == encoded(total / 4), rank
        assert result["broadcast/0"] == encoded(floats[0])
        assert result["broadcast/3"] == encoded(floats[3])
        for got, want in zip(result["mlp"], reference):
            assert torch.allclose(torch.tensor(got), want, rtol=0,
                                  atol=1e-6), rank
        assert result["all_gather"] == encoded(torch.cat(floats))
        sent = [[part(r + 10 * q, torch.float32) for q in range(4)]
                for r in range(4)]
        block = [sent[q][rank] for q in range(4)]
        assert result["reduce_scatter"] == encoded(
            (block[0] + block[1]) + (block[2] + block[3]))
        assert result["all_to_all"] == encoded(torch.cat(block))
        assert result["scatter"] == encoded(sent[2][rank])
        if rank == 3:
            assert result["reduce"] == encoded(total)
        else:  # a non-root's input is left as it was
            assert result["reduce"] == encoded(floats[rank])
        if rank == 1:
            assert result["gather"] == encoded(torch.cat(floats))
        assert result["ring"] == encoded(floats[(rank - 1) % 4]), rank
        assert result["all_to_all_single/unequal"] == (
            expected_unequal_all_to_all(rank, 4)), rank


def test_fsdp2_across_two_daemons_equals_single_process():
    with torch_openreg.testing.Daemon(devices=2,
                                      memory_per_device="1GiB") as other:
        results, _ = run_ranks("fsdp", 4, sockets=[DAEMON.socket] * 2 +
                               [other.socket] * 2)
    reference = model_zoo.reference("transformer", 3)
    for rank in range(4):
        for got, want in zip(results[rank]["transformer"], reference):
            assert torch.allclose(torch.tensor(got), want, rtol=0, atol=1e-5)


def test_torchrun_runs_an_unchanged_ddp_script():
    script = os.path.join(HERE, "..", "..", "examples", "distributed",
                          "ddp_train.py")
    env = python_env(OPENREG_DAEMON_SOCKET=DAEMON.socket,
                     OPENREG_AUTOSPAWN="0")
    completed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=4",
         f"--master_port={free_port()}", script, "--steps=3"],
        env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert completed.returncode == 0, completed.stderr[-3000:]
    # torchrun forwards every rank's output to one pipe: lines may
    # interleave. 4 ranks on the daemon's 2 devices.
    losses = re.findall(r"final loss (\d+\.\d{8})", completed.stdout)
    assert len(losses) == 4 and len(set(losses)) == 1, completed.stdout


def test_torchrun_on_two_nodes_with_a_daemon_each_runs_the_same_script():
    """`torchrun --nnodes=2` once per "host", each pointing its ranks at its
    own daemon (OPENREG_DAEMON_SOCKET in the node's environment): 4 ranks
    whose collectives run hierarchically end with the same weights."""
    script = os.path.join(HERE, "..", "..", "examples", "distributed",
                          "ddp_train.py")
    port = free_port()
    with torch_openreg.testing.Daemon(devices=2,
                                      memory_per_device="1GiB") as other:
        nodes = [subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
             f"--node_rank={node}", "--nproc_per_node=2",
             "--master_addr=127.0.0.1", f"--master_port={port}", script,
             "--steps=3"],
            env=python_env(OPENREG_DAEMON_SOCKET=daemon.socket,
                           OPENREG_AUTOSPAWN="0"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for node, daemon in enumerate([DAEMON, other])]
        outputs = communicate_all(nodes)
    losses = []
    for node, (stdout, stderr) in zip(nodes, outputs):
        assert node.returncode == 0, stderr[-3000:]
        losses += re.findall(r"final loss (\d+\.\d{8})", stdout)
    assert len(losses) == 4 and len(set(losses)) == 1, losses


def test_the_backend_is_registered_for_openreg_at_import():
    import torch.distributed as dist
    assert dist.Backend.default_device_backend_map["openreg"] == "occl"
    assert "occl" in dist.Backend.backend_list
    config = dist.distributed_c10d.BackendConfig(dist.Backend.UNDEFINED)
    assert {device: str(backend) for device, backend
            in config.device_backend_map.items()} == {"openreg": "occl",
                                                      "cpu": "gloo"}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
