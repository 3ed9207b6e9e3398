"""An ordinary DDP training script, unchanged but for device="openreg":
run it with torchrun, as on CUDA.

    torchrun --nproc_per_node=2 examples/distributed/ddp_train.py

Each process trains on its shard of the batch; DDP averages the gradients
through the occl backend, whose all_reduce runs inside the openreg daemon.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("openreg", local_rank % torch.openreg.device_count())
    torch.openreg.set_device(device)
    dist.init_process_group()  # picks occl for openreg tensors

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1)).to(device)
    model = DDP(model, device_ids=[device.index])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(args.steps):
        x = torch.randn(16, 32, generator=generator).to(device)
        y = x.sum(dim=1, keepdim=True).mul(0.1)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    # Every rank holds the same weights: the same loss on the same data.
    probe = torch.ones(4, 32, device=device)
    final = torch.nn.functional.mse_loss(model(probe), probe.sum(1, True) * 0.1)
    print(f"final loss {final.item():.8f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
