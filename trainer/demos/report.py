"""What `skyrl demo` shows: the reward chart, the trajectory viewer, progress while it trains,
the closing lines, and a console free of library chatter.

- `reward_chart_svg` / `write_curve`: the mean reward of each step (dots and a moving average)
  and, when the run evaluated on held-out tasks, each evaluation's success with its 95%
  interval (at step 0 for the untrained policy); gridlines at 0, 0.25, 0.5, 0.75 and 1 carry
  exactly those labels, and the steps are labelled at round numbers.
- `write_viewer`: `trajectories.html` on the first and last episodes.
- `Heartbeat`: a line at least every `interval_s` seconds while no step line comes (the first
  held-out evaluation and step take over a minute on 2 cores), saying what runs.
- `print_outputs`: the closing lines, one path each, never wrapped.
- `quiet_libraries`: transformers' weight-loading bars and warnings, and DeepSpeed's "Setting
  accelerator to CPU", stay off the console.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from skyrl_sdk.trainer.heldout import HeldoutResult

__all__ = [
    "HEARTBEAT_S",
    "Heartbeat",
    "moving_average",
    "print_outputs",
    "quiet_libraries",
    "reward_chart_svg",
    "step_ticks",
    "write_curve",
    "write_viewer",
]

CURVE_FILE = "reward_curve.svg"
"""The chart's file name in the report directory."""
Y_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Reward / success gridlines, each labelled with its own value."""
MAX_X_TICKS = 10
"""At most this many step labels; more steps are labelled at a round stride."""
_STRIDES = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000)


def moving_average(values: list[float], width: int | None = None) -> list[float]:
    """Trailing mean over `width` points (default: a quarter of the run, 3 to 10)."""
    width = width or max(3, min(10, len(values) // 4))
    return [
        sum(values[max(0, i + 1 - width) : i + 1]) / (i + 1 - max(0, i + 1 - width))
        for i in range(len(values))
    ]


def step_ticks(first: int, last: int) -> list[int]:
    """The steps to label between `first` and `last`: every step when at most `MAX_X_TICKS`,
    else the multiples of the smallest round stride that keeps them to that many."""
    span = last - first + 1
    stride = next((s for s in _STRIDES if span / s <= MAX_X_TICKS), _STRIDES[-1])
    if stride == 1:
        return list(range(first, last + 1))
    start = -(-first // stride) * stride  # the first multiple of the stride at or after `first`
    return list(range(start, last + 1, stride))


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True)
class _Plot:
    """The chart's plot area, in pixels, and how steps and values map onto it."""

    left: int
    """x of the plot area's left edge."""
    top: int
    """y of its top edge."""
    width: int
    """Its width."""
    height: int
    """Its height."""
    first: int
    """The step at the left end (0 with a held-out evaluation of the untrained policy)."""
    span: int
    """Steps from the left end to the right end (at least 1)."""
    inset: int = 10
    """The first and last points clear the plot's edges by this much."""

    def x(self, step: float) -> float:
        """The x of `step`."""
        return (
            self.left + self.inset + (step - self.first) * (self.width - 2 * self.inset) / self.span
        )

    def y(self, value: float) -> float:
        """The y of `value`, clipped to [0, 1]."""
        return self.top + self.height - max(0.0, min(1.0, value)) * self.height

    @property
    def bottom(self) -> int:
        """y of the x axis."""
        return self.top + self.height


def reward_chart_svg(
    rewards: Sequence[float],
    heldout: Sequence[HeldoutResult] = (),
    *,
    title: str = "mean reward per step",
    width: int = 640,
    height: int = 320,
) -> str:
    """The chart (see the module docstring) as an SVG document. Elements carry classes
    (`grid`, `ytick`, `xtick`, `reward`, `heldout`, `heldout-ci`, `axis-label`) that tests and
    stylesheets can find."""
    left, right, top, bottom = 48, 20, 34, 48
    first = 0 if heldout else 1  # the untrained policy's evaluation is at step 0
    last = max([len(rewards), first, *(r.step for r in heldout)])
    plot = _Plot(
        left, top, width - left - right, height - top - bottom, first, max(last - first, 1)
    )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif">',
        '<rect width="100%" height="100%" fill="white"/>',
        *_chart_axes(plot, last, height, bool(heldout)),
        *_chart_rewards(plot, rewards),
        *_chart_heldout(plot, heldout),
        *_chart_legend(plot, bool(heldout)),
        f'<text x="{width / 2}" y="20" font-size="13" text-anchor="middle">'
        f"mean reward per step: {_xml(title)}</text></svg>",
    ]
    return "".join(parts)


