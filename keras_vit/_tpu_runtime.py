"""TPU evidence from the environment and devices, and the libtpu switch (`TPU_LOAD_LIBRARY=0` without a TPU, since
`tensorflow-tpu`'s import then hangs waiting for one), without importing TensorFlow."""

import glob
import importlib.metadata
import os
import stat

# Where TPU VM devices appear; tests point these at a temporary tree.
DEV_ROOT = "/dev"
SYS_ROOT = "/sys"

GOOGLE_PCI_VENDOR = 0x1AE0  # Google's PCI vendor id, which TPU chips report

# The install that has TensorFlow's TPU kernels (ConfigureDistributedTPU & co.); plain `tensorflow` has none.
TPU_INSTALL_HINT = "pip install -r requirements-tpu.txt (tensorflow-tpu[gcs-filesystem]==2.20.0 libtpu==0.0.31)"


def _is_char_device(path):
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def _google_pci_devices(sys_root):
    found = []
    for path in sorted(glob.glob(os.path.join(sys_root, "bus", "pci", "devices", "*", "vendor"))):
        try:
            with open(path) as f:
                vendor = int(f.read().strip(), 16)
        except (OSError, ValueError):
            continue
        if vendor == GOOGLE_PCI_VENDOR:
            found.append(os.path.basename(os.path.dirname(path)))
    return found


def tpu_devices(dev_root=None, sys_root=None):
    """TPU chips' device files on this machine (a TPU VM), or [].

    v2-v4 TPU VMs have character devices /dev/accel0..N. v5e and later expose each chip through VFIO
    (/dev/vfio/N), which other PCI pass-through uses too, so those count only next to a Google PCI device.
    Linux's DRM accel subsystem makes a /dev/accel/ folder (accel/accel0) for other accelerators such as NPUs:
    that is not a TPU and is not matched.
    """
    dev_root = DEV_ROOT if dev_root is None else dev_root
    sys_root = SYS_ROOT if sys_root is None else sys_root
    accel = [p for p in sorted(glob.glob(os.path.join(dev_root, "accel[0-9]*"))) if _is_char_device(p)]
    if accel:
        return accel
    vfio = [p for p in sorted(glob.glob(os.path.join(dev_root, "vfio", "[0-9]*"))) if _is_char_device(p)]
    if vfio and _google_pci_devices(sys_root):
        return vfio
    return []


def tpu_evidence(environ=None, dev_root=None, sys_root=None):
    """A short reason string when this machine looks like it has (or is told to use) a TPU, else None."""
    environ = os.environ if environ is None else environ
    for variable in ("TPU_NAME", "COLAB_TPU_ADDR"):
        if environ.get(variable):
            return f"{variable}={environ[variable]}"
    devices = tpu_devices(dev_root, sys_root)
    if devices:
        return f"TPU VM devices {devices[:2]}"
    return None


def disable_libtpu_without_tpu(environ=None):
    """Sets TPU_LOAD_LIBRARY=0 when there is no TPU evidence and the variable is unset; returns the value used.

    Must run before TensorFlow is imported to have an effect; harmless afterwards and with plain `tensorflow`.
    """
    environ = os.environ if environ is None else environ
    if "TPU_LOAD_LIBRARY" not in environ and tpu_evidence(environ) is None:
        environ["TPU_LOAD_LIBRARY"] = "0"
    return environ.get("TPU_LOAD_LIBRARY")


def installed_tensorflow():
    """The installed TensorFlow distribution as "name==version" ("tensorflow-tpu==2.20.0"), or None."""
    for name in ("tensorflow-tpu", "tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return f"{name}=={importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
