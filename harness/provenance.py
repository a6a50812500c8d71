"""Provenance recorded with every run and cell: code version, packages, machine, device, time."""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import attnbench

PACKAGES = ("numpy", "datasets", "tokenizers", "pandas", "scikit-learn", "pyyaml", "rich", "ray")


def now() -> str:
    """The current UTC time, ISO 8601 to the millisecond."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def resolve_device(device: str) -> str:
    """'cpu', 'cuda' or 'auto' (cuda when available) -> 'cpu' or 'cuda'."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        from attnbench.errors import UserError

        raise UserError("--device cuda was asked for but torch sees no CUDA device; use --device cpu or auto")
    return device


@functools.lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the repository holding the harness package; outside git (e.g. a copied
    tree on a remote machine) the commit named by $ATTNBENCH_GIT_COMMIT, dirtiness unknown."""
    root = Path(attnbench.__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("ATTNBENCH_GIT_COMMIT"), None
    return commit, bool(status.strip())


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU model name (from /proc/cpuinfo where available)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


ISA_PREFIXES = (
    "sse",
    "ssse",
    "avx",
    "fma",
    "f16c",
    "amx",
    "bmi",
    "popcnt",
    "aes",
    "sha",
    "vnni",
    "neon",
    "asimd",
    "sve",
)


@functools.lru_cache(maxsize=1)
def cpu_instruction_sets() -> str:
    """The CPU's vector and arithmetic instruction-set extensions (the /proc/cpuinfo flags that `-march=native`
    builds the native kernels for: sse4_2, avx2, avx512f, ...), sorted and space-separated; the machine name where
    the OS does not list them. Two CPUs that differ here may round the same kernel differently."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = line.split(":", 1)[1].split()
                return " ".join(sorted({f for f in flags if f.startswith(ISA_PREFIXES)}))
    except OSError:
        pass
    return platform.machine()


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one, else all)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages results may depend on (None = not installed)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def device_name(device: str) -> str:
    """'cpu' or 'cuda: <GPU name>'."""
    import torch

    if device.startswith("cuda"):
        return f"cuda: {torch.cuda.get_device_name(torch.device(device))}"
    return "cpu"


def machine_provenance(device: str, command: str | None = None) -> dict[str, Any]:
    """Everything about code, packages and machine that could change a result (command: the CLI line)."""
    import torch

    from attnbench.kernels import native

    commit, dirty = git_state()
    return {
        "attnbench_version": attnbench.__version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "packages": package_versions(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_isa": cpu_instruction_sets(),
        "cpu_count": os.cpu_count(),
        "device": device_name(device),
        "threads": torch.get_num_threads(),
        "native_kernels": native.status(),
        "hostname": socket.gethostname(),
        "command": command if command is not None else " ".join(sys.argv),
    }
