"""Pathfinder (Linsley et al. 2018; LRA's image task): are the two marked dots on one dashed contour?

Generated on the fly, deterministic per seed. An image holds two target contours of `contour_length`
segments and `num_distractors` shorter distractor contours, drawn dashed (each segment's first half lit)
on a black background; no two contours come within `margin` pixels of each other. Positive (label 1):
both ends of the first target contour are marked; negative (label 0): one end of each target contour is
marked. The image is fed row by row as `resolution**2` grey-level tokens (0-255; id 256 is padding,
which these rows never need). LRA's levels are resolution 32 (Pathfinder), 128 (Path-X) and
curv_contour_length 6, 9, 14; the segment length in pixels scales with the resolution (our choice:
LRA's archive images were drawn by the original generator at 300 pixels and resized).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from attnbench.options import option, require
from attnbench.tasks import register_task
from attnbench.tasks.base import TaskData
from attnbench.tasks.synthetic import Example, SyntheticConfig, balanced_splits, split_info

PIXEL_LEVELS = 256
PAD_ID = PIXEL_LEVELS  # grey levels are ids 0..255; padding gets its own id
BACKGROUND, CONTOUR, MARKER = 0, 160, 255
RESOLUTIONS = (16, 32, 64, 128)
MAX_TRIES = 200  # placements of one contour before the whole image is redrawn


@dataclasses.dataclass
class PathfinderConfig(SyntheticConfig):
    """Pathfinder options (defaults: a CPU-sized Pathfinder-16; LRA: resolution 32, 200k images)."""

    resolution: int = option(16, "image side in pixels: 16, 32, 64 or 128 (128 is Path-X); tokens = side**2")
    contour_length: int = option(6, "segments per target contour (LRA's curv_contour_length: 6, 9, 14)")
    num_distractors: int = option(2, "distractor contours besides the two target contours")
    distractor_length: int | None = option(None, "segments per distractor (None: half of contour_length)")
    curvature: float = option(0.5, "standard deviation of the turn between segments, radians")
    margin: int = option(1, "empty pixels kept between any two contours (and between a contour and the border)")
    dashed: bool = option(True, "draw contours dashed as LRA's (lit half segments); false: solid, an easier level")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.resolution in RESOLUTIONS, f"resolution={self.resolution} must be one of {RESOLUTIONS}")
        require(2 <= self.contour_length <= 40, f"contour_length={self.contour_length} must lie in [2, 40]")
        require(0 <= self.num_distractors <= 50, f"num_distractors={self.num_distractors} must lie in [0, 50]")
        require(
            self.distractor_length is None or self.distractor_length >= 1,
            f"distractor_length={self.distractor_length} must be at least 1 or null",
        )
        require(0 <= self.curvature <= math.pi, f"curvature={self.curvature} must lie in [0, pi]")
        require(1 <= self.margin <= 4, f"margin={self.margin} must lie in [1, 4]")


@dataclasses.dataclass
class PathfinderImage:
    """One generated image: pixels (R, R) uint8, label, contour masks (K, R, R) bool (the solid traces, targets
    first, of which the lit dashes are a subset) and the two marked endpoints as (row, column)."""

    image: np.ndarray
    label: int
    masks: np.ndarray
    endpoints: tuple[tuple[int, int], tuple[int, int]]


def segment_pixels(resolution: int) -> int:
    """Pixels per contour segment: 2 at 16 and 32 pixels, growing with the side (4 at 64, 8 at 128)."""
    return max(2, resolution // 16)


def _grow(mask: np.ndarray, steps: int) -> np.ndarray:
    """`mask` dilated by `steps` pixels in the 8-neighbourhood (a square of side 2 * steps + 1)."""
    out = mask.copy()
    for _ in range(steps):
        padded = np.pad(out, 1)
        out = np.zeros_like(out)
        for dr in (0, 1, 2):
            for dc in (0, 1, 2):
                out |= padded[dr : dr + mask.shape[0], dc : dc + mask.shape[1]]
    return out


def _trace(
    rng: np.random.Generator, resolution: int, segments: int, step: int, curvature: float
) -> list[tuple[int, int]] | None:
    """An 8-connected pixel path of `segments * step` unit steps with a random start, heading and turns; None if it
    leaves the image."""
    row, col = rng.uniform(1, resolution - 1, size=2)
    heading = rng.uniform(0, 2 * math.pi)
    path = [(math.floor(row + 0.5), math.floor(col + 0.5))]
    for _ in range(segments):
        heading += rng.normal(0.0, curvature)
        for _ in range(step):
            row, col = row + math.sin(heading), col + math.cos(heading)
            pixel = (math.floor(row + 0.5), math.floor(col + 0.5))  # unit steps: neighbours stay 8-adjacent
            if not (0 <= pixel[0] < resolution and 0 <= pixel[1] < resolution):
                return None
            if pixel != path[-1]:
                path.append(pixel)
    return path


def _place(
    rng: np.random.Generator, occupied: np.ndarray, segments: int, cfg: PathfinderConfig
) -> list[tuple[int, int]] | None:
    """A contour path whose pixels keep `margin` pixels from every occupied pixel; None after MAX_TRIES."""
    keep_out = _grow(occupied, cfg.margin)
    for _ in range(MAX_TRIES):
        path = _trace(rng, cfg.resolution, segments, segment_pixels(cfg.resolution), cfg.curvature)
        if path is not None and path[0] != path[-1] and not any(keep_out[p] for p in path):
            return path
    return None


def generate_pathfinder(rng: np.random.Generator, label: int, cfg: PathfinderConfig) -> PathfinderImage:
    """One Pathfinder image with the given label (1: both marked ends on one contour), drawn from `rng`."""
    require(label in (0, 1), f"label={label} must be 0 or 1")
    step = segment_pixels(cfg.resolution)
    distractor = cfg.distractor_length or max(1, cfg.contour_length // 2)
    lengths = [cfg.contour_length] * 2 + [distractor] * cfg.num_distractors
    while True:
        occupied = np.zeros((cfg.resolution, cfg.resolution), dtype=bool)
        paths = []
        for segments in lengths:
            path = _place(rng, occupied, segments, cfg)
            if path is None:
                break
            paths.append(path)
            occupied[tuple(np.array(path).T)] = True
        if len(paths) == len(lengths):
            break
    masks = np.zeros((len(paths), cfg.resolution, cfg.resolution), dtype=bool)
    image = np.full((cfg.resolution, cfg.resolution), BACKGROUND, dtype=np.uint8)
    for k, path in enumerate(paths):
        masks[k][tuple(np.array(path).T)] = True
        for i, pixel in enumerate(path):
            if (
                not cfg.dashed or (i // step) % 2 == 0 or i == len(path) - 1
            ):  # dashes: lit half segments, the far end always lit
                image[pixel] = CONTOUR
    ends = (paths[0][0], paths[0][-1]) if label == 1 else (paths[0][0], paths[1][-1])
    for end in ends:
        image[end] = MARKER
    return PathfinderImage(image, label, masks, ends)


class PathfinderSampler:
    """Draws (pixel tokens, label) examples: the label first, uniformly, then an image with that label."""

    def __init__(self, cfg: PathfinderConfig):
        self.cfg = cfg

    def __call__(self, rng: np.random.Generator) -> Example:
        drawn = generate_pathfinder(rng, int(rng.integers(2)), self.cfg)
        return tuple(drawn.image.reshape(-1).tolist()), drawn.label


@register_task("pathfinder", config=PathfinderConfig)
def pathfinder(cfg: PathfinderConfig) -> TaskData:
    """Pathfinder: are the two marked dots connected by a dashed contour? resolution**2 grey-level tokens."""
    width = cfg.resolution**2
    splits = balanced_splits(PathfinderSampler(cfg), 2, cfg, width, "pathfinder")
    return TaskData(
        "pathfinder",
        splits,
        num_classes=2,
        vocab_size=PIXEL_LEVELS + 1,
        max_length=width,
        pad_id=PAD_ID,
        info={
            "source": "generated (Pathfinder, Linsley et al. 2018, as in LRA; attnbench generator)",
            "label_names": ["disconnected", "connected"],
            "resolution": cfg.resolution,
            "tokens": "grey levels 0-255 row by row; id 256 = padding",
            "splits": split_info(splits),
        },
        special_ids=(PAD_ID,),
    )
