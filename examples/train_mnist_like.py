"""Trains a small CNN on generated MNIST-like data on openreg, and checks
that the same training on CPU ends with the same weights.

    python3 examples/train_mnist_like.py [--epochs 3] [--daemon-socket PATH]

Without --daemon-socket it starts a private daemon and stops it by pid.
The data: 10 classes, each a random 28x28 prototype "glyph"; samples are
prototypes shifted by up to a pixel plus noise, so a CNN learns it fast.
"""

import argparse
import contextlib
import copy
import os


def make_dataset(torch, samples, generator):
    prototypes = (torch.rand(10, 1, 28, 28, generator=generator) > 0.7).float()
    labels = torch.randint(0, 10, (samples,), generator=generator)
    shifts = torch.randint(-1, 2, (samples, 2), generator=generator)
    images = torch.stack([
        torch.roll(prototypes[label], shifts=(int(dy), int(dx)), dims=(1, 2))
        for label, (dy, dx) in zip(labels.tolist(), shifts)])
    images += 0.2 * torch.randn(images.shape, generator=generator)
    return images, labels


def build_model(nn):
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10))


def train(torch, model, images, labels, device, epochs, batch):
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs)
    images, labels = images.to(device), labels.to(device)
    for epoch in range(epochs):
        model.train()
        total = 0.0
        for start in range(0, len(images), batch):
            x, y = images[start:start + batch], labels[start:start + batch]
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(x)
        scheduler.step()
        model.eval()
        with torch.no_grad():
            accuracy = (model(images).argmax(dim=1) == labels).float().mean().item()
        print(f"  [{device}] epoch {epoch + 1}: loss {total / len(images):.4f}, "
              f"accuracy {accuracy:.3f}")
    return model, accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--daemon-socket", help="use this running daemon")
    args = parser.parse_args()

    if args.daemon_socket:
        os.environ["OPENREG_DAEMON_SOCKET"] = args.daemon_socket
        daemon = contextlib.nullcontext()
    else:
        from torch_openreg.testing import Daemon
        daemon = Daemon(devices=1)
    with daemon as running:
        if running is not None:
            running.use()
        import torch

        images, labels = make_dataset(
            torch, args.samples, torch.Generator().manual_seed(0))
        torch.manual_seed(0)
        reference = build_model(torch.nn)
        device_model, accuracy = train(torch, copy.deepcopy(reference), images,
                                       labels, "openreg", args.epochs, 32)
        cpu_model, cpu_accuracy = train(torch, reference, images, labels, "cpu",
                                        args.epochs, 32)
        for (name, a), (_, b) in zip(device_model.state_dict().items(),
                                     cpu_model.state_dict().items()):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-3, atol=1e-4,
                                       msg=f"{name} differs from CPU training")
        print(f"openreg accuracy {accuracy:.3f} (CPU {cpu_accuracy:.3f}); "
              "weights match CPU training")
        if accuracy < 0.9:
            raise SystemExit(f"accuracy {accuracy:.3f} is below 0.9")


if __name__ == "__main__":
    main()
