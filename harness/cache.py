"""The one cache root of attnbench: `$ATTNBENCH_CACHE`, else ~/.cache/attnbench.

Below it live the trained tokenizers (tokenizers/) and the compiled kernel library (native/). Every entry is
written atomically (a temporary file in the same folder, then a rename) with a sha256 beside it, and verified
when it is read: a bad entry (empty, truncated, altered) is set aside and built again, never trusted and
never fatal.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

CACHE_ENV = "ATTNBENCH_CACHE"


def cache_root(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: `override` (a task's cache_dir option), else $ATTNBENCH_CACHE, else ~/.cache/attnbench."""
    return Path(override or os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "attnbench").expanduser()


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def store_entry(path: Path, data: bytes) -> None:
    """Write a cache entry and its sha256 atomically (readers see no entry, or the whole one with its digest)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for target, content in ((path, data), (_digest_path(path), hashlib.sha256(data).hexdigest().encode())):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(content)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def seal_entry(path: Path) -> None:
    """Write the sha256 beside an entry that was itself put in place atomically (a built library)."""
    digest = _sha256(path).encode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(digest)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, _digest_path(path))


def verified_entry(path: Path, unsealed_ok: Callable[[Path], bool] | None = None) -> bool:
    """Whether the entry exists and matches the sha256 written beside it; a bad one is set aside (renamed with
    '.bad-<time>', never deleted) so that it is built again. An entry written before digests were (no digest file)
    is kept, and sealed, when `unsealed_ok(path)` says it is whole."""
    if not path.is_file():
        return False
    digest = _digest_path(path)
    try:
        if not digest.exists() and path.stat().st_size and unsealed_ok is not None and unsealed_ok(path):
            seal_entry(path)
            return True
        good = digest.is_file() and digest.read_text().strip() == _sha256(path)
    except OSError:
        good = False
    if not good:
        set_aside(path)
    return good


def set_aside(path: Path) -> None:
    """Rename a bad entry (and its digest) out of the way, keeping it for inspection."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    for bad in (path, _digest_path(path)):
        try:
            os.replace(bad, bad.with_name(f"{bad.name}.bad-{stamp}"))
        except OSError:
            pass
