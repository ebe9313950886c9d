"""Why Engram-on-disk staging still holds the host: a stream-side wait hangs.

Patch 0006 stages a step's rows in ``prepare_inputs``, and the host waits
there for the step's hash ids, that is for the GPU work queued before them.
The obvious way out is to let the GPU wait instead: enqueue
``cuStreamWaitValue32`` on the compute stream and have a staging thread
release it (``cuStreamWriteValue32`` on a side stream) once the rows are
copied. This probe measures both halves on a CUDA GPU:

1. the host hold of enqueueing the wait behind 20 ms of GPU work, and
2. what happens when a kernel module loads (a Triton kernel's first launch)
   while the wait is pending, as a new specialisation does in production.

Measured on an NVIDIA H200 (driver 580.159.04, torch 2.11, triton 3.6): the
hold is about 0.1 ms against 20 ms, and step 2 hangs with
``CUDA_MODULE_LOADING=LAZY`` and ``EAGER`` alike: the launch does not return
until the stream moves, and the thread that would release it is not running
yet. A GPU hang in serving is worse than a held host, so the patch keeps the
synchronous wait. Run: ``python3 benchmarks/probe_stream_wait.py`` (exit 3
with "hang" after the watchdog, exit 0 if a future stack no longer hangs).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time

import torch
import triton
import triton.language as tl

CU_STREAM_WAIT_VALUE_EQ = 1


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def driver_call(name: str) -> ctypes._CFuncPtr:
    fn = getattr(ctypes.CDLL("libcuda.so.1"), name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    return fn


def watchdog(seconds: float) -> None:
    def fire() -> None:
        time.sleep(seconds)
        print(f"hang: nothing moved for {seconds:.0f} s", flush=True)
        os._exit(3)

    threading.Thread(target=fire, daemon=True).start()


def main() -> None:
    wait, write = driver_call("cuStreamWaitValue32_v2"), driver_call("cuStreamWriteValue32_v2")
    main_stream, side = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.set_stream(main_stream)
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    x = torch.zeros(1024, device="cuda")
    x.add_(0)  # load the add kernel before any wait
    torch.cuda.synchronize()
    cycles = int(torch.cuda.get_device_properties(0).clock_rate * 1e3 * 0.020)
    print(f"{torch.cuda.get_device_name()}, CUDA_MODULE_LOADING={os.environ.get('CUDA_MODULE_LOADING', 'default')}")
    watchdog(25)
    for step, fresh_kernel in ((1, False), (2, False), (3, True)):
        torch.cuda._sleep(cycles)
        queued = torch.cuda.Event()
        queued.record()
        start = time.perf_counter()
        rc = wait(main_stream.cuda_stream, flag.data_ptr(), step, CU_STREAM_WAIT_VALUE_EQ)
        assert rc == 0, f"cuStreamWaitValue32 returned {rc}"
        if fresh_kernel:
            print("step 3: first launch of a Triton kernel while the wait is pending", flush=True)
            add_one[(8,)](x, 1024, BLOCK=128)
        else:
            x.add_(1)
        hold = time.perf_counter() - start

        def release(step: int = step, queued: torch.cuda.Event = queued) -> None:
            queued.synchronize()
            with torch.cuda.stream(side):
                assert write(side.cuda_stream, flag.data_ptr(), step, 0) == 0

        thread = threading.Thread(target=release)
        thread.start()
        torch.cuda.synchronize()
        thread.join()
        print(f"step {step}: host hold {hold * 1e3:.3f} ms with 20 ms queued", flush=True)
    assert x[0].item() == 3.0
    print("no hang")


if __name__ == "__main__":
    main()
