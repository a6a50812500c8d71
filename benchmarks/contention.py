"""How much each kernel call slows when other multi-threaded jobs share the cores, old tree against new.

Two worker processes, one importing a baseline tree (a git revision exported to a temporary folder) and one the
working tree, time the same forward calls (B 1, H 4, d 64, `threads` threads) in alternated bursts (A B, then
B A), so both builds see the same machine. First without added load, then with `--load-jobs` other torch jobs
(`--load-threads` threads each, a loop of 512 x 512 matmuls, bounded in time and killed afterwards). Prints one
table row per point: the median call of each build in each phase and the loaded / unloaded ratio, with the
machine's load average and a spinning thread's share of a core (`attnbench.timing.machine_load`) per phase.

    python benchmarks/contention.py --baseline HEAD~3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
POINTS = [
    ("elu-linear", {}, 64),
    ("elu-linear", {}, 1024),
    ("performer", {"num_features": 256}, 64),
    ("performer", {"num_features": 256}, 1024),
    ("nystromformer", {"num_landmarks": 64}, 64),
    ("nystromformer", {"num_landmarks": 64}, 1024),
    ("softmax", {}, 64),
    ("softmax", {}, 1024),
]
LOAD_JOB = """
import time, torch
torch.set_num_threads({threads})
a = torch.randn(512, 512)
end = time.time() + {seconds}
print("running", flush=True)
while time.time() < end:
    a @ a
"""


def worker(threads: int) -> None:
    """Serve timing requests on stdin ('point seconds' lines): answer each with its call times (ms) as JSON."""
    import torch

    from attnbench.measurements.efficiency import attention_call

    torch.set_num_threads(threads)
    calls = [attention_call(name, options, 1, 4, n, 64, "forward", "float32", "cpu", 0) for name, options, n in POINTS]
    for call in calls:
        for _ in range(3):
            call()
    print("ready", flush=True)
    for line in sys.stdin:
        index, seconds = line.split()
        call, times, start = calls[int(index)], [], time.perf_counter()
        while (time.perf_counter() - start < float(seconds) or len(times) < 3) and len(times) < 2000:
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e3)
        print(json.dumps(times), flush=True)


def export_tree(revision: str, into: Path) -> Path:
    """The files of `revision` (git archive) under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True).stdout
    path = into / "tree.tar"
    path.write_bytes(archive)
    with tarfile.open(path) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def start_worker(tree: Path, threads: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--worker", "--threads", str(threads)],
        cwd=tree,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"worker for {tree} did not start")
    return proc


def ask(proc: subprocess.Popen, index: int, seconds: float) -> list[float]:
    proc.stdin.write(f"{index} {seconds}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def measure(workers: dict[str, subprocess.Popen], rounds: int, seconds: float) -> dict[tuple[str, int], list[float]]:
    """Per (build, point) the pooled call times of `rounds` alternated bursts of `seconds` each."""
    from attnbench.timing import machine_load

    times: dict[tuple[str, int], list[float]] = {}
    loads = [machine_load()]
    names = list(workers)
    for r in range(rounds):
        for i in range(len(POINTS)):
            for name in names if r % 2 == 0 else names[::-1]:
                times.setdefault((name, i), []).extend(ask(workers[name], i, seconds))
        loads.append(machine_load())
        print(f"  round {r + 1}/{rounds} done, load average {loads[-1]['load_1m']:.1f}", file=sys.stderr, flush=True)
    times[("load", -1)] = loads
    return times


def start_load(jobs: int, threads: int, seconds: float) -> list[subprocess.Popen]:
    code = LOAD_JOB.format(threads=threads, seconds=seconds)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(jobs)]
    for proc in procs:  # torch imported and the loop begun
        proc.stdout.readline()
    return procs


def describe(loads: list[dict]) -> str:
    avail = [x["cpu_availability"] for x in loads]
    return (
        f"load average {np.median([x['load_1m'] for x in loads]):.2f}, a spinning thread got "
        f"{np.median(avail):.2f} of a core (median of {len(avail)} probes)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="HEAD", help="git revision of the old tree (default HEAD)")
    parser.add_argument("--threads", type=int, default=2, help="threads of the timed calls")
    parser.add_argument("--load-jobs", type=int, default=2)
    parser.add_argument("--load-threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4, help="alternated bursts per build and point and phase")
    parser.add_argument("--burst-s", type=float, default=0.25, help="seconds of calls per burst")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.threads)
        return
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        old = export_tree(args.baseline, Path(tmp))
        workers = {"old": start_worker(old, args.threads), "new": start_worker(ROOT, args.threads)}
        load: list[subprocess.Popen] = []
        try:
            print("without added load:", file=sys.stderr, flush=True)
            quiet = measure(workers, args.rounds, args.burst_s)
            for i, (name, _, n) in enumerate(POINTS):
                print(
                    f"  {name} {n}: old {np.median(quiet[('old', i)]):.3f} ms, new {np.median(quiet[('new', i)]):.3f}"
                    f" ms",
                    file=sys.stderr,
                    flush=True,
                )
            print("with added load:", file=sys.stderr, flush=True)
            phase_s = args.rounds * len(POINTS) * 2 * args.burst_s * 4 + 30
            load = start_load(args.load_jobs, args.load_threads, phase_s)
            loaded = measure(workers, args.rounds, args.burst_s)
        finally:
            for proc in load:
                proc.kill()
                proc.wait()
            for proc in workers.values():
                proc.stdin.close()
                proc.wait()
    print(
        f"baseline {args.baseline} (old) against the working tree (new); B 1, H 4, d 64, forward, "
        f"{args.threads} threads; median ms per call, {args.rounds} alternated bursts of {args.burst_s} s"
    )
    print(f"without added load: {describe(quiet[('load', -1)])}")
    print(f"with {args.load_jobs} jobs of {args.load_threads} torch threads: {describe(loaded[('load', -1)])}")
    print("| point | old | old loaded | old slowdown | new | new loaded | new slowdown |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for i, (name, options, n) in enumerate(POINTS):
        cells = []
        for build in ("old", "new"):
            a, b = np.median(quiet[(build, i)]), np.median(loaded[(build, i)])
            cells += [f"{a:.3f}", f"{b:.3f}", f"{b / a:.1f}x"]
        label = name + "".join(f" {k}={v}" for k, v in options.items())
        print(f"| {label}, {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
