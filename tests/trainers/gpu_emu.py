#!/usr/bin/python3
"""inflight's model and fault on an emulated CUDA driver: the GPU path end to end without a GPU.

With NANWATCH_CUDA_LIB naming the emulated libcuda (build/tests/libnwemu_cuda.so) the trainer
initialises it (cuInit: with CUDA_INJECTION64_PATH set, the driver loads that library and calls
its InitializeInjection), finds cuLaunchKernel through cuGetProcAddress as the CUDA runtime
does, and launches a kernel that does nothing on stream 0 from a forward hook on every module
(the loss module included) and from a gradient hook on every parameter: the kernels a module
launches on its stream. The emulated device's memory is the process's own, so the library's
scans of CPU tensors (NANWATCH_TEST_GPU_DEVICE=cpu in the daemon) read their real data.

A GPU's caching allocator hands a freed block out again only to a later kernel of its stream,
after the scans enqueued before it; the CPU allocator writes into memory as it frees it. So the
module hooks also keep every module's inputs and output alive until the next forward pass.

Without NANWATCH_CUDA_LIB it is inflight.py with the same hooks, launching nothing. At exit it
prints "EMU launches L scans S modules M injected I" on stderr (what the driver saw).
"""
import atexit
import ctypes
import os
import sys

import common
import inflight

DUMMY_KERNEL = 0xd0  # a CUfunction the emulated driver runs as a kernel that does nothing


class Driver:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        if self.lib.cuInit(0):
            sys.exit("gpu_emu: cuInit failed")
        self.fn = ctypes.c_void_p()
        if self.lib.cuGetProcAddress_v2(b"cuLaunchKernel", ctypes.byref(self.fn), 13000,
                                        ctypes.c_ulonglong(0), None):
            sys.exit("gpu_emu: cuGetProcAddress_v2(cuLaunchKernel) failed")
        u = ctypes.c_uint
        self.launch_fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, u, u, u, u, u, u, u,
                                          ctypes.c_void_p, ctypes.c_void_p,
                                          ctypes.c_void_p)(self.fn.value)
        atexit.register(self.report)

    def launch(self):
        if self.launch_fn(DUMMY_KERNEL, 1, 1, 1, 32, 1, 1, 0, None, None, None):
            sys.exit("gpu_emu: cuLaunchKernel failed")

    def report(self):
        s = (ctypes.c_ulonglong * 4)()
        self.lib.emu_stats(s)
        print("EMU launches %d scans %d modules %d injected %d" % tuple(s), file=sys.stderr,
              flush=True)


class GpuEmu(inflight.Inflight):
    """inflight's MLP, every module and parameter gradient launching a kernel."""

    def __init__(self):
        path = os.environ.get("NANWATCH_CUDA_LIB")
        self.driver = Driver(path) if path else None
        self.kept = []

    def launch(self):
        if self.driver is not None:
            self.driver.launch()

    def hook(self, module, inputs, output):
        self.kept.append((inputs, output))
        self.launch()

    def pre_root(self, module, inputs):
        self.kept.clear()

    def grad_hook(self, grad):
        self.launch()

    def model(self):
        m = super().model()
        m.register_forward_pre_hook(self.pre_root)
        for mod in m.modules():
            mod.register_forward_hook(self.hook)
        for p in m.parameters():
            p.register_hook(self.grad_hook)
        return m

    def loss(self):
        fn = super().loss()
        fn.register_forward_hook(self.hook)
        return fn


if __name__ == "__main__":
    common.main(GpuEmu())
