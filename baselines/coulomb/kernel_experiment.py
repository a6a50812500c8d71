"""The paper's synthetic experiment (docs/paper.md "Synthetic experiment (Appendix F.1)"), no Transformer.

Design: X (n, p) standard normal from the global seed (the cell's seed; the paper's is 42),
logit l(x) = 1.5 sin(pi x1) + 0.8 x2^2 - x3 x4 + 0.5 sin(3 x5) + 1{p > 5} x_{6:p}^T w with
w ~ N(0, 0.3^2 I) drawn once, labels y ~ Bernoulli(sigmoid(l(x) + xi)), xi ~ N(0, sigma^2). One
70/30 split (random_state 0) for every trial and level; per trial only the noise (xi and the
Bernoulli draw) and the methods' randomness are redrawn. Within a trial one standard-normal draw
and one uniform draw serve every sigma (**ours**: the paper does not say), so levels differ only in
sigma. Three parts: the noise sweep (every method, `attnbench.baselines.coulomb.kernel_methods`), the lambda ablation
(Langevin particles only) and the runtime-scaling sweep over n with fitted exponents t ~ n^gamma.
"""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
from scipy.special import expit

from attnbench.baselines.coulomb import kernel_methods as km
from attnbench.baselines.coulomb.kernel_particles import ParticleDynamics
from attnbench.options import option, require
from attnbench.progress import Progress

Row = dict[str, Any]

PAPER_SMALLEST_SIGMA_ACCURACY = {
    "langevin lambda=0.5": 0.655,
    "rbf-svm gamma=0.5": 0.63,
    "rff": 0.56,
    "importance-sampling": 0.48,
}
"""Figure 1 read off at the smallest sigma (approximate; docs/paper.md): the Langevin curve is "Alg-1"."""
PAPER_SCALING_EXPONENTS = {
    "mkl": 1.96,
    "rbf-svm gamma=0.5": 1.48,
    "importance-sampling": 0.97,
    "rff": 0.80,
    "langevin lambda=0.5": 0.73,
    "logistic": 0.02,
}
"""Table 6: fitted exponents of wall time t ~ n^gamma, n = 100 to 20,000."""


