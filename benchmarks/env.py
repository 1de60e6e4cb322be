"""Where a run happens: GPUs and driver (if any), host, package versions, command line."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shlex
import socket
import sys
from dataclasses import dataclass, field
from importlib import metadata

PACKAGES = ("nbgpu", "numpy", "pandas", "psutil", "nvidia-ml-py", "torch", "ipywidgets",
            "bqplot", "ipykernel", "jupyter_client", "ipython", "nvitop", "pyarrow")


@dataclass
class GpuInfo:
    """What NVML and torch say about this machine's GPUs; ``reason`` says why there are none."""

    names: list[str] = field(default_factory=list)
    driver: str = ""
    nvml_version: str = ""
    cuda_runtime: str = ""
    torch_cuda_devices: int = 0
    reason: str = ""

    @property
    def usable(self) -> bool:
        return bool(self.names) and self.torch_cuda_devices > 0 and not self.reason


def probe_gpus() -> GpuInfo:
    """Ask NVML (directly, not through nbgpu) and torch which GPUs this process can use."""
    info = GpuInfo()
    try:
        import pynvml
    except ImportError:
        info.reason = "nvidia-ml-py (pynvml) is not installed"
        return info
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        info.reason = f"NVML unavailable: {exc}"
        return info
    try:
        info.driver = _text(pynvml.nvmlSystemGetDriverVersion())
        info.nvml_version = _text(pynvml.nvmlSystemGetNVMLVersion())
        for i in range(pynvml.nvmlDeviceGetCount()):
            info.names.append(_text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))))
    finally:
        pynvml.nvmlShutdown()
    if not info.names:
        info.reason = "NVML reports no GPU"
        return info
    try:
        import torch
    except ImportError:
        info.reason = "torch is not installed"
        return info
    if not torch.cuda.is_available():
        info.reason = "torch.cuda is not available (CPU build of torch or no usable driver)"
        return info
    info.torch_cuda_devices = torch.cuda.device_count()
    info.cuda_runtime = str(torch.version.cuda)
    return info


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def package_versions() -> dict[str, str | None]:
    """Installed version of each package that matters here (None: not installed)."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def host_info() -> dict:
    """Host name, OS, CPU model and count, Python."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"hostname": socket.gethostname(), "os": platform.platform(), "cpu_model": cpu,
            "cpu_count": os.cpu_count(), "python": sys.version.split()[0]}


def command_line() -> str:
    """The command that started this run, as one could retype it."""
    args = sys.argv[1:]
    return " ".join(["python", "-m", "benchmarks", *map(shlex.quote, args)])


def device_slug(gpus: GpuInfo) -> str:
    """File-name part naming the machine: e.g. ``nvidia-h200``, ``2x-nvidia-h200`` or ``cpu``."""
    if not gpus.usable:
        return "cpu"
    name = re.sub(r"[^a-z0-9]+", "-", gpus.names[0].lower()).strip("-")
    return name if len(gpus.names) == 1 else f"{len(gpus.names)}x-{name}"


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)
