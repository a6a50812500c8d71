"""The inference engine: every verdict, rank and interval the harness draws from results goes through here.

Public calls: `attnbench.compare` and `attnbench.standings` (`attnbench.decisions.api`). The modules, one job each:
    frame        the input: a long results frame, checked and grouped into families (one task, one metric)
    outcomes     per-example outcomes of a stored cell (0/1 correct, per-row loss)
    cells        stored cells as a frame, each task's test-row design (fresh or shared rows)
    runs         a run folder read as a frame, with its suite's settings
    settings     a suite's comparison settings (pairs, margins, correction)
    variance     the variance of a mean from seeds and test examples (seeds only, nested, crossed)
    spread       which variance model a difference or a mean gets
    corrections  Holm / Benjamini-Hochberg (statsmodels) and the interval level that agrees with them
    verdicts     ahead / behind / equivalent (two one-sided tests) / undecided from corrected tests
    exact        the metrics declared exact (counts): ranked by value and compared as they are, never tested
    power        minimum detectable effect and seeds needed (noncentral t)
    pairwise     compare: the pairs of a task
    ranks        standings: means, rank, rank confidence set, best set
    simulation   synthetic results with known effects, which validate all of the above
This package's __init__ imports nothing: a module imports the few it needs. Run folders are read through
`attnbench.results`, below this package and the report alike.
"""