@dataclasses.dataclass
class KernelExperimentConfig:
    """Design, noise levels, methods, particle dynamics and sweeps of Appendix F.1 (defaults: the paper's)."""

    uses_task: ClassVar[bool] = False  # a tabular experiment: run once per seed, not per task or attention
    uses_attention: ClassVar[bool] = False
    measures_time: ClassVar[bool] = True  # the runtime sweep (Table 6): run alone with all cores (attnbench.workers)

    num_samples: int = option(400, "rows n of the design (paper: 400)")
    num_inputs: int = option(5, "columns p of the design (paper: p >= 5, default 5)")
    test_fraction: float = option(0.3, "share of rows in the one test split (paper: 0.3)")
    split_seed: int = option(0, "random_state of the one train/test split (paper: 0)")
    sigma_min: float = option(1e-5, "smallest noise scale sigma (paper: 1e-5)")
    sigma_max: float = option(1e5, "largest noise scale sigma (paper: 1e5)")
    noise_levels: int = option(10, "log-spaced sigma levels (paper: 10)")
    trials: int = option(
        3, "trials per level: noise and method randomness redrawn (paper: 3 in the text, 10 in captions)"
    )
    num_features: int = option(200, "feature budget D of every random-feature method (paper: 200)")
    svm_gamma: float = option(0.5, "RBF gamma of the SVM, the RFF draw and the particles' start (paper: 0.5)")
    misspecified_gammas: list[float] = option([0.01, 100.0], "mis-specified RBF SVM gammas (paper: 0.01, 100)")
    mkl_gammas: list[float] = option([0.1, 0.3, 0.7, 1.0, 1.3, 1.6], "RBF gammas of the MKL Grams (paper)")
    mkl_max_iter: int = option(1000, "MEMO iterations (MKLpy's default 1000; each fits a hard-margin SVM)")
    is_candidates: int = option(10_000, "Sinha-Duchi candidate features N_w (paper: 1e4)")
    is_rho_fraction: float = option(0.005, "Sinha-Duchi rho / N_w (paper: 0.005)")
    is_tol: float = option(1e-10, "Sinha-Duchi bisection tolerance (paper: 1e-10)")
    particles: int = option(300, "Langevin particles N; D of them kept (paper: 300)")
    particle_step: float = option(30.0, "Langevin step eta (paper: 30)")
    particle_beta: float = option(100.0, "inverse temperature beta of the dynamics and the resampling (paper: 100)")
    particle_steps: int = option(2000, "Langevin steps T_max (paper: 2000)")
    frequency_radius: float = option(5.0, "frequency norm cap |omega| <= R (paper: 5)")
    grad_clip: float = option(1.0, "clip of each particle's drift N grad_k H (paper: 1.0; per particle is ours)")
    riesz_s: float = option(0.0, "repulsion g_s: 0 = log (paper), s > 0 Riesz r^-s")
    lambdas: list[float] = option([0.5, 0.0], "repulsion weights of the Langevin methods: Alg-1 and robust (paper)")
    ablation_lambdas: list[float] = option(
        [0.0, 0.2, 0.5, 0.8, 1.0, 1.5], "lambda ablation (paper's grid); [] skips it"
    )
    ablation_trials: int | None = option(None, "trials of the ablation (None: `trials`)")
    scaling_sizes: list[int] = option(
        [100, 200, 500, 1000, 2000, 5000, 10000, 20000], "n of the runtime sweep (paper: 100 to 20,000); [] skips it"
    )
    scaling_max_rows: dict[str, int] = option(
        {},
        "largest n per scaling method (mkl, rbf-svm, importance-sampling, rff, langevin, logistic); "
        "larger sizes are recorded as skipped with the reason",
    )
    controls: list[str] = option(
        [],
        "controls beside the paper's methods (none by default): rff-projected (RFF at the particles' start, "
        "projected onto frequency_radius), langevin-noise-only (Alg-1's steps with no force: the walk of the noise "
        "and the projection, D kept uniformly), langevin-no-noise (beta = inf: the force alone); each at lambdas[0]",
    )
    processes: int = option(1, "processes running the experiment's independent jobs (rows are the same; times differ)")
    memory_gib: float = option(8.0, "memory the MKL Grams may take (6 kernels + combination, float64); above: skipped")

    def __post_init__(self) -> None:
        require(self.num_samples >= 20, f"num_samples={self.num_samples} must be at least 20")
        require(self.num_inputs >= 5, f"num_inputs={self.num_inputs} must be at least 5 (the logit uses x1..x5)")
        require(0 < self.test_fraction < 1, f"test_fraction={self.test_fraction} must lie in (0, 1)")
        require(
            0 < self.sigma_min <= self.sigma_max,
            f"need 0 < sigma_min <= sigma_max, got {self.sigma_min}, {self.sigma_max}",
        )
        require(
            self.noise_levels >= 1 and self.trials >= 1,
            f"noise_levels={self.noise_levels} and trials={self.trials} must be >= 1",
        )
        require(
            2 <= self.num_features <= self.particles,
            f"num_features={self.num_features} must lie in [2, particles={self.particles}] (Algorithm 2 keeps D of N)",
        )
        require(
            self.num_features <= self.is_candidates,
            f"num_features={self.num_features} exceeds is_candidates={self.is_candidates}",
        )
        require(self.particle_step > 0 and self.particle_beta > 0, "particle_step and particle_beta must be positive")
        require(self.frequency_radius > 0 and self.grad_clip > 0, "frequency_radius and grad_clip must be positive")
        require(self.riesz_s >= 0, f"riesz_s={self.riesz_s} must be >= 0 (0 = log repulsion)")
        require(self.processes >= 1, f"processes={self.processes} must be at least 1")
        require(self.mkl_max_iter >= 1 and self.particle_steps >= 1, "mkl_max_iter and particle_steps must be >= 1")
        require(all(n >= 20 for n in self.scaling_sizes), f"scaling_sizes {self.scaling_sizes} must all be >= 20")
        odd = sorted(set(self.controls) - set(CONTROLS))
        require(not odd, f"controls {odd} are unknown; valid: {', '.join(CONTROLS)}")
        unknown = sorted(set(self.scaling_max_rows) - set(SCALING_METHODS))
        require(not unknown, f"scaling_max_rows names {unknown}; valid: {', '.join(SCALING_METHODS)}")

    def sigmas(self) -> list[float]:
        """The noise levels, log-spaced from sigma_min to sigma_max."""
        return np.logspace(math.log10(self.sigma_min), math.log10(self.sigma_max), self.noise_levels).tolist()

    def dynamics(self) -> ParticleDynamics:
        """Algorithm 1's settings."""
        return ParticleDynamics(
            num_particles=self.particles,
            step=self.particle_step,
            beta=self.particle_beta,
            steps=self.particle_steps,
            radius=self.frequency_radius,
            grad_clip=self.grad_clip,
            riesz_s=self.riesz_s,
        )