def _chart_axes(plot: _Plot, last: int, height: int, heldout: bool) -> list[str]:
    """The grid with its value ticks, the step ticks and the two axis labels."""
    x, y, left, top = plot.x, plot.y, plot.left, plot.top
    plot_w, plot_h, axis_y = plot.width, plot.height, plot.bottom
    parts = [
        f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y(t):.1f}" '
        f'y2="{y(t):.1f}" stroke="#ddd"/>'
        f'<text class="ytick" x="{left - 6}" y="{y(t):.1f}" dy="4" font-size="11" '
        f'text-anchor="end">{t:g}</text>'
        for t in Y_TICKS
    ]
    parts += [
        f'<line x1="{x(step):.1f}" x2="{x(step):.1f}" y1="{axis_y}" y2="{axis_y + 4}" '
        'stroke="#888"/>'
        f'<text class="xtick" x="{x(step):.1f}" y="{axis_y + 16}" font-size="11" '
        f'text-anchor="middle">{step}</text>'
        for step in step_ticks(plot.first, last)
    ]
    parts.append(
        f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{height - 8}" font-size="12" '
        'text-anchor="middle">step</text>'
    )
    y_label = "mean reward / held-out success" if heldout else "mean reward"
    parts.append(
        f'<text class="axis-label" x="12" y="{top + plot_h / 2:.1f}" font-size="12" '
        f'text-anchor="middle" transform="rotate(-90 12 {top + plot_h / 2:.1f})">{y_label}</text>'
    )
    return parts


def _chart_rewards(plot: _Plot, rewards: Sequence[float]) -> list[str]:
    """The reward per step (with a dot per step when there are at most 30) and its moving
    average."""
    xy = [(plot.x(i), plot.y(v)) for i, v in enumerate(rewards, 1)]
    if not xy:
        return []
    points = " ".join(f"{px:.1f},{py:.1f}" for px, py in xy)
    smooth = " ".join(
        f"{px:.1f},{plot.y(v):.1f}"
        for (px, _), v in zip(xy, moving_average(list(rewards)), strict=True)
    )
    parts = [f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{points}"/>']
    if len(rewards) <= 30:
        parts += [
            f'<circle class="reward" cx="{px:.1f}" cy="{py:.1f}" r="3" fill="#1f77b4"/>'
            for px, py in xy
        ]
    parts.append(f'<polyline fill="none" stroke="#d62728" stroke-width="2" points="{smooth}"/>')
    return parts


def _chart_heldout(plot: _Plot, heldout: Sequence[HeldoutResult]) -> list[str]:
    """Each held-out evaluation: its success rate and 95% interval."""
    parts = []
    for r in heldout:
        cx = plot.x(r.step)
        parts.append(
            f'<line class="heldout-ci" x1="{cx:.1f}" x2="{cx:.1f}" y1="{plot.y(r.ci_low):.1f}" '
            f'y2="{plot.y(r.ci_high):.1f}" stroke="#2ca02c" stroke-width="2"/>'
        )
        parts.append(
            f'<circle class="heldout" cx="{cx:.1f}" cy="{plot.y(r.success):.1f}" r="5" '
            'fill="#2ca02c" stroke="white"/>'
        )
    return parts


def _chart_legend(plot: _Plot, heldout: bool) -> list[str]:
    """The legend, right-aligned above the x axis."""
    legend = [("#1f77b4", "mean reward per step"), ("#d62728", "moving average")]
    if heldout:
        legend.append(("#2ca02c", "held-out success (95% interval)"))
    return [
        f'<text x="{plot.left + plot.width}" y="{plot.bottom - 8 - 14 * (len(legend) - 1 - i)}" '
        f'font-size="11" text-anchor="end" fill="{colour}">{label}</text>'
        for i, (colour, label) in enumerate(legend)
    ]


def write_curve(
    rewards: list[float],
    out: Path,
    title: str = "mean reward per step",
    heldout: Sequence[HeldoutResult] = (),
) -> Path:
    """Write the chart to `out/reward_curve.svg` (one renderer, no plotting library); its
    path."""
    path = out / CURVE_FILE
    path.write_text(reward_chart_svg(rewards, heldout, title=title), encoding="utf-8")
    return path


def write_viewer(out: Path, tokenizer: Any, *, title: str, per_end: int = 24) -> Path:
    """`trajectories.html`: the trajectory viewer on the first and the last `per_end`
    episodes (before and after training), with each token's text."""
    from skyrl_sdk.agents.trajectory import read_trajectories
    from skyrl_sdk.agents.viewer import render_html

    episodes = read_trajectories(out / "trajectories.jsonl")
    if len(episodes) > 2 * per_end:
        episodes = episodes[:per_end] + episodes[-per_end:]
    path = out / "trajectories.html"
    html = render_html(
        episodes,
        decode=lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False),
        title=f"{title}: first and last {per_end} episodes",
    )
    path.write_text(html, encoding="utf-8")
    return path


