"""torch_measure.py - the PyTorch side of bench/bench_stats.py's method:
timed windows with CUDA events, and the process's device memory as the
driver sees it, the figure mgrun reports as "device (driver)"
(core/runtime/devmem.h), beside torch.cuda.max_memory_reserved/allocated.

Driver memory, best first (the same names as mgrun's):
  nvml-process        NVML (pynvml if installed, else libnvidia-ml.so.1
                      through ctypes, the library mgrun dlopens;
                      MG_NVML_LIB names another): this PID's used memory
  nvml-device         PID not listed (a container's PID namespace): the
                      device's used memory less its use before this
                      process's CUDA context (open() before CUDA starts)
  nvidia-smi-process  no NVML library: `nvidia-smi --query-compute-apps=
                      pid,used_memory` parsed (MiB resolution, slower)
  cudaMemGetInfo      none of those: torch.cuda.mem_get_info deltas from
                      just after the context, at window boundaries
  none                not measured: peak None, never a made-up 0
A thread samples every MG_DEVMEM_PERIOD_MS = 10 ms, as mgrun's (NVML;
nvidia-smi as fast as it answers; 0: window boundaries only); the window
boundaries sample too. Whole-process peak, warm-up included,
as mgrun's: each configuration runs in its own process.

Importing this module does not import torch (the CPU tests use it).
"""
import ctypes
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_stats  # noqa: E402


def parse_smi_apps(text, pid):
    """Used bytes of pid from `nvidia-smi --query-compute-apps=pid,
    used_memory --format=csv,noheader,nounits` output (MiB), or None."""
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit() and int(parts[0]) == pid:
            try:
                return int(float(parts[1]) * 2**20)
            except ValueError:
                return None
    return None


def nvml_index(local_rank=0):
    """NVML's index (or UUID) of this process's GPU: CUDA_VISIBLE_DEVICES'
    entry, else the local rank (NVML and CUDA agree on identical GPUs)."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if vis:
        return vis.split(",")[local_rank].strip()
    return str(local_rank)


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class _NvmlProc(ctypes.Structure):  # nvmlProcessInfo_t (v2 layout)
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]


class CNvml:
    """The few NVML calls needed, through ctypes (no pynvml)."""

    def __init__(self, index):
        path = os.environ.get("MG_NVML_LIB") or "libnvidia-ml.so.1"
        self.lib = ctypes.CDLL(path)
        init = getattr(self.lib, "nvmlInit_v2", None) or self.lib.nvmlInit
        if init() != 0:
            raise OSError("nvmlInit failed")
        self.dev = ctypes.c_void_p()
        if index.startswith(("GPU-", "MIG-")):
            rc = self.lib.nvmlDeviceGetHandleByUUID(index.encode(), ctypes.byref(self.dev))
        else:
            rc = self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(int(index)),
                                                        ctypes.byref(self.dev))
        if rc != 0:
            raise OSError(f"NVML has no device {index} ({rc})")
        self.procs = getattr(self.lib, "nvmlDeviceGetComputeRunningProcesses_v3", None) or \
            self.lib.nvmlDeviceGetComputeRunningProcesses_v2

    def device_used(self):
        m = _NvmlMemory()
        if self.lib.nvmlDeviceGetMemoryInfo(self.dev, ctypes.byref(m)) != 0:
            raise OSError("nvmlDeviceGetMemoryInfo failed")
        return int(m.used)

    def process_used(self, pid):
        arr = (_NvmlProc * 256)()
        n = ctypes.c_uint(256)
        if self.procs(self.dev, ctypes.byref(n), arr) != 0:
            return None
        for i in range(min(n.value, 256)):
            if arr[i].pid == pid and arr[i].used != 2**64 - 1:
                return int(arr[i].used)
        return None


class PyNvml:
    """The same calls through pynvml."""

    def __init__(self, index):
        import pynvml
        pynvml.nvmlInit()
        self.n = pynvml
        self.dev = (pynvml.nvmlDeviceGetHandleByUUID(index)
                    if index.startswith(("GPU-", "MIG-"))
                    else pynvml.nvmlDeviceGetHandleByIndex(int(index)))

    def device_used(self):
        return int(self.n.nvmlDeviceGetMemoryInfo(self.dev).used)

    def process_used(self, pid):
        try:
            procs = self.n.nvmlDeviceGetComputeRunningProcesses(self.dev)
        except self.n.NVMLError:
            return None
        for p in procs:
            if p.pid == pid and p.usedGpuMemory is not None:
                return int(p.usedGpuMemory)
        return None


class DeviceMemory:
    """The driver's view of this process's device memory; see the module
    docstring. open() before torch touches CUDA, context_ready() after."""

    def __init__(self, local_rank=0, period_s=None, smi="nvidia-smi"):
        self.pid = os.getpid()
        self.index = nvml_index(local_rank)
        if period_s is None:
            period_s = float(os.environ.get("MG_DEVMEM_PERIOD_MS") or 10) / 1e3
        self.period_s = period_s
        self.smi = smi
        self.method = "none"
        self.why = "not opened"
        self.peak = None
        self.at_start = None
        self.samples = 0
        self._base = 0
        self._nvml = None
        self.nvml = None  # which NVML binding: PyNvml or CNvml
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()

    # -- readings ---------------------------------------------------------
    def _nvml_process(self):
        return self._nvml.process_used(self.pid)

    def _nvml_device(self):
        return self._nvml.device_used()

    def _smi_process(self):
        try:
            out = subprocess.run(
                [self.smi, "--query-compute-apps=pid,used_memory",
                 "--format=csv,noheader,nounits", "-i", self.index],
                capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        return parse_smi_apps(out, self.pid)

    def _reading(self):
        if self.method == "nvml-process":
            return self._nvml_process()
        if self.method == "nvml-device":
            return max(0, self._nvml_device() - self._base)
        if self.method == "nvidia-smi-process":
            return self._smi_process()
        if self.method == "cudaMemGetInfo":
            import torch
            free, total = torch.cuda.mem_get_info()
            return max(0, total - free - self._base)
        return None

    # -- life cycle -------------------------------------------------------
    def open(self):
        """Choose the method (before CUDA starts in this process)."""
        why = []
        for kind in (PyNvml, CNvml):
            try:
                self._nvml = kind(self.index)
                self._base = self._nvml.device_used()
                self.method, self.why = "nvml-device", "pending context"
                self.nvml = kind.__name__
                return self
            except Exception as e:  # no pynvml, no driver, no device
                why.append(f"{kind.__name__}: {type(e).__name__}: {e}")
        self.why = f"no NVML ({'; '.join(why)})"
        if self.smi and shutil.which(self.smi):
            self.method = "nvidia-smi-process"
            self.why = self.why + "; nvidia-smi"
            return self
        self.why += f"; no {self.smi or 'nvidia-smi'}"
        self.method = "cudaMemGetInfo"
        return self

    def context_ready(self):
        """After CUDA started: settle the method, take the first reading."""
        if self.method == "nvml-device" and self._nvml_process() is not None:
            self.method, self.why = "nvml-process", ""
        elif self.method == "nvml-device":
            self.why = (f"PID {self.pid} not in NVML's process list "
                        "(another PID namespace?): whole device")
        elif self.method == "nvidia-smi-process" and self._smi_process() is None:
            self.method = "cudaMemGetInfo"
            self.why += f" does not list PID {self.pid}"
        if self.method == "cudaMemGetInfo":
            try:
                import torch
                free, total = torch.cuda.mem_get_info()
                self._base = total - free  # the context is not in the figure
            except Exception as e:
                self.method = "none"
                self.why += f"; cudaMemGetInfo failed ({e})"
        self.at_start = self._reading()
        self.sample()
        return self

    def sample(self):
        v = self._reading()
        if v is None:
            return
        with self._lock:
            self.samples += 1
            if self.peak is None or v > self.peak:
                self.peak = v

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)

    def start(self):
        """Sample on a thread (not for cudaMemGetInfo: window boundaries
        only, as mgrun)."""
        if self.period_s > 0 and self.method in (
                "nvml-process", "nvml-device", "nvidia-smi-process"):
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def stop(self):
        if self._thread:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self.sample()
        return self

    def result(self):
        """JSON-ready: method, peak bytes (None: not measured), at start,
        why a fallback or nothing."""
        return {"method": self.method, "nvml": self.nvml,
                "driver_peak": self.peak if self.method != "none" else None,
                "at_start": self.at_start, "samples": self.samples,
                "why": self.why}


def cuda_torch():
    """torch, or None after printing why not (no PyTorch, no CUDA device):
    the kernel benchmarks' first line, so they fail with a reason."""
    try:
        import torch
    except ImportError as e:
        print(f"FAIL: no PyTorch ({e})")
        return None
    if not torch.cuda.is_available():
        print("FAIL: PyTorch sees no CUDA device")
        return None
    return torch