CONTROLS = ("rff-projected", "langevin-noise-only", "langevin-no-noise")
SCALING_METHODS = ("mkl", "rbf-svm", "importance-sampling", "rff", "langevin", "logistic")


@dataclasses.dataclass
class Design:
    """The fixed inputs, their logits and the one split (indices)."""

    x: np.ndarray
    logit: np.ndarray
    train: np.ndarray
    test: np.ndarray


def logit(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """1.5 sin(pi x1) + 0.8 x2^2 - x3 x4 + 0.5 sin(3 x5) + x_{6:p}^T w: x (n, p), w (p - 5,) -> (n,)."""
    value = 1.5 * np.sin(np.pi * x[:, 0]) + 0.8 * x[:, 1] ** 2 - x[:, 2] * x[:, 3] + 0.5 * np.sin(3 * x[:, 4])
    return value + x[:, 5:] @ w


def make_design(num_samples: int, num_inputs: int, seed: int, test_fraction: float, split_seed: int) -> Design:
    """X ~ N(0, 1) and w ~ N(0, 0.3^2) from the global seed; the split by sklearn's train_test_split."""
    from sklearn.model_selection import train_test_split

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((num_samples, num_inputs))
    w = rng.normal(0.0, 0.3, num_inputs - 5)
    train, test = train_test_split(np.arange(num_samples), test_size=test_fraction, random_state=split_seed)
    return Design(x, logit(x, w), np.sort(train), np.sort(test))


def trial_labels(design: Design, sigmas: list[float], seed: int, trial: int) -> np.ndarray:
    """0/1 labels (levels, n): y = 1{u < sigmoid(l + sigma z)}, z and u drawn once per trial."""
    rng = np.random.default_rng([seed, trial, 1])
    z, u = rng.standard_normal(len(design.logit)), rng.uniform(size=len(design.logit))
    latent = design.logit[None, :] + np.asarray(sigmas)[:, None] * z[None, :]
    return (u[None, :] < expit(latent)).astype(np.int64)


def bayes_accuracy(design: Design) -> float:
    """Expected test accuracy of the Bayes rule 1{l(x) > 0} as sigma -> 0: mean of max(p, 1 - p), p = sigmoid(l)."""
    p = expit(design.logit[design.test])
    return float(np.maximum(p, 1 - p).mean())


def method_generator(seed: int, trial: int, level: int, name: str) -> np.random.Generator:
    """Each method's own randomness for one (trial, level >= 0): independent of the others and of the run order."""
    return np.random.default_rng([seed, trial, 2, level, zlib.crc32(name.encode())])


def methods(cfg: KernelExperimentConfig, lambdas: list[float]) -> dict[str, Callable[..., Any]]:
    """Label -> fit(split, rng) -> predictions (or (predictions, extra dict)) of the noise sweep."""
    table: dict[str, Callable[..., Any]] = {"logistic": km.logistic_regression}
    for gamma in [cfg.svm_gamma, *cfg.misspecified_gammas]:
        table[f"rbf-svm gamma={gamma:g}"] = lambda s, r, g=gamma: km.rbf_svm(s, r, g)
    table["rff"] = lambda s, r: km.random_fourier_features(s, r, cfg.num_features, cfg.svm_gamma)

    def mkl(s: km.Split, r: np.random.Generator) -> tuple[np.ndarray, dict[str, Any]]:
        predictions, weights = km.mkl_memo(s, r, cfg.mkl_gammas, cfg.mkl_max_iter)
        return predictions, {"mkl_weights": weights.tolist()}

    if km.mkl_available():
        table["mkl"] = mkl
    table["importance-sampling"] = lambda s, r: km.importance_sampling(
        s, r, cfg.num_features, cfg.svm_gamma, cfg.is_candidates, cfg.is_rho_fraction, cfg.is_tol
    )
    for lam in lambdas:
        table[f"langevin lambda={lam:g}"] = lambda s, r, lam=lam: km.langevin_particles(
            s, r, lam, cfg.num_features, cfg.svm_gamma, cfg.dynamics()
        )
    return table | control_methods(cfg)


def control_methods(cfg: KernelExperimentConfig) -> dict[str, Callable[..., Any]]:
    """The controls `cfg.controls` asks for (label -> fit), the Langevin ones at lambdas[0] (0.5 by default)."""
    lam = cfg.lambdas[0] if cfg.lambdas else 0.5
    variants = {
        "langevin-noise-only": dataclasses.replace(cfg.dynamics(), drift=False),
        "langevin-no-noise": dataclasses.replace(cfg.dynamics(), beta=math.inf),
    }
    table: dict[str, Callable[..., Any]] = {}
    for name in cfg.controls:
        if name == "rff-projected":
            table[name] = lambda s, r: km.projected_random_fourier_features(
                s, r, cfg.num_features, cfg.svm_gamma, cfg.frequency_radius
            )
        else:
            table[f"{name} lambda={lam:g}"] = lambda s, r, d=variants[name]: km.langevin_particles(
                s, r, lam, cfg.num_features, cfg.svm_gamma, d
            )
    return table


def scores(y_true: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """Test accuracy and binary F1 (zero_division 0)."""
    from sklearn.metrics import accuracy_score, f1_score

    return {
        "accuracy": float(accuracy_score(y_true, predictions)),
        "f1": float(f1_score(y_true, predictions, zero_division=0)),
    }


def timed_fit(fit: Callable[..., Any], split: km.Split, y_test: np.ndarray, rng: np.random.Generator) -> Row:
    """Run one method: its scores, wall seconds (fit + predict) and any extra it reports."""
    from threadpoolctl import threadpool_limits

    start = time.perf_counter()
    with threadpool_limits(limits=1):  # tiny problems; more BLAS threads only contend
        out = fit(split, rng)
    seconds = time.perf_counter() - start
    predictions, extra = out if isinstance(out, tuple) else (out, {})
    return {**scores(y_test, predictions), "seconds": seconds, **extra}


def level_rows(
    cfg: KernelExperimentConfig, seed: int, part: str, trial: int, level: int, lambdas: list[float], langevin_only: bool
) -> list[Row]:
    """One (trial, sigma) job: the methods at that level -> rows {part, method, sigma, trial, n, accuracy, f1, seconds}.

    Rebuilds the design and the trial's labels itself, so that jobs run in any order or process.
    """
    design = make_design(cfg.num_samples, cfg.num_inputs, seed, cfg.test_fraction, cfg.split_seed)
    sigmas = cfg.sigmas()
    y = trial_labels(design, sigmas, seed, trial)[level]
    split = km.Split(design.x[design.train], y[design.train], design.x[design.test])
    table = {k: v for k, v in methods(cfg, lambdas).items() if k.startswith("langevin lambda") or not langevin_only}
    return [
        {
            "part": part,
            "method": name,
            "sigma": sigmas[level],
            "trial": trial,
            "n": len(design.x),
            **timed_fit(fit, split, y[design.test], method_generator(seed, trial, level, name)),
        }
        for name, fit in table.items()
    ]


def scaling_methods(cfg: KernelExperimentConfig) -> dict[str, tuple[str, Callable[..., Any]]]:
    """Scaling label -> (its noise-sweep label, fit): one variant per method (gamma 0.5, lambda 0.5)."""
    table = methods(cfg, cfg.lambdas[:1])
    names = {
        "mkl": "mkl",
        "rbf-svm": f"rbf-svm gamma={cfg.svm_gamma:g}",
        "importance-sampling": "importance-sampling",
        "rff": "rff",
        "langevin": f"langevin lambda={cfg.lambdas[0]:g}" if cfg.lambdas else "",
        "logistic": "logistic",
    }
    return {key: (label, table[label]) for key, label in names.items() if label in table}


def mkl_bytes(n_train: int, num_kernels: int) -> int:
    """Float64 memory of the MKL training Grams plus their combination."""
    return 8 * n_train * n_train * (num_kernels + 1)


def scaling_rows(cfg: KernelExperimentConfig, seed: int, index: int, key: str) -> list[Row]:
    """One (size, method) of the runtime sweep: wall time at n, smallest sigma, trial 0 (or skipped with a reason)."""
    n = cfg.scaling_sizes[index]
    design = make_design(n, cfg.num_inputs, seed, cfg.test_fraction, cfg.split_seed)
    y = trial_labels(design, [cfg.sigma_min], seed, 0)[0]
    split = km.Split(design.x[design.train], y[design.train], design.x[design.test])
    label, fit = scaling_methods(cfg)[key]
    row = {"part": "scaling", "method": label, "sigma": cfg.sigma_min, "trial": 0, "n": n}
    reason = skip_reason(cfg, key, n, len(design.train))
    if reason:
        return [{**row, "status": "skipped", "reason": reason}]
    return [
        {
            **row,
            "status": "ok",
            **timed_fit(fit, split, y[design.test], method_generator(seed, 0, 10_000 + index, label)),
        }
    ]


def skip_reason(cfg: KernelExperimentConfig, key: str, n: int, n_train: int) -> str:
    """Why a scaling cell is not run ('' when it is): a per-method cap, or MKL Grams beyond memory_gib."""
    cap = cfg.scaling_max_rows.get(key)
    if cap is not None and n > cap:
        return f"n={n} above scaling_max_rows[{key}]={cap} (compute budget of the run)"
    if key == "mkl" and mkl_bytes(n_train, len(cfg.mkl_gammas)) > cfg.memory_gib * 2**30:
        gib = mkl_bytes(n_train, len(cfg.mkl_gammas)) / 2**30
        return f"MKL Grams need {gib:.1f} GiB at n={n} ({len(cfg.mkl_gammas)} + 1 float64 {n_train}^2), above memory_gib={cfg.memory_gib:g}"
    return ""


def fit_exponent(sizes: list[float], seconds: list[float]) -> dict[str, float]:
    """Least squares of log t = gamma log n + c -> {exponent, intercept, r2, points}; nan below 2 sizes."""
    n, t = np.asarray(sizes, dtype=float), np.asarray(seconds, dtype=float)
    keep = (n > 0) & (t > 0)
    if len(np.unique(n[keep])) < 2:
        return {"exponent": math.nan, "intercept": math.nan, "r2": math.nan, "points": int(keep.sum())}
    log_n, log_t = np.log(n[keep]), np.log(t[keep])
    slope, intercept = np.polyfit(log_n, log_t, 1)
    residual = log_t - (slope * log_n + intercept)
    r2 = 1.0 - residual.var() / log_t.var() if log_t.var() > 0 else 1.0
    return {"exponent": float(slope), "intercept": float(intercept), "r2": float(r2), "points": int(keep.sum())}


Job = tuple[str, Callable[..., list[Row]], tuple[Any, ...]]


def experiment_jobs(cfg: KernelExperimentConfig, seed: int) -> list[Job]:
    """The independent jobs of the three parts, largest scaling sizes first: (part, function, arguments)."""
    levels = range(cfg.noise_levels)
    jobs: list[Job] = [
        ("scaling", scaling_rows, (cfg, seed, i, key))
        for i in reversed(range(len(cfg.scaling_sizes)))
        for key in scaling_methods(cfg)
    ]
    jobs += [
        ("noise", level_rows, (cfg, seed, "noise", t, lv, cfg.lambdas, False))
        for t in range(cfg.trials)
        for lv in levels
    ]
    extra = [lam for lam in cfg.ablation_lambdas if lam not in cfg.lambdas]
    if extra:
        jobs += [
            ("ablation", level_rows, (cfg, seed, "ablation", t, lv, extra, True))
            for t in range(ablation_trials(cfg))
            for lv in levels
        ]
    return jobs


def ablation_trials(cfg: KernelExperimentConfig) -> int:
    """Trials of the lambda ablation."""
    return cfg.trials if cfg.ablation_trials is None else cfg.ablation_trials


def _run_job(job: Job) -> list[Row]:
    return job[1](*job[2])


def run_kernel_experiment(cfg: KernelExperimentConfig, seed: int = 42, progress: Progress | None = None) -> list[Row]:
    """The noise sweep, the lambda ablation and the scaling sweep -> all rows (noise, ablation, scaling order).

    With `processes` > 1 the jobs run in that many spawned processes; every job seeds its own
    randomness, so the rows are the same as in one process (only the wall times differ).
    """
    jobs = experiment_jobs(cfg, seed)
    results: list[list[Row]] = []
    if cfg.processes > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        threads = torch.get_num_threads()  # the cell's thread budget (--threads), per job process
        # a fresh process per job: no state carries over, and a killed job fails the cell instead of hanging it
        with ProcessPoolExecutor(
            cfg.processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=torch.set_num_threads,
            initargs=(threads,),
            max_tasks_per_child=1,
        ) as pool:
            for i, rows in enumerate(pool.map(_run_job, jobs)):
                results.append(rows)
                if progress is not None:
                    progress("kernel jobs", i + 1, len(jobs))
    else:
        for i, job in enumerate(jobs):
            results.append(_run_job(job))
            if progress is not None:
                progress("kernel jobs", i + 1, len(jobs))
    by_part = {
        part: [r for (p, _, _), rows in zip(jobs, results) if p == part for r in rows]
        for part in ("noise", "ablation", "scaling")
    }
    names = {f"langevin lambda={lam:g}" for lam in cfg.ablation_lambdas}
    reused = [
        {**r, "part": "ablation"}
        for r in by_part["noise"]
        if r["method"] in names and r["trial"] < ablation_trials(cfg)
    ]
    scaling = sorted(by_part["scaling"], key=lambda r: r["n"])  # stable: methods in their table order
    return by_part["noise"] + reused + by_part["ablation"] + scaling


def summarise(rows: list[Row]) -> dict[str, float]:
    """Flat metrics: accuracy / F1 at the smallest sigma and averaged over levels per method; scaling exponents."""
    metrics: dict[str, float] = {}
    noise = [r for r in rows if r["part"] == "noise"]
    if noise:
        smallest = min(r["sigma"] for r in noise)
        for name in dict.fromkeys(r["method"] for r in noise):
            mine = [r for r in noise if r["method"] == name]
            low = [r for r in mine if r["sigma"] == smallest]
            for key in ("accuracy", "f1"):
                metrics[f"{name}/{key}@smallest_sigma"] = float(np.mean([r[key] for r in low]))
                metrics[f"{name}/{key}"] = float(np.mean([r[key] for r in mine]))
            metrics[f"{name}/seconds"] = float(np.mean([r["seconds"] for r in mine]))
    for name, fit in scaling_fits(rows).items():
        if math.isfinite(fit["exponent"]):
            metrics[f"scaling/{name}/exponent"] = fit["exponent"]
    return metrics


def scaling_fits(rows: list[Row]) -> dict[str, dict[str, float]]:
    """The fitted exponent per method over its scaling rows that ran."""
    done = [r for r in rows if r["part"] == "scaling" and r.get("status") == "ok"]
    return {
        name: fit_exponent(
            [r["n"] for r in done if r["method"] == name], [r["seconds"] for r in done if r["method"] == name]
        )
        for name in dict.fromkeys(r["method"] for r in done)
    }
