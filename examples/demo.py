"""The main job: a daemon, `import torch` alone, two devices, two processes
(one using the daemon on its own, one sharing a device tensor with this
process through torch.multiprocessing, no copy).

Started by `make demo`. Starts its own openreg-daemon on a private socket
(torch_openreg.testing.Daemon), runs the work, and stops the daemon by pid.
"""

import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import os, torch                      # no other import: autoload
    x = torch.arange(6.0, device="openreg:1").reshape(2, 3)
    y = (x * 10).sum(dim=0)
    print(f"  [child pid {os.getpid()}] openreg:1 says {y.tolist()}")
""")


def _double_in_place(queue, done):
    import torch

    x = queue.get()  # the sender's device memory, opened by IPC handle
    x.mul_(2)
    torch.openreg.synchronize()
    done.put(os.getpid())


def main():
    # Importing torch_openreg.testing loads torch (and autoloads openreg)
    # but connects to nothing until the first device use.
    from torch_openreg.testing import Daemon

    with Daemon(devices=2, memory_per_device="1GiB") as daemon:
        daemon.use()
        print(f"openreg-daemon pid {daemon.pid} on {daemon.socket}")
        import torch

        print(f"openreg devices: {torch.openreg.device_count()} "
              f"({torch.openreg.get_device_name(0)})")
        a = torch.randn(256, 256)
        b = torch.randn(256, 256)
        on0 = a.to("openreg:0") @ b.to("openreg:0")
        on1 = (a.to("openreg:1") + 1).relu().sum(dim=1)
        torch.testing.assert_close(on0.cpu(), a @ b, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(on1.cpu(), (a + 1).relu().sum(dim=1))
        moved = on0.to("openreg:1")
        print(f"matmul on {on0.device}, reduction on {on1.device}, "
              f"copy to {moved.device}: results match CPU")
        print(f"a small tensor: {torch.tensor([1.0, 2.5], device='openreg')}")

        child = subprocess.run([sys.executable, "-c", CHILD], env=os.environ,
                               capture_output=True, text=True, timeout=300)
        print(child.stdout.rstrip())
        if child.returncode != 0:
            sys.exit(f"demo: second process failed:\n{child.stderr}")

        import torch.multiprocessing as mp

        context = mp.get_context("spawn")
        queue, done = context.Queue(), context.Queue()
        sharer = context.Process(target=_double_in_place, args=(queue, done))
        sharer.start()
        shared = torch.arange(4.0, device="openreg:0")
        queue.put(shared)
        pid = done.get(timeout=300)
        sharer.join(60)
        if shared.cpu().tolist() != [0.0, 2.0, 4.0, 6.0]:
            sys.exit(f"demo: shared tensor reads {shared.cpu().tolist()}")
        print(f"  [child pid {pid}] doubled a tensor it received through a "
              f"Queue: {shared.cpu().tolist()} here (same device memory)")

        stats = torch.openreg.daemon_stats()
        for device in stats["devices"]:
            print(f"  daemon device {device['device']}: "
                  f"{device['kernels_executed']} kernels, "
                  f"{device['copies_executed']} copies, "
                  f"{device['allocated_bytes']} bytes allocated now")
        print(f"  sessions served: {stats['sessions_served']}")
        print("demo: OK")


if __name__ == "__main__":
    main()
