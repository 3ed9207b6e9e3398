"""Real-model-shaped training steps: a small transformer (embedding,
attention through SDPA, layer norm, MLP, AdamW) and a small CNN (two
convolutions with batch norm, SGD), CPU eager against openreg in
alternating rounds of the same run.

Besides the step-time ratio, each row reports where the CPU went: the
client process's CPU per step (for openreg: encoding and dispatch), the
daemon's CPU per step and per command it executed (and, from one more
profiled round, how much of it was its executors', their OpenMP workers'
and other threads'), and CPU eager's CPU per step and per op (the number of ops is the number of device commands the
same step sends, so both sides are counted per op the same way). Every
figure is its median over the alternating rounds; the ratio of each round
and their median are printed too. The issue's bars (medians of rounds):
the step <= 0.9x CPU eager's time, and the daemon's CPU per command <= CPU
eager's time per op.
"""

import os
import resource
import statistics
import time

from timing import no_sync

ROUNDS = 5
# The training steps' rounds: their figures are the medians of these.
STEP_ROUNDS = 7


def _process_cpu(pid):
    """CPU seconds (user + system, every thread) of process `pid`."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _own_cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _daemon_pid():
    socket = os.environ.get("OPENREG_DAEMON_SOCKET", "")
    with open(socket + ".lock") as lock:
        return int(lock.read().split()[0])


def _commands(torch):
    """Commands the daemon executed for this process so far."""
    stats = torch.openreg.daemon_stats()
    return sum(int(session["commands_executed"])
               for session in stats["sessions"]
               if int(session["pid"]) == os.getpid())


class _Round:
    """Wall time, this process's CPU and (openreg) the daemon's CPU and
    commands over `steps` calls of `step`, then one synchronize."""

    def __init__(self, torch, step, steps, sync, daemon_pid):
        commands = _commands(torch) if daemon_pid else 0
        daemon = _process_cpu(daemon_pid) if daemon_pid else 0.0
        own = _own_cpu()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        self.seconds = (time.perf_counter() - start) / steps
        self.client_cpu = (_own_cpu() - own) / steps
        self.daemon_cpu = ((_process_cpu(daemon_pid) - daemon) / steps
                           if daemon_pid else 0.0)
        self.commands = ((_commands(torch) - commands) / steps
                         if daemon_pid else 0.0)


class _Median:
    """Each figure's median over rounds (the issue's statistic: on a noisy
    machine a single lucky round of either side moves a best-of ratio)."""

    def __init__(self, rounds):
        for field in ("seconds", "client_cpu", "daemon_cpu", "commands"):
            setattr(self, field,
                    statistics.median(getattr(r, field) for r in rounds))


def transformer_block(torch, width=64, heads=4):
    """Pre-norm attention (SDPA, causal) and MLP, with residuals."""
    nn = torch.nn
    functional = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.norm2 = nn.LayerNorm(width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))

        def forward(self, x):
            batch, length, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
            q, k, v = [t.view(batch, length, heads, width // heads)
                       .transpose(1, 2) for t in (q, k, v)]
            attended = functional.scaled_dot_product_attention(
                q, k, v, is_causal=True)
            x = x + self.proj(attended.transpose(1, 2).reshape(x.shape))
            return x + self.mlp(self.norm2(x))

    return Block()


def _transformer(torch, vocab=1000, width=64, heads=4, layers=2):
    nn = torch.nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, width)
            self.blocks = nn.Sequential(*[transformer_block(torch, width, heads)
                                          for _ in range(layers)])
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens):
            return self.head(self.norm(self.blocks(self.embedding(tokens))))

    return Model()


def _cnn(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32),
        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


def _workloads(torch):
    """(name, model builder, optimizer builder, inputs, targets, loss)."""
    functional = torch.nn.functional
    tokens = torch.randint(0, 1000, (8, 32))
    images = torch.randn(16, 3, 32, 32)

    def token_loss(logits, targets):
        return functional.cross_entropy(logits.flatten(0, 1),
                                        targets.flatten())

    return [
        ("transformer step (2 layers, d=64, 8x32) AdamW", _transformer,
         lambda params: torch.optim.AdamW(params, lr=1e-3), tokens,
         torch.randint(0, 1000, (8, 32)), token_loss),
        ("CNN step (2 conv + BN, 16x3x32x32) SGD", _cnn,
         lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
         images, torch.randint(0, 10, (16,)), functional.cross_entropy),
    ]


def _step_for(torch, build, make_optimizer, inputs, targets, loss_fn,
              device):
    torch.manual_seed(0)
    model = build(torch).to(device)
    optimizer = make_optimizer(model.parameters())
    x, y = inputs.to(device), targets.to(device)

    def step():
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()

    return step


def model_training_steps(torch, scale):
    daemon_pid = _daemon_pid()
    steps = max(2, int(20 * scale))
    rows = []
    for name, build, make_optimizer, inputs, targets, loss_fn in \
            _workloads(torch):
        cpu_step = _step_for(torch, build, make_optimizer, inputs, targets,
                             loss_fn, "cpu")
        device_step = _step_for(torch, build, make_optimizer, inputs,
                                targets, loss_fn, "openreg")
        # Warm-up: caches, the first (checked) launch of each signature.
        _Round(torch, cpu_step, steps, no_sync, None)
        _Round(torch, device_step, steps, torch.openreg.synchronize,
               daemon_pid)
        cpu_rounds, device_rounds = [], []
        for _ in range(max(3, int(STEP_ROUNDS * scale))):
            cpu_rounds.append(_Round(torch, cpu_step, steps, no_sync, None))
            device_rounds.append(_Round(torch, device_step, steps,
                                        torch.openreg.synchronize,
                                        daemon_pid))
        cpu, device = _Median(cpu_rounds), _Median(device_rounds)
        commands = max(device.commands, 1.0)
        rows.append((name, "CPU eager", cpu.seconds, device.seconds))
        # Rounds alternate, so a round's ratio compares the two sides in
        # the same phase of the machine.
        ratios = sorted(d.seconds / c.seconds
                        for c, d in zip(cpu_rounds, device_rounds))
        best = (min(r.seconds for r in device_rounds)
                / min(r.seconds for r in cpu_rounds))
        print(f"{name}: openreg/CPU eager per round "
              f"{' '.join(f'{ratio:.2f}' for ratio in ratios)}, median "
              f"{statistics.median(ratios):.2f}x (best round each side: "
              f"{best:.2f}x)")
        print(f"{name}: {commands:.0f} commands per step; CPU per step: "
              f"CPU eager {cpu.client_cpu * 1e3:.2f} ms "
              f"({cpu.client_cpu / commands * 1e6:.1f} us per op), "
              f"openreg client {device.client_cpu * 1e3:.2f} ms + daemon "
              f"{device.daemon_cpu * 1e3:.2f} ms "
              f"({device.daemon_cpu / commands * 1e6:.1f} us per command; "
              f"CPU eager's time per op "
              f"{cpu.seconds / commands * 1e6:.1f} us)")
        # One more round, profiled (not timed: the profile costs about a
        # microsecond per command): whose threads the daemon's CPU was.
        with torch.openreg.command_costs() as costs:
            for _ in range(steps):
                device_step()
            torch.openreg.synchronize()
        per_step = {role: costs.thread_cpu_ns(role) / steps / 1e6
                    for role in ("executors", "openmp_workers", "other")}
        print(f"{name}: daemon CPU per step by thread: executors "
              f"{per_step['executors']:.2f} ms, their OpenMP workers "
              f"{per_step['openmp_workers']:.2f} ms, other threads "
              f"{per_step['other']:.2f} ms")
    return rows


def new_shape_each_step(torch, scale):
    """The transformer block's forward on a sequence one token longer at
    each step (a decode without a KV cache): every op's shape is new to
    openreg's Meta cache, as in any dynamic-shape workload. CPU eager and
    openreg alternate over the same lengths; each openreg round gets
    lengths it has not seen."""
    torch.manual_seed(0)
    steps = max(4, int(20 * scale))
    rounds = max(2, int(ROUNDS * scale))
    cpu_block = transformer_block(torch).eval()
    device_block = transformer_block(torch).to("openreg").eval()
    device_block.load_state_dict(cpu_block.state_dict())
    longest = 8 + (rounds + 1) * steps
    tokens = torch.randn(1, longest, 64)
    device_tokens = tokens.to("openreg")

    def run(block, inputs, lengths, sync):
        start = time.perf_counter()
        with torch.no_grad():
            for length in lengths:
                block(inputs[:, :length])
        sync()
        return (time.perf_counter() - start) / len(lengths)

    def lengths(round_index):
        first = 8 + round_index * steps
        return range(first, first + steps)

    # Warm-up on lengths the rounds do not use: imports, first launches.
    run(cpu_block, tokens, [4, 5], no_sync)
    run(device_block, device_tokens, [4, 5], torch.openreg.synchronize)
    cpu, device = [], []
    for index in range(rounds):
        cpu.append(run(cpu_block, tokens, lengths(index), no_sync))
        device.append(run(device_block, device_tokens, lengths(index),
                          torch.openreg.synchronize))
    return [("block forward, a new length each step", "CPU eager",
             sorted(cpu)[len(cpu) // 2], sorted(device)[len(device) // 2])]


SECTIONS = [model_training_steps, new_shape_each_step]
