"""The public surface of attnbench, in one place: the registries (report sections too), option and error types,
the feature-map base class, the cell a measurement is given (`CellSpec`), the capture of attention inputs a learning
phase trains on (`AttentionCapture`), running a suite, loading its results and drawing verdicts from them
(`compare`, `standings`: the inference engine, `attnbench.decisions`). `attnbench.NAME` reads from here (lazily:
`import attnbench` alone stays light); everything else is internal and may move.

    import attnbench
    attnbench.attention_names("*linear*")
    suite = attnbench.load_suite("smoke")
    attnbench.run_suite(suite, Path("runs/smoke"), attnbench.RunOptions())
    df = attnbench.load_results("runs/smoke")
    attnbench.compare("runs/smoke", metric="accuracy", reference="softmax")
"""

from __future__ import annotations

from attnbench.attention_capture import AttentionCapture
from attnbench.cell_spec import CellSpec
from attnbench.decisions.api import compare, standings
from attnbench.errors import ConfigError, UnknownNameError, UserError
from attnbench.executor import RunOptions, RunSummary, run_suite
from attnbench.kernels.linear.attention import LinearKernelAttention
from attnbench.kernels.linear.contract import FeatureMap
from attnbench.measurements import register_measurement
from attnbench.metrics import register_metric
from attnbench.options import option, require
from attnbench.plan import Suite
from attnbench.registry import (
    AttentionConfig,
    Capabilities,
    attention_entry,
    attention_names,
    build_attention,
    register_attention,
    register_learning_phase,
)
from attnbench.report import write_leaderboard, write_report
from attnbench.report.plot import Plot
from attnbench.report.sections import ReportContext, register_report_section
from attnbench.report.table import Table
from attnbench.results import load_results
from attnbench.suite import load_suite, suite_names
from attnbench.tasks import load_task, register_task, task_names

__all__ = [
    "AttentionCapture",
    "AttentionConfig",
    "Capabilities",
    "CellSpec",
    "ConfigError",
    "FeatureMap",
    "LinearKernelAttention",
    "Plot",
    "ReportContext",
    "RunOptions",
    "RunSummary",
    "Suite",
    "Table",
    "UnknownNameError",
    "UserError",
    "attention_entry",
    "attention_names",
    "build_attention",
    "compare",
    "load_results",
    "load_suite",
    "load_task",
    "option",
    "register_attention",
    "register_learning_phase",
    "register_measurement",
    "register_metric",
    "register_report_section",
    "register_task",
    "require",
    "run_suite",
    "standings",
    "suite_names",
    "task_names",
    "write_leaderboard",
    "write_report",
]
