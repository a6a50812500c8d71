"""Building the library: the system compiler, the flags, and the build cached by a hash of the source, the compiler
and the CPU (attnbench.cache).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from attnbench.cache import cache_root, seal_entry, verified_entry
from attnbench.kernels.native.abi import SOURCE, generated_definitions

FLAGS = (
    "-O3",
    "-march=native",
    "-std=c++17",
    "-shared",
    "-fPIC",
    "-pthread",
    "-ffp-contract=fast",
    *generated_definitions(),
)


def compiler() -> str | None:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def cpu_signature() -> str:
    """The CPU's model and flags (-march=native code is only valid on the CPU it was built for)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    keep = [line for line in lines if line.startswith(("model name", "flags", "Features", "CPU part"))]
    return "\n".join(dict.fromkeys(keep))


def cache_dir() -> Path:
    return cache_root() / "native"


def build(compiler: str) -> Path:
    """The cached library, built on first use."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256(
        "\0".join([SOURCE.read_text(), version, " ".join(FLAGS), platform.machine(), cpu_signature()]).encode()
    ).hexdigest()[:16]
    target = cache_dir() / f"fused_linear-{key}.so"
    if verified_entry(target, lambda p: True):  # a bad entry (empty, altered) is set aside and built again
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:  # build aside, then one atomic rename
        built = Path(tmp) / target.name
        result = subprocess.run([compiler, *FLAGS, "-o", str(built), str(SOURCE)], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{compiler} {' '.join(FLAGS)} failed: {result.stderr.strip()[-500:]}")
        os.replace(built, target)
    seal_entry(target)
    return target
