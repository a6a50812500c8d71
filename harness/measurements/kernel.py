"""Measurement `kernel`: the paper's tabular kernel experiment (`harness.kernel_experiment`), no Transformer.

The cell's task and attention are not used; its seed fixes the design, the split, the random
features and the dynamics' noise. Runs on the CPU whatever the device (400-row problems).
Options: `KernelExperimentConfig`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from harness.kernel_experiment import KernelExperimentConfig, run_kernel_experiment, summarise
from harness.measurements import register_measurement
from harness.metrics import register_metric
from harness.train import Progress


for _pattern, _direction, _text in (("*/accuracy", "max", "test accuracy of one kernel method, mean over noise levels"),
                                    ("*/f1", "max", "test F1 of one kernel method, mean over noise levels"),
                                    ("*/seconds", "min", "wall time of one kernel method")):
    register_metric(_pattern, _direction, _text)


@register_measurement("kernel", config=KernelExperimentConfig)
def kernel(cell: dict[str, Any], options: KernelExperimentConfig, *, device: str = "cpu",
           progress: Progress | None = None) -> dict[str, Any]:
    """Logistic regression, RBF SVM, fixed and learned random features across label-noise levels."""
    rows = run_kernel_experiment(options, seed=int(cell.get("seed", 0)), progress=progress)
    return {"metrics": summarise(rows),
            "details": {"rows": rows, "sigmas": options.sigmas(), "config": dataclasses.asdict(options)}}
