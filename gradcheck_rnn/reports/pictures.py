"""Error pictures of one failing result row, drawn with matplotlib from its stored ratio maps.

One PNG per row: the tolerance ratio over (time step × sequence) for y and x with padded steps
hatched, the error per time step on a log axis (truncated BPTT shows as a ramp toward t = 0) of
the failing tensors — or, when only tensors without a time axis fail (a weight gradient, a state),
the worst one's ratio per unit and gate (or per sequence and layer.dir), titled with its name —, the final and initial states over (layer·direction × sequence), and one heatmap per gate block
(i, f, g, o / r, z, n) over (parameter tensor × unit). Colours are log10 of the ratio on one
scale per picture: near-white blue at ratio 1e-4 and below, deepening blue up to the tolerance
(ratio 1, a black line on the colour bar), where blue turns red: red fails, darker is worse;
grey is NaN and a cross marks a non-finite target value. An error series that is zero at every
step says "no error" in words instead of drawing an empty log axis.

matplotlib is an optional dependency (extra ``html``); ``available()`` says whether it is there.
The object-oriented API with the Agg canvas is used, never pyplot, so rendering touches no global
backend state of the process that embeds us.
"""

from __future__ import annotations

import io
import math
import warnings
from typing import Any

import numpy as np

from ..model.compare import expand_tensor, from_json_number
from ..families import family, modes
from ..model.numbers import location_text
from .document import failing_tensors

RATIO_FLOOR = -4.0  # log10 ratio shown as the palest blue: 1e-4 of the tolerance and below
RATIO_CEIL = 12.0  # the colour scale never stretches past 1e12 (NaN/Inf are marked, not scaled)
PANEL_INCHES = (3.9, 2.7)
DPI = 80


def available() -> bool:
    """Whether matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def ratio_grid(tensor: dict[str, Any]) -> np.ndarray:
    """A stored tensor's ratio map as a float array (null is NaN, "inf" infinity)."""
    ratio_map = tensor["ratio_map"]
    rows = [[from_json_number(v) for v in row] for row in ratio_map["ratio"]]
    return np.array(rows, dtype=np.float64).reshape(len(rows), -1)


