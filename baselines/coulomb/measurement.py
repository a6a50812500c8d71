"""Measurement `kernel`: the paper's synthetic experiment, Appendix F.1 (`attnbench.baselines.coulomb.kernel_experiment`), no Transformer.

The cell's task and attention are not used; its seed is the global seed (the paper's 42) fixing
the design, the trials' noise and the methods' randomness. Runs on the CPU whatever the device.
Options: `KernelExperimentConfig`. Details carry every row, the scaling fits and the paper's
read-offs, so the report needs nothing else.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attnbench.baselines.coulomb import kernel_methods as km
from attnbench.baselines.coulomb.kernel_experiment import (
    PAPER_SCALING_EXPONENTS,
    PAPER_SMALLEST_SIGMA_ACCURACY,
    KernelExperimentConfig,
    bayes_accuracy,
    make_design,
    run_kernel_experiment,
    scaling_fits,
    summarise,
)
from attnbench.cell_spec import CellSpec
from attnbench.measurements import register_measurement
from attnbench.metrics import register_metric
from attnbench.progress import Progress

for _pattern, _direction, _text in (
    ("*/accuracy", "max", "test accuracy of one kernel method, mean over noise levels"),
    ("*/f1", "max", "test F1 of one kernel method, mean over noise levels"),
):
    register_metric(_pattern, _direction, _text, bounds=(0.0, 1.0), margin=0.01)
register_metric(
    "*/seconds",
    "min",
    "wall time of one kernel method",
    timed=True,
    bounds=(0.0, None),
    margin=0.1,
    margin_relative=True,
    format=".3g",
)


@register_measurement("kernel", config=KernelExperimentConfig)
def kernel(
    cell: CellSpec, options: KernelExperimentConfig, *, device: str = "cpu", progress: Progress | None = None
) -> dict[str, Any]:
    """Six methods over 10 noise levels, the lambda ablation and the runtime-scaling sweep (Figures 1, 2; Table 6)."""
    seed = cell.seed
    rows = run_kernel_experiment(options, seed=seed, progress=progress)
    design = make_design(options.num_samples, options.num_inputs, seed, options.test_fraction, options.split_seed)
    return {
        "metrics": summarise(rows),
        "details": {
            "rows": rows,
            "sigmas": options.sigmas(),
            "scaling_fits": scaling_fits(rows),
            "bayes_accuracy": bayes_accuracy(design),
            "paper": {
                "smallest_sigma_accuracy": PAPER_SMALLEST_SIGMA_ACCURACY,
                "scaling_exponents": PAPER_SCALING_EXPONENTS,
            },
            "config": dataclasses.asdict(options),
            "not_run": {} if km.mkl_available() else {"mkl": km.MKL_MISSING},
        },
    }
