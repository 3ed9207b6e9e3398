"""DDP training that survives a rank's death: a checkpoint every few steps,
and, when torchrun restarts the job (--max-restarts), training resumes from
the last checkpoint and ends with the weights of a run without failures.

    torchrun --nproc_per_node=2 --max-restarts=1 \\
        examples/distributed/ddp_checkpointed.py --checkpoint-dir=/tmp/ckpt \\
        --kill-rank=1 --kill-at-step=7 --weights-out=/tmp/weights.pt

Under a fault plan (docs/FAULT_INJECTION.md), each rank arms it in its own
session; a plan whose trigger names a rank hits that rank only:

    OPENREG_FAULT_PLAN=examples/distributed/gradient_flip.json \
        torchrun --nproc_per_node=2 --max-restarts=1 \
        examples/distributed/ddp_checkpointed.py --checkpoint-dir=/tmp/ckpt

With --report, rank 0 reports the final loss and weights to an openreg-fi
campaign (torch_openreg.fi.report), which compares them with the
fault-free run's.

--kill-rank/--kill-at-step stand for a crash: that rank kills itself
(SIGKILL) at that step, in the first attempt only. The survivors' next
collective fails at once with a DistBackendError naming it (the daemon sees
its process end); they print it and exit, torchrun starts every rank again,
and they resume from the checkpoint. Steps draw their data from seeds of
(step, rank), so a resumed step sees the data it would have seen.
"""

import argparse
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--kill-rank", type=int, default=None)
    parser.add_argument("--kill-at-step", type=int, default=None)
    parser.add_argument("--weights-out", default=None)
    parser.add_argument("--report", action="store_true",
                        help="report the final loss and weights to an "
                             "openreg-fi campaign")
    parser.add_argument("--group-timeout", type=float, default=600,
                        help="seconds a collective waits for every rank")
    return parser.parse_args()


def save_checkpoint(path, step, model, optimizer):
    """Rank 0 writes it whole or not at all (a rank may die mid-run)."""
    state = {"step": step, "model": model.module.state_dict(),
             "optimizer": optimizer.state_dict()}
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def main():
    args = parse_args()
    rank = int(os.environ["RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("openreg", local_rank % torch.openreg.device_count())
    torch.openreg.set_device(device)
    print(f"rank {rank} attempt {attempt} pid {os.getpid()}", flush=True)
    # torchrun (torch 2.13) hands every attempt the same store, where the
    # dead attempt's keys remain: gloo would connect to its addresses (gloo
    # alone on CPU fails the same way). A prefix per attempt keeps them
    # apart.
    store, _, world = next(dist.rendezvous("env://"))
    dist.init_process_group(
        store=dist.PrefixStore(f"attempt_{attempt}", store), rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=args.group_timeout))

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    checkpoint = os.path.join(args.checkpoint_dir, "checkpoint.pt")
    start = 0
    if os.path.exists(checkpoint):
        state = torch.load(checkpoint, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        print(f"rank {rank} attempt {attempt} resumes at step {start}",
              flush=True)
    model = DDP(model, device_ids=[device.index])

    loss = None
    try:
        for step in range(start, args.steps):
            if step > start and step % args.checkpoint_every == 0 and rank == 0:
                save_checkpoint(checkpoint, step, model, optimizer)
            if (attempt == 0 and rank == args.kill_rank
                    and step == args.kill_at_step):
                print(f"KILLED rank {rank} at {time.time():.6f}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            generator = torch.Generator().manual_seed(1000 * step + rank)
            x = torch.randn(16, 32, generator=generator).to(device)
            y = x.sum(dim=1, keepdim=True).mul(0.1)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            # Logging the loss synchronizes once a step: a failed collective
            # is raised within a step of it.
            print(f"rank {rank} step {step} loss {loss.item():.6f}", flush=True)
        torch.openreg.synchronize()
    except dist.DistBackendError as error:
        # What a watchdog or a log scraper sees; then torchrun restarts us.
        print(f"RANK_ERROR rank {rank} at {time.time():.6f}: {error}",
              file=sys.stderr, flush=True)
        sys.exit(1)
    weights = {name: value.cpu()
               for name, value in model.module.state_dict().items()}
    if rank == 0 and args.weights_out:
        torch.save(weights, args.weights_out)
    if rank == 0 and args.report:
        import torch_openreg.fi as fi

        fi.report("final_loss", loss.item())
        for name, value in weights.items():
            fi.report(name, value)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
