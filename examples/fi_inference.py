"""A small deterministic program for fault-injection campaigns: a few SGD
steps of a tiny CNN on fixed data, then inference on fixed inputs, on
openreg. Everything is seeded and created on the CPU first, so every
fault-free run computes the same numbers bit for bit.

It reports its output to the campaign with torch_openreg.fi.report (the
loss of each step, the final logits) and checks its own numbers: a
non-finite loss or logit is reported with torch_openreg.fi.detected, so
the run counts as DUE, not SDC. It also prints the predicted classes.

    python examples/fi_inference.py                 # runs on its own
    openreg-fi run --dir /tmp/fi --runs 100 -- examples/fi_inference.py
    openreg-fi run --dir /tmp/fi-bits --runs 50 --bits 30 \\
        --op 'aten::addmm*' -- examples/fi_inference.py
"""

import argparse

import torch
import torch.nn.functional as F

import torch_openreg.fi as fi


def build_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, kernel_size=3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 4 * 4, 16),
        torch.nn.ReLU(),
        torch.nn.Linear(16, 10),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2,
                        help="training steps before inference (default 2)")
    parser.add_argument("--device", default="openreg")
    args = parser.parse_args()

    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(8, 1, 8, 8, generator=generator)
    targets = torch.randint(0, 10, (8,), generator=generator)
    test_inputs = torch.randn(4, 1, 8, 8, generator=generator)

    device = torch.device(args.device)
    model = build_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    inputs, targets = inputs.to(device), targets.to(device)
    for step in range(args.steps):
        loss = F.cross_entropy(model(inputs), targets)
        if not torch.isfinite(loss):
            fi.detected(f"non-finite loss at step {step}")
            return
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        fi.report("loss", loss)

    with torch.no_grad():
        logits = model(test_inputs.to(device))
    if not torch.isfinite(logits).all():
        fi.detected("non-finite logits")
        return
    predictions = logits.argmax(dim=1).tolist()
    fi.report("logits", logits)
    fi.report("predictions", predictions)
    print("predictions", predictions)


if __name__ == "__main__":
    main()
