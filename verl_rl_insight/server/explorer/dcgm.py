"""DCGM's GPU fault and throttle figures in the words nvidia-smi uses (``nvidia-smi -q -d PERFORMANCE``):
``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=4`` is "SW Power Cap", not a code to look up."""

from __future__ import annotations

from collections.abc import Mapping

# NVML's clocks-event reasons (nvmlClocksEventReason*), the bits of DCGM_FI_DEV_CLOCK_THROTTLE_REASONS
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "GPU Idle"),
    (0x2, "Applications Clocks Setting"),
    (0x4, "SW Power Cap"),
    (0x8, "HW Slowdown"),
    (0x10, "Sync Boost"),
    (0x20, "SW Thermal Slowdown"),
    (0x40, "HW Thermal Slowdown"),
    (0x80, "HW Power Brake Slowdown"),
    (0x100, "Display Clock Setting"),
)
FAULT_WORDS = {
    "DCGM_FI_DEV_XID_ERRORS": "XID error {value}",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "{value} single-bit ECC errors (volatile)",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "{value} double-bit ECC errors (volatile)",
}


def throttle_reasons(mask: int) -> list[str]:
    """The reasons a bitmask holds, as nvidia-smi names them (an unknown bit as its hex value)."""
    named = [name for bit, name in THROTTLE_BITS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in THROTTLE_BITS)
    return named + ([f"unknown reason 0x{rest:x}"] if rest else [])


def fault_words(faults: Mapping[str, float]) -> list[str]:
    """Each fault counter that is not 0, in words (``XID error 79``)."""
    return [
        FAULT_WORDS.get(name, name + " {value}").format(value=int(value))
        for name, value in faults.items()
        if value and value == value
    ]