def print_outputs(console: Console, report: Path, viewer: Path, episodes: Path) -> None:
    """The demo's closing lines: where the report and the viewer are, one absolute path a
    line (never wrapped, so a terminal can open them), and how to browse every episode."""
    console.print(f"Report: {escape(str(report.resolve()))}", soft_wrap=True, highlight=False)
    console.print(f"Viewer: {escape(str(viewer.resolve()))}", soft_wrap=True, highlight=False)
    console.print(
        f"All episodes: skyrl view {escape(str(episodes))}", soft_wrap=True, highlight=False
    )


# -- a quiet console ---------------------------------------------------------------------


def _errors_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


def quiet_libraries() -> None:
    """Keep what the libraries print on their own off the demo's console: transformers'
    "Loading weights" / "Writing model shards" bars and its warnings, huggingface_hub's bars,
    DeepSpeed's "Setting accelerator to CPU" (transformers imports DeepSpeed when installed),
    and Python warnings raised inside those libraries. Errors still show."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # DeepSpeed's logger resets its own level when it is created; a filter survives that.
    logging.getLogger("DeepSpeed").addFilter(_errors_only)
    for module in ("transformers", "peft", "huggingface_hub", "accelerate", "torch"):
        warnings.filterwarnings("ignore", module=rf"{module}(\.|$)")
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers comes with the trainer
        return
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


# -- progress while the first step runs --------------------------------------------------

HEARTBEAT_S = 15.0
"""Longest silence while the demo trains: a progress line comes at least this often."""
_HELDOUT_PREFIX = "heldout/"  # the held-out evaluator's episode ids start so


class _CountingPolicy:
    """The trainer's policy, counting its replies by kind (held-out or training)."""

    def __init__(self, inner: Any, on_reply: Callable[[bool], None]):
        self._inner = inner
        self._on_reply = on_reply

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def generate(self, prompt_token_ids: Any, sampling: Any, *, context: Any = None) -> Any:
        completion = await self._inner.generate(prompt_token_ids, sampling, context=context)
        episode = getattr(context, "episode_id", "") or ""
        self._on_reply(episode.startswith(_HELDOUT_PREFIX))
        return completion

    async def aclose(self) -> None:
        await self._inner.aclose()


class Heartbeat:
    """While `trainer` runs (use as a context manager): a progress line on `console` whenever
    `interval_s` seconds pass without a finished step, e.g. `... 30 s: the untrained policy
    is playing 64 held-out episodes (96 model replies so far)`.

    It counts by wrapping `trainer.policy` (replies; held-out episode ids start with
    `heldout/`) and `trainer.play_episode` (finished training episodes), and reads
    `trainer.step`."""

    def __init__(
        self,
        trainer: Any,
        console: Console,
        *,
        steps: int,
        heldout_episodes: int | None,
        interval_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.trainer = trainer
        self.console = console
        self.steps = steps
        self.heldout_episodes = heldout_episodes
        self.interval_s = interval_s
        self.clock = clock
        self.started = clock()
        self.heldout_replies = 0
        self.train_replies = 0
        self.episodes = 0
        self.last_reply_heldout = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen_step = trainer.step
        self._last_news = self.started
        trainer.policy = _CountingPolicy(trainer.policy, self._reply)
        play = getattr(trainer, "play_episode", None)
        if play is not None:

            async def counted(*args: Any, **kwargs: Any) -> Any:
                trajectory = await play(*args, **kwargs)
                with self._lock:
                    self.episodes += 1
                return trajectory

            trainer.play_episode = counted

    def _reply(self, heldout: bool) -> None:
        with self._lock:
            if heldout:
                self.heldout_replies += 1
            else:
                self.train_replies += 1
            self.last_reply_heldout = heldout

    def status(self) -> str:
        """The progress line for now."""
        elapsed = self.clock() - self.started
        step = self.trainer.step
        with self._lock:
            if self.last_reply_heldout or (self.heldout_replies == 0 and self.train_replies == 0):
                who = "the untrained policy" if step == 0 else f"the policy after step {step}"
                count = f"{self.heldout_episodes} " if self.heldout_episodes else ""
                what = (
                    f"{who} is playing {count}held-out episodes "
                    f"({self.heldout_replies} model replies so far)"
                    if self.heldout_replies or self.heldout_episodes
                    else "loading and starting the first episodes"
                )
            else:
                what = (
                    f"step {min(step + 1, self.steps)} of {self.steps} is running "
                    f"({self.episodes} training episodes finished so far)"
                )
        return f"... {elapsed:.0f} s: {what}"

    def tick(self) -> str | None:
        """The line to print now (None: a step finished within `interval_s`)."""
        now = self.clock()
        step = self.trainer.step
        if step != self._seen_step:
            self._seen_step, self._last_news = step, now
            return None
        if now - self._last_news < self.interval_s:
            return None
        self._last_news = now
        return self.status()

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self.interval_s)):
            line = self.tick()
            if line is not None:
                self.console.print(line, style="dim", highlight=False, soft_wrap=True)

    def __enter__(self) -> Heartbeat:
        self._thread = threading.Thread(target=self._run, name="demo-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