def _log_ratio(grid: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.clip(np.log10(grid), RATIO_FLOOR, RATIO_CEIL)


def _padded_starts(lengths: list[int] | None, steps: int, pool: tuple[int, int], columns: int) -> list[int | None]:
    """Per displayed sequence column, the first displayed step whose every covered step is padded."""
    if not lengths:
        return [None] * columns
    pt, pb = pool
    starts: list[int | None] = []
    for j in range(columns):
        longest = max(lengths[j * pb:(j + 1) * pb], default=0)
        first = math.ceil(longest / pt)
        starts.append(first if first < steps else None)
    return starts


def case_png(row: dict[str, Any], lengths: list[int] | None, num_directions: int | None) -> bytes | None:
    """The picture of one result row as PNG bytes, or None when the row has no ratio maps."""
    with warnings.catch_warnings():
        # Log axes over values near the float64 limits, or with no positive value, warn; the
        # picture is still right (non-finite values are marked), so the warnings are noise.
        warnings.simplefilter("ignore")
        return _case_png(row, lengths, num_directions)


def _case_png(row: dict[str, Any], lengths: list[int] | None, num_directions: int | None) -> bytes | None:
    tensors = [t for t in row.get("tensors", []) if t.get("ratio_map")]
    timed = [t for t in tensors if t["ratio_map"]["rows"] == "t"]
    stepped, unstepped = stepped_tensors(row)
    states = [t for t in tensors if t["ratio_map"]["rows"] == "state"]
    params = [t for t in tensors if t["ratio_map"]["rows"] == "gate"]
    if not tensors and not any(t.get("per_step") for t in row.get("tensors", [])):
        return None  # nothing to draw: the row's lines say it all
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    grids = [ratio_grid(t) for t in tensors]
    top = max((float(np.nanmax(np.where(np.isfinite(g), g, np.nan))) for g in grids if np.isfinite(g).any()),
              default=1.0)
    vmax = min(RATIO_CEIL, max(1.0, math.ceil(math.log10(top)) if top > 0 else 1.0))
    norm = TwoSlopeNorm(vmin=RATIO_FLOOR, vcenter=0.0, vmax=vmax)
    mode = row.get("mode", "")
    gate_names = family(mode).gates if mode in modes() else ()
    gates = len(params[0]["ratio_map"]["ratio"]) if params else 0
    panels = len(timed) + bool(stepped or unstepped) + bool(states) + gates
    columns = min(3, panels)
    rows = math.ceil(panels / columns)
    figure = Figure(figsize=(PANEL_INCHES[0] * columns + 0.9, PANEL_INCHES[1] * rows), dpi=DPI)
    FigureCanvasAgg(figure)
    # Fixed margins, not constrained layout: that solver doubled the drawing time (~0.8 s a picture).
    height = PANEL_INCHES[1] * rows
    figure.subplots_adjust(left=0.1, right=0.88, bottom=0.55 / height, top=1 - 0.3 / height, wspace=0.55,
                           hspace=0.85 / PANEL_INCHES[1])
    axes = iter(figure.subplots(rows, columns, squeeze=False).ravel())
    cmap = _colormap()
    image = None

    def heat(ax: Any, grid: np.ndarray, title: str, xlabel: str, ylabel: str) -> Any:
        shown = _log_ratio(grid)
        drawn = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, norm=norm, aspect="auto", interpolation="nearest",
                          origin="upper")
        broken = np.argwhere(np.isposinf(grid))
        if len(broken):
            ax.scatter(broken[:, 1], broken[:, 0], marker="x", color="black", s=18, linewidths=1)
        _title(ax, title)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        _integer_ticks(ax, grid.shape)
        return drawn

    for tensor in timed:
        ax = next(axes)
        ratio_map = tensor["ratio_map"]
        pool = tuple(ratio_map["pool"])
        grid = ratio_grid(tensor).T  # sequences down, time steps across
        pooled = "" if pool == (1, 1) else f" (max over {pool[0]} steps × {pool[1]} seqs)"
        image = heat(ax, grid, f"{tensor['name']}: ratio per (t, b){pooled}", "time step t", "sequence b")
        for j, start in enumerate(_padded_starts(lengths, grid.shape[1], pool, grid.shape[0])):
            if start is not None:
                ax.add_patch(Rectangle((start - 0.5, j - 0.5), grid.shape[1] - start, 1, fill=False,
                                       hatch="///", edgecolor="0.3", linewidth=0))
    if unstepped is not None:
        _ratio_panel(next(axes), unstepped, gate_names, num_directions)
    elif stepped:
        _steps_panel(next(axes), stepped)
    if states:
        grid = np.vstack([ratio_grid(t) for t in states])
        labels = [f"{t['name']} {_state_label(i, num_directions)}" for t in states
                  for i in range(len(t["ratio_map"]["ratio"]))]
        ax = next(axes)
        image = heat(ax, grid, "states: ratio per (layer.dir, b)", "sequence b", "")
        _row_labels(ax, labels)
    for g in range(gates):
        grid = np.vstack([ratio_grid(t)[g:g + 1] for t in params])
        name = gate_names[g] if g < len(gate_names) else str(g)
        ax = next(axes)
        image = heat(ax, grid, f"gate block {name}: ratio per unit", "unit", "")
        _row_labels(ax, [t["name"] for t in params])
    for ax in axes:
        ax.set_axis_off()
    if image is not None:
        bar = figure.colorbar(image, cax=figure.add_axes((0.92, 0.2, 0.012, 0.6)))
        bar.set_label("log10 tolerance ratio (> 0 fails)", fontsize=8)
        bar.ax.axhline(0.0, color="black", linewidth=1.2)  # the tolerance: where blue turns red
        bar.ax.tick_params(labelsize=7)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _title(ax: Any, text: str) -> None:
    """The panel's title at the top of its axes. Given, not left to matplotlib's automatic placement,
    which measures every tick label of the axes to clear the ones on top (there are none here): the
    same pixels for less drawing time (benchmarks/RESULTS.md, "The default suite: 160 s to 137 s")."""
    ax.set_title(text, fontsize=9, y=1.0)


