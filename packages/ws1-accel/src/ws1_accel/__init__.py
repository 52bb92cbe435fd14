"""Fail-closed accelerator facts for WS1 profiles (and anyone else's).

A *profile* names an execution target (``cpu_bf16``, ``cuda_bf16``, ...); its *family* says whose
kernels run (``cpu``, ``triton``, ``cuda``, ``ascend``); the family fixes the *device type*
(``cpu``, ``cuda``, ``npu``). Every question about a device goes through one vendor object per
device type, so the CUDA and NPU specifics sit in one place and can be simulated in tests.

Fail closed:

* :func:`resolve_device` raises :class:`AcceleratorUnavailable` when the profile's device is absent;
* a device of another type than the profile's family (``ascend_bf16`` on ``cuda:0``) raises
  :class:`ProfileDeviceMismatch` before any device is probed;
* nothing ever falls back to another device.
"""

from __future__ import annotations

import importlib
import platform
import random
import types
from dataclasses import asdict, dataclass

import torch

__all__ = [
    "AcceleratorError",
    "AcceleratorUnavailable",
    "ProfileDeviceMismatch",
    "UnknownProfile",
    "Facts",
    "BUILTIN_PROFILES",
    "PROFILE_FAMILY",
    "FAMILY_DEVICE_TYPE",
    "register_profile",
    "family_of",
    "device_type_of",
    "is_available",
    "unavailable_reason",
    "resolve_device",
    "device_name",
    "arch_key",
    "disable_tf32",
    "tf32_enabled",
    "tf32_flags",
    "seed_all",
    "synchronize",
    "empty_cache",
    "facts",
    "VENDORS",
]


class AcceleratorError(RuntimeError):
    """Base class of every ws1-accel error."""


class AcceleratorUnavailable(AcceleratorError):
    """The profile's device is not present on this host (CLIs exit 2 on it)."""


class ProfileDeviceMismatch(AcceleratorError, ValueError):
    """A profile was pointed at a device of another family (rejected before any probe)."""


