"""Pathfinder (Linsley et al. 2018; LRA's image task): are the two marked dots on one dashed contour?

Generated on the fly, deterministic per seed, with the statistics of the original generator (drewlinsley/pathfinder,
`snakes2.py`): two target contours of `contour_length` segments grow from starting points `seed_distance` pixels
apart (the original's seed distance), beside `num_distractors` shorter distractor contours (5 by default, as in
LRA's images), drawn dashed (each segment's first half lit) and `thickness` pixels wide on a black background; no
two contours come within `margin` pixels of each other. Markers are disks of `marker_radius` pixels. As in the
original, one marker sits on the start of a target contour (either, at random) and the other on the far end of
the same contour (label 1, connected) or of the other one (label 0). Nearby starts alone leave the distance
between the markers slightly longer for label 0 (the starts' offset adds to it: a logistic regression on the
distance scored 0.59 held out at resolution 32, 9 segments), so the task's sampler also matches it
(`PathfinderSampler`): it keeps each image with a probability that gives both labels the overlap of their
distance distributions, and the distance alone stays at chance (the earlier generator placed the two targets anywhere and marked both ends of the first;
the distance then predicted the label 0.596 of the time). The image is fed row by row as `resolution**2` grey-level tokens (0-255;
id 256 is padding, which these rows never need). LRA's levels are resolution 32 (Pathfinder), 128 (Path-X) and
curv_contour_length 6, 9, 14; the segment length in pixels, the seed distance and the markers scale with the
resolution (7 pixels apart and disks of radius 1 at 32; the original draws at 300 pixels with seed distance 27
and marker radius 5, LRA's archive holds 32 x 32 and 128 x 128 images).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

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
PILOT_IMAGES = 500  # images of each label whose marker distances estimate the two distributions
PILOT_STREAM = 7_919  # the pilot's own random stream beside the task seed


@dataclasses.dataclass
class PathfinderConfig(SyntheticConfig):
    """Pathfinder options (defaults: a CPU-sized Pathfinder-16; LRA: resolution 32, 200k images)."""

    resolution: int = option(16, "image side in pixels: 16, 32, 64 or 128 (128 is Path-X); tokens = side**2")
    contour_length: int = option(6, "segments per target contour (LRA's curv_contour_length: 6, 9, 14)")
    num_distractors: int = option(5, "distractor contours besides the two target contours (LRA's images: 5)")
    distractor_length: int | None = option(None, "segments per distractor (None: half of contour_length)")
    curvature: float = option(0.5, "standard deviation of the turn between segments, radians")
    margin: int = option(1, "empty pixels kept between any two contours (and between a contour and the border)")
    dashed: bool = option(True, "draw contours dashed as LRA's (lit half segments); false: solid, an easier level")
    seed_distance: float | None = option(
        None, "pixels between the two target contours' starts (None: 7 x resolution / 32, the original's)"
    )
    thickness: int | None = option(
        None, "stroke width in pixels, 1 or 2 (None: 2 from resolution 32 on, about 17% of pixels inked as LRA's)"
    )
    marker_radius: float | None = option(None, "radius of the disk markers in pixels (None: resolution / 32)")

    generator_version: ClassVar[int] = 2  # 2: targets from nearby starts, start-to-end markers, disks, strokes

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
        self.seed_distance = self.seed_distance if self.seed_distance is not None else 7 * self.resolution / 32
        self.thickness = self.thickness or (2 if self.resolution >= 32 else 1)
        self.marker_radius = self.marker_radius if self.marker_radius is not None else self.resolution / 32
        require(self.thickness in (1, 2), f"thickness={self.thickness} must be 1 or 2")
        require(self.seed_distance > 0, f"seed_distance={self.seed_distance} must be positive")


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
    rng: np.random.Generator,
    resolution: int,
    segments: int,
    step: int,
    curvature: float,
    start: tuple[float, float] | None = None,
) -> list[tuple[int, int]] | None:
    """An 8-connected pixel path of `segments * step` unit steps from `start` (None: a random one) with a random
    heading and turns; None if it leaves the image."""
    row, col = rng.uniform(1, resolution - 1, size=2) if start is None else start
    heading = rng.uniform(0, 2 * math.pi)
    path = [(math.floor(row + 0.5), math.floor(col + 0.5))]
    if not (0 <= path[0][0] < resolution and 0 <= path[0][1] < resolution):
        return None
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
    rng: np.random.Generator,
    occupied: np.ndarray,
    segments: int,
    cfg: PathfinderConfig,
    near: tuple[int, int] | None = None,
) -> list[tuple[int, int]] | None:
    """A contour path whose pixels keep `margin` pixels (and the stroke's width) from every occupied pixel,
    starting `seed_distance` pixels from `near` in a random direction where given; None after MAX_TRIES."""
    keep_out = _grow(occupied, cfg.margin + cfg.thickness - 1)
    for _ in range(MAX_TRIES):
        start = None
        if near is not None:
            angle = rng.uniform(0, 2 * math.pi)
            start = (near[0] + cfg.seed_distance * math.sin(angle), near[1] + cfg.seed_distance * math.cos(angle))
        path = _trace(rng, cfg.resolution, segments, segment_pixels(cfg.resolution), cfg.curvature, start)
        if path is not None and path[0] != path[-1] and not any(keep_out[p] for p in path):
            return path
    return None


def _disk(resolution: int, centre: tuple[int, int], radius: float) -> np.ndarray:
    """The pixels within `radius` of `centre` (the centre always) -> (R, R) bool."""
    rows, cols = np.ogrid[:resolution, :resolution]
    disk = (rows - centre[0]) ** 2 + (cols - centre[1]) ** 2 <= radius**2
    disk[centre] = True
    return disk


def _stroke(pixels: np.ndarray, thickness: int) -> np.ndarray:
    """`pixels` (R, R) bool widened to `thickness` (2: each pixel also lights its right, lower and diagonal
    neighbours)."""
    if thickness == 1:
        return pixels
    out = pixels.copy()
    out[1:, :] |= pixels[:-1, :]
    out[:, 1:] |= pixels[:, :-1]
    out[1:, 1:] |= pixels[:-1, :-1]
    return out


def _pixels(resolution: int, path: list[tuple[int, int]]) -> np.ndarray:
    """The pixels of a path -> (R, R) bool."""
    out = np.zeros((resolution, resolution), dtype=bool)
    out[tuple(np.array(path).T)] = True
    return out


def generate_pathfinder(rng: np.random.Generator, label: int, cfg: PathfinderConfig) -> PathfinderImage:
    """One Pathfinder image with the given label (1: both marked ends on one contour), drawn from `rng`."""
    require(label in (0, 1), f"label={label} must be 0 or 1")
    step = segment_pixels(cfg.resolution)
    distractor = cfg.distractor_length or max(1, cfg.contour_length // 2)
    lengths = [cfg.contour_length] * 2 + [distractor] * cfg.num_distractors
    while True:
        occupied = np.zeros((cfg.resolution, cfg.resolution), dtype=bool)
        paths = []
        for k, segments in enumerate(lengths):
            path = _place(rng, occupied, segments, cfg, near=paths[0][0] if k == 1 else None)
            if path is None:
                break
            paths.append(path)
            occupied |= _stroke(_pixels(cfg.resolution, path), cfg.thickness)
        if len(paths) == len(lengths):
            break
    masks = np.zeros((len(paths), cfg.resolution, cfg.resolution), dtype=bool)
    image = np.full((cfg.resolution, cfg.resolution), BACKGROUND, dtype=np.uint8)
    for k, path in enumerate(paths):
        masks[k] = _stroke(_pixels(cfg.resolution, path), cfg.thickness)
        lit = [p for i, p in enumerate(path) if not cfg.dashed or (i // step) % 2 == 0 or i == len(path) - 1]
        image[_stroke(_pixels(cfg.resolution, lit), cfg.thickness)] = CONTOUR  # dashes: lit halves, far end lit
    first = int(rng.integers(2))  # the target whose start is marked, as the original's origin_mark_idx
    ends = (paths[first][0], paths[first if label == 1 else 1 - first][-1])
    for end in ends:
        image[_disk(cfg.resolution, end, cfg.marker_radius)] = MARKER
    return PathfinderImage(image, label, masks, ends)


def marker_distance(drawn: PathfinderImage) -> float:
    """Euclidean distance in pixels between the two marked points."""
    (r0, c0), (r1, c1) = drawn.endpoints
    return math.hypot(r1 - r0, c1 - c0)


class PathfinderSampler:
    """Draws (pixel tokens, label) examples: the label first, uniformly, then an image with that label whose marker
    distance follows the overlap of the two labels' distance distributions, so that the distance alone cannot tell
    them apart: an image of label y whose distance falls in bin b (1 pixel) is kept with probability
    min(1, f_other(b) / f_y(b)), f estimated per bin from `PILOT_IMAGES` pilot images of each label (a generator
    of its own, seeded by the task's seed); about 1.2 images drawn per image kept."""

    def __init__(self, cfg: PathfinderConfig):
        self.cfg = cfg
        pilot = np.random.default_rng([cfg.seed, PILOT_STREAM])
        counts = np.ones((2, 2 * cfg.resolution))  # add-one: no bin is impossible
        for label in (0, 1):
            for _ in range(PILOT_IMAGES):
                counts[label, self._bin(generate_pathfinder(pilot, label, cfg))] += 1
        density = counts / counts.sum(axis=1, keepdims=True)
        self.keep = np.minimum(1.0, density[::-1] / density)  # keep[y, b] = min(1, f_other(b) / f_y(b))

    @staticmethod
    def _bin(drawn: PathfinderImage) -> int:
        return round(marker_distance(drawn))

    def draw(self, rng: np.random.Generator, label: int) -> PathfinderImage:
        """An image of `label`, kept with the probability that matches its marker distance to the other label's."""
        while True:
            drawn = generate_pathfinder(rng, label, self.cfg)
            if rng.random() < self.keep[label, self._bin(drawn)]:
                return drawn

    def __call__(self, rng: np.random.Generator) -> Example:
        drawn = self.draw(rng, int(rng.integers(2)))
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