def time_windows(step, windows=5, steps=20, mem=None):
    """Seconds per step of `windows` windows of `steps` steps, each timed
    with CUDA events around the window; summarised by bench_stats."""
    import torch
    out = []
    for _ in range(windows):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(steps):
            step()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3 / steps)
        if mem:
            mem.sample()
    return bench_stats.summarize(out)


def measure(step, windows, steps, warm, mem):
    """The baselines' one method: `warm` steps (timed, synchronized),
    the allocator's peak reset, then time_windows; the fields every
    *_l4l.py script prints (warmup_s, step_s, torch_memory,
    device_memory: mem stopped)."""
    import torch
    t0 = time.perf_counter()
    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()  # the steady steps' peak
    t = time_windows(step, windows, steps, mem)
    return dict(warmup_s=round(warm_s, 2), step_s=t,
                torch_memory=torch_memory(),
                device_memory=mem.stop().result())


def torch_memory():
    """The caching allocator's peaks since the last reset (bytes)."""
    import torch
    return {"max_reserved": torch.cuda.max_memory_reserved(),
            "max_allocated": torch.cuda.max_memory_allocated()}


def across_ranks(windows, torch_mem, device_mem):
    """A distributed job's figures from every rank's own (collective: every
    rank calls it): the slowest rank's window, since a synchronous step
    goes at its pace, summarised; the largest rank's allocator peaks and
    driver peak (None when any rank could not measure it)."""
    import torch
    import torch.distributed as dist
    w = torch.tensor(windows, device="cuda")
    dist.all_reduce(w, op=dist.ReduceOp.MAX)
    drv = device_mem["driver_peak"]
    mine = -1 if drv is None else drv
    peaks = torch.tensor([torch_mem["max_reserved"], torch_mem["max_allocated"], mine],
                         device="cuda", dtype=torch.float64)
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
    lo = torch.tensor([mine], device="cuda", dtype=torch.float64)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    return {"step_s": bench_stats.summarize(w.tolist()),
            "max_reserved_rank": int(peaks[0].item()),
            "max_allocated_rank": int(peaks[1].item()),
            "driver_peak_rank": int(peaks[2].item()) if lo.item() >= 0 else None}
