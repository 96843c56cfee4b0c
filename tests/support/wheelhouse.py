"""Wheels of the distributions this test environment already has installed, for an offline `pip install`.

A venv that must not see this environment's packages (the base install without TensorFlow) still needs Keras,
JAX and the rest. Downloading them would make the test depend on the network; instead each distribution the
install needs is packed back into a wheel from its installed files (its RECORD), at the version installed here,
and pip installs from that folder with `--no-index`. pip still resolves the requirements itself: a requirement
this environment does not satisfy fails the install, and a distribution left out of the folder cannot be
installed, so the venv holds exactly what the requirements pull in.

What is not packed: files outside site-packages (console scripts, which pip writes again from
entry_points.txt, and C headers), compiled bytecode, and pip's own records (INSTALLER, REQUESTED,
direct_url.json); RECORD is written afresh with each file's hash.
"""

import base64
import csv
import hashlib
import importlib.metadata
import io
import os
import re
import zipfile

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

_PIP_RECORDS = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")


def closure(requirements):
    """Canonical names of the installed distributions that `requirements` (strings) pull in, recursively.

    Markers are evaluated for this interpreter; a requirement `name[extra]` follows that distribution's
    requirements for `extra` too. Raises `LookupError` for a requirement this environment does not satisfy.
    """
    followed = {}  # name -> the extras whose requirements were followed ("" for the distribution's own)
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise LookupError(f"{req} is not installed in this environment") from None
        if not req.specifier.contains(dist.version, prereleases=True):
            raise LookupError(f"{req} is not satisfied by the installed {name} {dist.version}")
        wanted = {"", *req.extras} - followed.get(name, set())
        followed.setdefault(name, set()).update(wanted)
        todo += [(Requirement(r), e) for r in dist.requires or () for e in wanted]
    return sorted(followed)


def _hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _wheel_tag(wheel_text):
    """`py3-none-any` from a WHEEL file's `Tag:` lines (several tags joined as wheel filenames join them)."""
    tags = [line.split(":", 1)[1].strip() for line in wheel_text.splitlines() if line.startswith("Tag:")]
    parts = [sorted({t.split("-")[i] for t in tags}) for i in range(3)]
    return "-".join(".".join(p) for p in parts)


def repack(name, folder):
    """The installed distribution `name` packed into a wheel in `folder`; returns the wheel's path."""
    dist = importlib.metadata.distribution(name)
    info = next(p for p in dist.files if p.parts[0].endswith(".dist-info") and p.name == "METADATA").parts[0]
    wheel_text = dist.read_text("WHEEL")
    if wheel_text is None:
        raise LookupError(f"{name} was not installed from a wheel (no {info}/WHEEL): it cannot be packed back")
    stem = re.sub(r"-", "_", info.removesuffix(".dist-info").rsplit("-", 1)[0])
    path = os.path.join(folder, f"{stem}-{dist.version}-{_wheel_tag(wheel_text)}.whl")
    rows = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for file in dist.files:
            if file.parts[0] == ".." or file.suffix == ".pyc" or (file.parts[0] == info and file.name in _PIP_RECORDS):
                continue
            source = dist.locate_file(file)
            if not os.path.isfile(source):
                continue
            with open(source, "rb") as f:
                data = f.read()
            archive.writestr(file.as_posix(), data)
            rows.append((file.as_posix(), _hash(data), len(data)))
        record = io.StringIO()
        csv.writer(record, lineterminator="\n").writerows([*rows, (f"{info}/RECORD", "", "")])
        archive.writestr(f"{info}/RECORD", record.getvalue())
    return path


def build(requirements, folder):
    """Packs every installed distribution `requirements` pull in (`closure`) into `folder`; returns their names."""
    os.makedirs(folder, exist_ok=True)
    names = closure(requirements)
    for name in names:
        repack(name, folder)
    return names