class UnknownProfile(AcceleratorError, KeyError):
    """A profile name this registry does not know."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


# The one declaration of WS1's backend families (whose kernels run) and the device type each runs on,
# and of the built-in profiles (ws1-contract, ws1-ops' registry and the gates derive theirs from here).
FAMILY_DEVICE_TYPE: dict[str, str] = {"cpu": "cpu", "triton": "cuda", "cuda": "cuda", "ascend": "npu"}
BUILTIN_PROFILES: types.MappingProxyType = types.MappingProxyType(
    {
        "cpu_bf16": "cpu",
        "triton_cuda_bf16": "triton",
        "cuda_bf16": "cuda",
        "ascend_bf16": "ascend",
    }
)
# profile -> family: the built-in ones and any added with register_profile()
PROFILE_FAMILY: dict[str, str] = dict(BUILTIN_PROFILES)


def register_profile(name: str, family: str) -> None:
    """Add a profile of your own (e.g. ``register_profile("my_fp16", "cuda")``)."""
    if family not in FAMILY_DEVICE_TYPE:
        raise ValueError(f"unknown backend family {family!r}; expected one of {sorted(FAMILY_DEVICE_TYPE)}")
    PROFILE_FAMILY[name] = family


def family_of(profile: str) -> str:
    try:
        return PROFILE_FAMILY[profile]
    except KeyError:
        raise UnknownProfile(f"unknown profile {profile!r}; expected one of {sorted(PROFILE_FAMILY)}") from None


def device_type_of(profile: str) -> str:
    return FAMILY_DEVICE_TYPE[family_of(profile)]


# --------------------------------------------------------------------------------------------
# Vendors: everything device-type specific. Each answers (available, reason) without raising.
# --------------------------------------------------------------------------------------------


class _Cpu:
    type = "cpu"

    def probe(self) -> tuple[bool, str]:
        return True, ""

    def count(self) -> int:
        return 1

    def name(self, index: int) -> str:
        proc = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        proc = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        return proc

    def arch_key(self, index: int) -> str:
        # torch's own dispatch ISA (what its vectorized kernels use): 'avx512', 'avx2', 'default'...
        return torch.backends.cpu.get_cpu_capability().lower()

    def disable_tf32(self) -> None:
        # TF32 is a CUDA notion; the CPU matmul precision knob also admits reduced precision.
        torch.set_float32_matmul_precision("highest")

    def tf32_enabled(self) -> bool:
        return torch.get_float32_matmul_precision() != "highest"

    def seed(self, seed: int) -> None:
        pass

    def synchronize(self, index: int) -> None:
        pass

    def empty_cache(self) -> None:
        pass


class _Cuda:
    type = "cuda"

    def probe(self) -> tuple[bool, str]:
        if not torch.cuda.is_available():
            build = torch.version.cuda
            why = (
                "this torch build has no CUDA support"
                if build is None
                else f"no CUDA device visible (torch built for CUDA {build})"
            )
            return False, why
        return True, ""

    def count(self) -> int:
        return torch.cuda.device_count()

    def name(self, index: int) -> str:
        return torch.cuda.get_device_name(index)

    def arch_key(self, index: int) -> str:
        major, minor = torch.cuda.get_device_capability(index)
        return f"sm{major}{minor}"

    def disable_tf32(self) -> None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")

    def tf32_enabled(self) -> bool:
        return bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)

    def seed(self, seed: int) -> None:
        torch.cuda.manual_seed_all(seed)

    def synchronize(self, index: int) -> None:
        torch.cuda.synchronize(index)

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()


class _Npu:
    """Ascend NPU through torch_npu, imported only when asked (its absence means unavailable)."""

    type = "npu"

    def _module(self):
        try:
            importlib.import_module("torch_npu")
        except Exception as exc:  # ImportError, or CANN libraries missing (OSError, RuntimeError)
            return None, f"torch_npu cannot be imported: {type(exc).__name__}: {exc}"
        npu = getattr(torch, "npu", None)
        if npu is None:
            return None, "torch_npu imported but torch.npu is missing"
        return npu, ""

    def probe(self) -> tuple[bool, str]:
        npu, why = self._module()
        if npu is None:
            return False, why
        try:
            ok = bool(npu.is_available())
        except Exception as exc:
            return False, f"torch.npu.is_available() failed: {exc}"
        return (True, "") if ok else (False, "torch_npu imported but no NPU device is visible")

    def _npu(self):
        npu, why = self._module()
        if npu is None:
            raise AcceleratorUnavailable(f"npu: {why}")
        return npu

    def count(self) -> int:
        return int(self._npu().device_count())

    def name(self, index: int) -> str:
        return str(self._npu().get_device_name(index))

    def arch_key(self, index: int) -> str:
        # torch_npu reports the SoC name as the device name, e.g. 'Ascend910B3' (what CANN compiles for).
        return str(self._npu().get_device_name(index))

    def disable_tf32(self) -> None:
        # Ascend has no TF32 mode: FP32 matmuls are FP32 (HF32 is opt-in and we never opt in).
        pass

    def tf32_enabled(self) -> bool:
        return False

    def seed(self, seed: int) -> None:
        self._npu().manual_seed_all(seed)

    def synchronize(self, index: int) -> None:
        self._npu().synchronize(index)

    def empty_cache(self) -> None:
        self._npu().empty_cache()


VENDORS = {"cpu": _Cpu(), "cuda": _Cuda(), "npu": _Npu()}


def _vendor(device_type: str):
    try:
        return VENDORS[device_type]
    except KeyError:
        raise ProfileDeviceMismatch(f"unknown device type {device_type!r}; expected one of {sorted(VENDORS)}") from None


def unavailable_reason(profile: str) -> str | None:
    """Why the profile's device is absent, or None when it is present. Never raises for a known profile."""
    ok, why = _vendor(device_type_of(profile)).probe()
    return None if ok else why


