"""Energy as kWh, and as money and CO₂ where the user says what their electricity costs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from traitlets import TraitError

from .. import config
from ..errors import BadArgumentError

J_PER_KWH = 3.6e6


def configure(price_per_kwh: float | None = None, currency: str | None = None,
              carbon_g_per_kwh: float | None = None) -> None:
    """Set the price of a kWh (in ``currency``, e.g. "EUR") and grams of CO₂ per kWh of your grid
    (the ``NbGpu`` traits, which start from ``NBGPU_PRICE_PER_KWH`` and its kin); None keeps a setting."""
    cfg = config.settings()
    for name, value in (("price_per_kwh", price_per_kwh), ("currency", currency),
                        ("carbon_g_per_kwh", carbon_g_per_kwh)):
        try:
            if value is not None:
                setattr(cfg, name, str(value).strip() if name == "currency" else value)
        except TraitError as exc:  # the trait's own check: a number >= 0
            raise BadArgumentError(str(exc)) from None


@dataclass(frozen=True)
class Cost:
    """What some energy comes to: kWh always; money and CO₂ grams where configured (else NaN)."""

    energy_kwh: float
    cost: float
    currency: str
    co2_g: float

    def text(self) -> str:
        """``0.0123 kWh · 0.0037 EUR · 4.9 g CO₂`` (only the known parts)."""
        if not math.isfinite(self.energy_kwh):
            return "energy not measured"
        def sig(v: float) -> str:  # three significant digits, no exponent for everyday sizes
            return "0" if v == 0 else f"{v:.{max(0, 2 - math.floor(math.log10(abs(v))))}f}"
        parts = ((self.energy_kwh, " kWh"), (self.cost, f" {self.currency}"), (self.co2_g, " g CO₂"))
        return " · ".join(f"{sig(v)}{unit}".rstrip() for v, unit in parts if math.isfinite(v))

    def columns(self) -> dict[str, object]:
        """History columns: ``energy_kwh`` always, ``cost``/``currency``/``co2_g`` when configured."""
        out: dict[str, object] = {"energy_kwh": self.energy_kwh}
        if math.isfinite(self.cost):
            out.update(cost=self.cost, currency=self.currency)
        if math.isfinite(self.co2_g):
            out["co2_g"] = self.co2_g
        return out


def cost_of(energy_j: float) -> Cost:
    """The kWh, cost and CO₂ of ``energy_j`` joules at the configured price and carbon rate."""
    cfg = config.settings()
    kwh = float(energy_j) / J_PER_KWH if energy_j is not None else math.nan
    price, carbon = cfg.price_per_kwh, cfg.carbon_g_per_kwh
    return Cost(kwh, kwh * price if price is not None else math.nan, cfg.currency.strip(),
                kwh * carbon if carbon is not None else math.nan)
