"""The `url:` kind: an engine already running, attached to; nothing started or stopped.

Its time scale is the one place that asks an engine for it: 1 for a real engine, the
simulator's own when it attaches to a `kit sim serve --time-scale N` (`sim_clock` reads the
simulator's clock from one scrape of its metrics page).
"""

from __future__ import annotations

from pathlib import Path

from stallkit.engine import AttachLauncher, Launcher, Overlay, UrlSpec, check_listening
from stallkit.kits.arm.kinds.base import ArmKind, register
from stallkit.kits.kit import Kit
from stallkit.monitor import MetricsScraper, SimClock

__all__ = ["UrlKind", "sim_clock"]

#: wall seconds an attached arm waits for its engine to state its time scale: short, since
#: the health check after it says what is wrong with an engine that does not answer
SCALE_WAIT_S = 2.0


async def sim_clock(url: str, timeout_s: float) -> SimClock | None:
    """The simulator's own clock, from one scrape of its metrics page by the monitor's scraper
    (None for real engines, and for a page that could not be read)."""
    scraper = MetricsScraper(url, timeout_s=timeout_s)
    try:
        scraped = await scraper.scrape()
    finally:
        await scraper.aclose()
    return None if scraped.snapshot is None else scraped.snapshot.sim_clock


@register
class UrlKind(ArmKind[UrlSpec]):
    """`url:http://HOST:PORT`: an engine already running."""

    spec_class = UrlSpec
    attaches = True

    async def wall_scale(self, kit: Kit, spec: UrlSpec) -> float:
        """The scale the engine states: 1 for a real engine, the simulator's own."""
        stated = await sim_clock(spec.url.rstrip("/"), timeout_s=SCALE_WAIT_S)
        return 1.0 if stated is None else stated.scale

    def launcher(
        self,
        arm: str,
        spec: UrlSpec,
        kit: Kit,
        arm_dir: Path,
        log_path: Path,
        overlays: list[Overlay],
    ) -> Launcher:
        return AttachLauncher(spec)

    def check_start(self, kit: Kit, spec: UrlSpec) -> None:
        check_listening(spec.url, spec.raw)