def is_available(profile: str) -> bool:
    return unavailable_reason(profile) is None


def resolve_device(profile: str, device: str | torch.device | None = None) -> torch.device:
    """The torch.device the profile runs on.

    ``device`` (optional) must be of the profile's device type; it is checked before anything is
    probed, so ``resolve_device("ascend_bf16", "cuda:0")`` fails on any host with the same error.
    """
    want = device_type_of(profile)
    index = None
    if device is not None:
        try:
            kind, index = _parse(device)
        except ProfileDeviceMismatch as exc:
            raise ProfileDeviceMismatch(f"{profile}: {exc}") from None
        if kind != want:
            raise ProfileDeviceMismatch(
                f"{profile} (family {family_of(profile)}) runs on {want} devices, not {str(device)!r}"
            )
    vendor = _vendor(want)
    ok, why = vendor.probe()
    if not ok:
        raise AcceleratorUnavailable(f"{profile} needs a {want} device: {why}")
    if want == "cpu":
        return torch.device("cpu")
    index = index or 0
    n = vendor.count()
    if index >= n:
        raise AcceleratorUnavailable(f"{profile}: {want}:{index} requested but only {n} {want} device(s) visible")
    return torch.device(want, index)


def _parse(device: str | torch.device) -> tuple[str, int | None]:
    """('npu', 0) from 'npu:0' without asking torch, which knows 'npu' only once torch_npu is imported."""
    if isinstance(device, torch.device):
        return device.type, device.index
    if not isinstance(device, str):
        raise ProfileDeviceMismatch(f"{device!r} is not a device (expected a string like 'cuda:0')")
    kind, _, idx = device.partition(":")
    if kind not in VENDORS or (idx and not idx.isdigit()):
        raise ProfileDeviceMismatch(f"{device!r} is not a device (expected cpu, cuda[:N] or npu[:N])")
    return kind, int(idx) if idx else None


def _split(device: str | torch.device) -> tuple[str, int]:
    t, i = _parse(device)
    return t, 0 if i is None else i


def device_name(device: str | torch.device) -> str:
    t, i = _split(device)
    return _vendor(t).name(i)


def arch_key(device: str | torch.device) -> str:
    t, i = _split(device)
    return _vendor(t).arch_key(i)


def disable_tf32(device: str | torch.device) -> bool:
    """Disable TF32 (or its equivalent) for the device type; returns the state after (False)."""
    t, _ = _split(device)
    v = _vendor(t)
    v.disable_tf32()
    return v.tf32_enabled()


def tf32_enabled(device: str | torch.device) -> bool:
    t, _ = _split(device)
    return _vendor(t).tf32_enabled()


def tf32_flags() -> dict:
    """torch's process-wide TF32 switches as they are now (for a record's provenance)."""
    return {
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def seed_all(seed: int, device: str | torch.device = "cpu") -> None:
    """Seed Python's, torch's CPU and the device's generators."""
    random.seed(seed)
    torch.manual_seed(seed)
    t, _ = _split(device)
    _vendor(t).seed(seed)


def synchronize(device: str | torch.device) -> None:
    t, i = _split(device)
    _vendor(t).synchronize(i)


def empty_cache(device: str | torch.device) -> None:
    t, _ = _split(device)
    _vendor(t).empty_cache()


@dataclass(frozen=True)
class Facts:
    profile: str
    family: str
    device_type: str
    device: str
    device_name: str
    arch_key: str
    tf32_enabled: bool
    torch_version: str

    def to_dict(self) -> dict:
        return asdict(self)


def facts(profile: str, device: str | torch.device | None = None) -> Facts:
    """Everything a report's provenance needs about the profile's device (raises when absent)."""
    dev = resolve_device(profile, device)
    return Facts(
        profile=profile,
        family=family_of(profile),
        device_type=dev.type,
        device=str(dev),
        device_name=device_name(dev),
        arch_key=arch_key(dev),
        tf32_enabled=tf32_enabled(dev),
        torch_version=torch.__version__,
    )
