"""The models of test_distributed, built the same way in every rank and in
the test's single-process reference: same seed, same global batches."""

import torch
from torch import nn

CASES = ["mlp", "tied", "no_sync", "unused", "fp16_hook"]
BATCH = 8  # global batch, divisible by 2 and 4 ranks


class Tied(nn.Module):
    """A language-model head sharing the embedding's weight."""

    def __init__(self, vocab=20, width=8):
        super().__init__()
        self.embedding = nn.Embedding(vocab, width)
        self.hidden = nn.Linear(width, width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.hidden(self.embedding(tokens))))


class Branchy(nn.Module):
    """A parameter that forward never uses (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        self.used = nn.Linear(8, 4)
        self.unused = nn.Linear(8, 4)

    def forward(self, x):
        return self.used(x)


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(),
                                 nn.Linear(2 * width, width))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class SmallTransformer(nn.Module):
    def __init__(self, vocab=32, width=16, layers=2):
        super().__init__()
        self.embedding = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(layers))
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def build(name, steps):
    """(model, optimizer factory, global batches, options)."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    options = {"ddp": {}}
    if name == "tied":
        model = Tied()
        batches = [(torch.randint(0, 20, (BATCH, 5), generator=generator),
                    torch.randint(0, 20, (BATCH, 5), generator=generator))
                   for _ in range(steps)]
    elif name == "transformer":
        model = SmallTransformer()
        batches = [(torch.randint(0, 32, (BATCH, 6), generator=generator),
                    torch.randint(0, 32, (BATCH, 6), generator=generator))
                   for _ in range(steps)]
    else:
        model = (Branchy() if name == "unused" else
                 nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
        batches = [(torch.randn(BATCH, 8, generator=generator),
                    torch.randn(BATCH, 4, generator=generator))
                   for _ in range(steps)]
    if name == "unused":
        options["ddp"]["find_unused_parameters"] = True
    if name == "no_sync":
        options["accumulate"] = True
    if name == "fp16_hook":
        options["fp16_hook"] = True
    if name == "transformer":
        def optimizer(params):
            return torch.optim.AdamW(params, lr=1e-2)
    else:
        def optimizer(params):
            return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    return model, optimizer, batches, options


def loss(name, model, x, y):
    if name in ("tied", "transformer"):
        logits = model(x)
        return nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
    return nn.functional.mse_loss(model(x), y)


def reference(name, steps):
    """Single-process training on the global batches, on CPU."""
    model, optimizer, batches, _ = build(name, steps)
    optimizer = optimizer(model.parameters())
    for x, y in batches:
        optimizer.zero_grad()
        loss(name, model, x, y).backward()
        optimizer.step()
    return [p.detach() for p in model.parameters()]


def tensor_parallel_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))


def tensor_parallel_input():
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(2))
