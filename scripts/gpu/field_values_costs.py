"""Whether NVML's field values read the energy counter (and power) for less CPU than the getters.

The energy counter's getter is the sampler's costliest single read (3.3–6.2 ms on an H200,
every 15 s). ``nvmlDeviceGetFieldValues`` reads the same counter as a field
(``NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION``), and several fields in one call. This times, on
one GPU, back to back and spaced 0.25 s apart (the sampler calls them cold): the getter and
the field for the energy counter, the power getter and the instant-power field, and one call
for both fields; and checks that getter and field read the same counter.

    python3 scripts/gpu/field_values_costs.py --out fields.json [--gpu 0]
"""

from __future__ import annotations

import time

from nvml_call_costs import cpu_cost_us, one_gpu, spaced_cost_us, write_results


def main() -> int:
    with one_gpu(__doc__.splitlines()[0]) as (args, nv, h, out):
        out["agreement"] = {}
        energy_f, power_f = nv.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, nv.NVML_FI_DEV_POWER_INSTANT
        ways = {
            "energy getter": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
            "energy field": lambda: nv.nvmlDeviceGetFieldValues(h, [energy_f]),
            "power getter": lambda: nv.nvmlDeviceGetPowerUsage(h),
            "instant power field": lambda: nv.nvmlDeviceGetFieldValues(h, [power_f]),
            "energy and power fields, one call": lambda: nv.nvmlDeviceGetFieldValues(h, [energy_f, power_f]),
        }
        for name, fn in ways.items():
            try:
                out["figures"][name] = cpu_cost_us(fn, 20)
                out["figures"][f"{name}, 0.25 s apart"] = spaced_cost_us(fn, 12, 0.25)
            except nv.NVMLError as exc:
                out["figures"][name] = {"error": str(exc)}
        pairs = []
        for _ in range(5):
            got = nv.nvmlDeviceGetTotalEnergyConsumption(h)
            field = nv.nvmlDeviceGetFieldValues(h, [energy_f])[0]
            pairs.append({"getter_mj": int(got), "field_return": int(field.nvmlReturn),
                          "field_mj": int(field.value.ullVal), "field_latency_us": int(field.latencyUsec)})
            time.sleep(0.3)
        out["agreement"]["energy getter then field, 0.3 s apart"] = pairs
    return write_results(out, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
