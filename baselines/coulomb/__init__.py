"""The Coulomb particle model (docs/paper.md), as a plugin of attnbench: everything of the paper in one package.

It plugs in through the seams any third party uses: the attention `coulomb` (`attention`, attention registry),
its phase A (`phase_a`, a learning phase with its own config type), the synthetic kernel experiment of
Appendix F.1 (`kernel_experiment`, `kernel_methods`, `kernel_particles`) as the measurement `kernel`
(`measurement`), and their report sections, tables and plots (`report`, `plots`). The physics (alignment, Riesz
energy, the Langevin step) are plain functions in `physics`. Nothing in the harness names this package: the
registries find `attention`, `measurement` and `report` by walking attnbench.baselines (`registry.discover`), so
the package can be deleted, or installed apart, without editing the core; importing the package alone imports
nothing (a report reads its sections without torch).
"""