def stepped_tensors(row: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """What the error-per-step panel (and the console's picture under a repro) shows: the failing
    tensors with a time axis (every one with a time axis when none fails), or — when the failing
    tensors have none (a weight gradient, a state) — no series and the worst failing tensor, whose
    ratio per unit that panel shows instead. A passing ``y`` beside a failing ``l0.fwd.w_hh``
    would say nothing about the failure; a missing tensor has no values to show."""
    stepped = [t for t in map(expand_tensor, row.get("tensors", [])) if t.get("per_step")]
    failing = [t for t in failing_tensors(row.get("tensors", ())) if t["status"] != "missing"]
    if failing and not any(t.get("per_step") for t in failing):
        return [], failing[0]
    return [t for t in stepped if t["status"] != "pass"] or stepped, None


def _ratio_panel(ax: Any, tensor: dict[str, Any], gate_names: tuple[str, ...], num_directions: int | None) -> None:
    """The tolerance ratio of one tensor without a time axis, one line per gate block (or
    layer.dir) over its units (or sequences), on a log axis with the tolerance at 1."""
    ratio_map = tensor.get("ratio_map")
    if not ratio_map:  # a tensor of a shape the maps do not know: its worst element in words
        ax.set_axis_off()
        _title(ax, f"{tensor['name']}: no time axis")
        ratio = from_json_number(tensor.get("ratio"))
        ax.text(0.5, 0.5, f"worst ratio {ratio:.3g} at {location_text(tensor.get('location'))}", ha="center",
                va="center", fontsize=8, transform=ax.transAxes, wrap=True)
        return
    grid = ratio_grid(tensor)
    gated = ratio_map["rows"] == "gate"
    across = "unit" if gated else "sequence b"
    for i, values in enumerate(grid):
        label = (gate_names[i] if i < len(gate_names) else str(i)) if gated else _state_label(i, num_directions)
        shown = np.where(np.isfinite(values) & (values > 0), values, np.nan)
        ax.plot(np.arange(len(values)), shown, marker="o", markersize=3, label=label)
    ax.axhline(1.0, color="black", linewidth=1.0)  # the tolerance
    ax.set_yscale("log")
    pool = tuple(ratio_map.get("pool", (1, 1)))
    pooled = "" if pool == (1, 1) else f" (max over {pool[1]})"
    _title(ax, f"{tensor['name']}: ratio per {across}{pooled}")
    ax.set_xlabel(f"{across} (no time axis)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_xlim(-0.5, grid.shape[1] - 0.5)
    _whole_ticks(ax.xaxis, grid.shape[1])
    ax.legend(fontsize=7, title="gate" if gated else "layer.dir", title_fontsize=7)
    ax.grid(True, which="major", alpha=0.3)


def _integer_ticks(ax: Any, shape: tuple[int, ...]) -> None:
    """Ticks on whole cells only, on both sides of a heatmap (:func:`_whole_ticks`)."""
    _whole_ticks(ax.xaxis, shape[1])
    _whole_ticks(ax.yaxis, shape[0])


def _whole_ticks(axis: Any, size: int) -> None:
    """Ticks on the indices 0 … ``size`` − 1 only. A side of one or a few gets its indices as
    explicit ticks: MaxNLocator on a one-index axis (H = 1, B = 1, T = 1) falls back to fractional
    ticks (−0.5 … 0.5, or −0.04 … 0.04 around a single plotted point), which overlap."""
    from matplotlib.ticker import MaxNLocator

    if size <= 6:
        axis.set_ticks(range(size))
    else:
        axis.set_major_locator(MaxNLocator(integer=True))


def _colormap() -> Any:
    """Pale to mid blue up to the tolerance, then light to dark red: passing cells stay quiet and
    the step across ratio 1 is a change of hue, not of shade."""
    from matplotlib.colors import LinearSegmentedColormap

    cmap = LinearSegmentedColormap.from_list("ratio", [(0.0, "#f5f9fc"), (0.4999, "#6a9fcb"),
                                                       (0.5, "#fcbba1"), (1.0, "#67000d")])
    return cmap.with_extremes(bad="#9a9a9a")


def _state_label(index: int, num_directions: int | None) -> str:
    if not num_directions:
        return str(index)
    layer, d = divmod(index, num_directions)
    return f"l{layer}.{('fwd', 'bwd')[d]}"


def _row_labels(ax: Any, labels: list[str]) -> None:
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=6 if len(labels) > 12 else 7)


def _steps_panel(ax: Any, tensors: list[dict[str, Any]]) -> None:
    """max |a − b| per time step on a log axis; zero steps are gaps, non-finite steps are crosses.
    Tensors without error at any step are named in words ("no error"), not drawn as a legend
    entry without a line; when no tensor has any error the panel says only that."""
    highest = 0.0
    quiet = []
    drawn = 0
    for tensor in tensors:
        steps = np.array([from_json_number(v) for v in tensor["per_step"]], dtype=np.float64)
        broken = np.flatnonzero(~np.isfinite(steps))
        if not len(broken) and not (steps > 0).any():
            quiet.append(tensor["name"])
            continue
        shown = np.where(np.isfinite(steps) & (steps > 0), steps, np.nan)
        if np.isfinite(shown).any():
            highest = max(highest, float(np.nanmax(shown)))
        line, = ax.plot(np.arange(len(steps)), shown, marker="o", markersize=3, label=tensor["name"])
        drawn += 1
        if len(broken):
            ax.scatter(broken, np.full(len(broken), 1.0), marker="x", color=line.get_color(),
                       transform=ax.get_xaxis_transform(), clip_on=False)
    _title(ax, "max |a − b| per time step")
    if not drawn:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.text(0.5, 0.5, f"no error: |a − b| = 0 at every step\n({', '.join(quiet)})", ha="center", va="center",
                fontsize=8, transform=ax.transAxes, wrap=True)
        return
    length = max(len(t["per_step"]) for t in tensors)
    ax.set_xlim(-0.5, length - 0.5)
    ax.set_yscale("log")
    if highest == 0.0:
        ax.set_ylim(1e-16, 1.0)
    _whole_ticks(ax.xaxis, length)
    ax.set_xlabel("time step t", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)
    ax.grid(True, which="major", alpha=0.3)
    if quiet:
        ax.text(0.02, 0.02, f"no error: {', '.join(quiet)}", fontsize=7, transform=ax.transAxes, va="bottom")
