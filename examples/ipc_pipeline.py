"""A producer/consumer pipeline between two processes on one openreg device,
ordered by interprocess events, with no host synchronization per batch.

The producer (this process) fills two shared device buffers in turn; the
consumer (a spawned process) sums each batch on the device. Each side
records an interprocess event after its work and tells the other side (an
int through a Queue) that the record is enqueued; the other side's stream
waits for that event on the device before it touches the buffer. This is
the CUDA IPC-event pattern: a wait takes the record that was enqueued when
it was issued, so the host messages only say "the record exists".

    python3 examples/ipc_pipeline.py [--batches N]
"""

import argparse

import torch
import torch.multiprocessing as mp

ELEMENTS = 1 << 16


def consume(batches, to_consumer, to_producer, result):
    buffers, filled = to_consumer.get()
    consumed = [torch.openreg.Event(interprocess=True) for _ in buffers]
    to_producer.put(consumed)
    total = torch.zeros((), dtype=torch.float64, device=buffers[0].device)
    for batch in range(batches):
        slot = to_consumer.get()  # the producer's record for it is enqueued
        filled[slot].wait()  # this stream waits on the device
        total += buffers[slot].sum(dtype=torch.float64)
        consumed[slot].record()
        to_producer.put(slot)
    result.put(total.item())  # the one host synchronization
    to_consumer.get()  # keep the events alive until the producer is done


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=50)
    batches = parser.parse_args().batches

    context = mp.get_context("spawn")
    to_consumer, to_producer, result = (context.Queue(), context.Queue(),
                                        context.Queue())
    consumer = context.Process(
        target=consume, args=(batches, to_consumer, to_producer, result))
    consumer.start()

    buffers = [torch.empty(ELEMENTS, device="openreg") for _ in range(2)]
    filled = [torch.openreg.Event(interprocess=True) for _ in buffers]
    to_consumer.put((buffers, filled))
    consumed = to_producer.get()
    # The batch number, kept on the device: a scalar argument that changes
    # every call would make each launch a first (checked, synchronous) one.
    step = torch.zeros((), device="openreg")
    for batch in range(batches):
        slot = batch % 2
        if batch >= 2:
            assert to_producer.get() == slot  # its record is enqueued
            consumed[slot].wait()  # do not overwrite what is being read
        buffers[slot].zero_().add_(step)
        step.add_(1)
        filled[slot].record()
        to_consumer.put(slot)
    total = result.get(timeout=300)
    to_consumer.put(None)
    consumer.join(60)
    expected = float(ELEMENTS * sum(range(batches)))
    print(f"ipc_pipeline: {batches} batches, consumer's sum {total:.0f}, "
          f"expected {expected:.0f}: {'OK' if total == expected else 'WRONG'}")
    return 0 if total == expected and consumer.exitcode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
