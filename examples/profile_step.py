"""Profiles one training step on openreg with torch.profiler: the CPU ops,
each device's kernels, copies and memsets from the daemon's timestamps,
and memory, then writes a Chrome trace to open in https://ui.perfetto.dev
(docs/OBSERVABILITY.md, "Device activity in torch.profiler").

    python examples/profile_step.py [TRACE_JSON]
"""

import sys

import torch
from torch.profiler import ProfilerActivity, profile


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "step.json"
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10)).to("openreg")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(64, 512), torch.randint(0, 10, (64,))

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            model(inputs.to("openreg")), targets.to("openreg"))
        loss.backward()
        optimizer.step()
        return loss

    step()  # warm-up: the first launch of each op is checked
    torch.openreg.synchronize()
    with profile(activities=[ProfilerActivity.CPU,
                             ProfilerActivity.PrivateUse1],
                 profile_memory=True) as prof:
        loss = step()
        print(f"loss {loss.item():.4f}")
    print(prof.key_averages().table(sort_by="self_device_time_total",
                                    row_limit=10))
    prof.export_chrome_trace(path)
    print(f"trace written to {path}: open it in https://ui.perfetto.dev")


if __name__ == "__main__":
    main()
