"""The one image reader of the project: image files -> uint8 RGB (or grey) arrays, the same way everywhere
(training, export, inspection); its rules, in `read_image`'s order: docs/training.md ("Images are read one way")."""

import concurrent.futures
import io
import os
import stat

import numpy as np

from keras_vit import files

_ORIENTATION = 0x0112  # the EXIF tag
BACKGROUNDS = {"white": (255, 255, 255), "black": (0, 0, 0)}
DEFAULT_BACKGROUND = "white"

# Formats Pillow can identify but not decode without other software (stubs for scientific formats, MPEG
# with no decoder, WMF/EMF on Windows only, EPS/PS through Ghostscript): files with their extensions are not
# pictures of a data set, so listing them would only fail the scan.
_NOT_PICTURES = frozenset({"BUFR", "GRIB", "HDF5", "MPEG", "WMF", "EPS"})

# Bytes read of one image file at most (`read_file`): far above any photo a ViT is trained on (a 100-megapixel
# PNG is about 60 MB), and small enough that eight parallel readers cannot exhaust a machine's memory.
MAX_IMAGE_BYTES = 64 * 2**20
_FILE_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
               stat.S_IFBLK: "a block device"}  # fmt: skip


class ImageReadError(ValueError):
    """A file that is not a readable picture; the message names the file, the reason and what would work.

    Attributes:
        reason: the reason alone ("OSError: image file is truncated ..."), for listings of many files.
    """

    def __init__(self, message, reason=None):
        super().__init__(message)
        self.reason = reason or message


def image_suffixes():
    """Lower-case file extensions of every format Pillow can read here (".jpg", ".png", ".webp", ".tiff", ...)."""
    from PIL import Image

    Image.init()  # registers every plugin, not only the five Pillow loads up front
    return tuple(
        sorted(
            ext for ext, fmt in Image.registered_extensions().items() if fmt in Image.OPEN and fmt not in _NOT_PICTURES
        )
    )


def is_image_path(path, suffixes=None):
    """True if the file name ends in an extension Pillow reads (case-insensitive)."""
    return os.fspath(path).lower().endswith(suffixes or image_suffixes())


def resolve_background(background):
    """`"white"`, `"black"` or an (R, G, B) triple of 0..255 integers -> an (R, G, B) tuple of ints.

    Raises:
        ValueError: anything else, naming what was received.
    """
    if isinstance(background, str) and background.lower() in BACKGROUNDS:
        return BACKGROUNDS[background.lower()]
    if not isinstance(background, str):
        try:
            rgb = tuple(int(v) for v in background)
        except (TypeError, ValueError):
            rgb = ()
        if len(rgb) == 3 and all(0 <= v <= 255 and v == c for v, c in zip(rgb, background)):
            return rgb
    raise ValueError(
        f"background must be 'white', 'black' or an (R, G, B) triple of integers 0..255. Received: {background!r}"
    )


def parse_background(text):
    """A command-line `--background` value ("white", "black" or "R,G,B") -> an (R, G, B) tuple of ints."""
    parts = str(text).split(",")
    if len(parts) == 3:
        try:
            return resolve_background(tuple(int(p) for p in parts))
        except ValueError:
            pass
    try:
        return resolve_background(str(text))
    except ValueError:
        raise ValueError(
            f"--background must be white, black or R,G,B with integers 0..255 (e.g. 128,128,128). Received: {text!r}"
        ) from None


def decode_image(data, *, background=DEFAULT_BACKGROUND, channels=3, name="image"):
    """Decodes an encoded picture (bytes of any format Pillow reads) as described in the module docstring.

    Args:
        data: the file's bytes.
        background: what transparent pixels are composited onto: "white", "black" or (R, G, B).
        channels: 3 for RGB, 1 for grey.
        name: how the picture is named in errors (its path).

    Returns:
        uint8 numpy array (H, W, channels).

    Raises:
        ImageReadError: the bytes are not a picture Pillow can read, are truncated, or hold pixels that have no
            8-bit RGB meaning (float outside [0, 1], 32-bit integers above 65535).
        ValueError: a bad `background` or `channels`.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    rgb_background = resolve_background(background)
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 (grey) or 3 (RGB). Received: channels={channels!r}")
    try:
        with Image.open(io.BytesIO(data)) as picture:
            picture.load()  # every pixel now: a truncated file fails here, with its name, not later
            if picture.getexif().get(_ORIENTATION, 1) != 1:  # exif_transpose copies even when nothing turns
                picture = ImageOps.exif_transpose(picture)
            rgb = _to_rgb(picture, rgb_background, name)
    except ImageReadError:
        raise
    except Image.DecompressionBombError as err:
        raise ImageReadError(
            f"Cannot read the image {name!r}: {err} Resize it, or raise PIL.Image.MAX_IMAGE_PIXELS "
            f"if the file is trusted.",
            f"DecompressionBombError: {err}",
        ) from err
    except Exception as err:  # Pillow raises many types for broken or foreign files (OSError, SyntaxError, ...)
        if isinstance(err, UnidentifiedImageError):  # its own message names a BytesIO object, not the file
            reason = f"UnidentifiedImageError: {len(data)} bytes in no format Pillow recognises"
        else:
            reason = f"{type(err).__name__}: {err}"
        raise ImageReadError(
            f"Cannot read the image {name!r} ({reason}). It is empty, truncated, corrupt or not a picture; replace "
            f"or remove it (any format Pillow reads works: PNG, JPEG, WebP, TIFF, BMP, GIF, ...).",
            reason,
        ) from err
    if channels == 1:
        return np.asarray(Image.fromarray(rgb, "RGB").convert("L"))[..., None]
    return rgb


def read_image(path, *, background=DEFAULT_BACKGROUND, channels=3, max_bytes=None):
    """Reads one picture from a local path or a `tf.io.gfile` URL; see `decode_image` and `read_file`.

    Raises:
        FileNotFoundError: there is no file at `path`.
        ImageReadError: the file is not a readable picture, not a regular file, or larger than `max_bytes`
            (the message names it).
    """
    path = os.fspath(path)
    return decode_image(read_file(path, max_bytes), background=background, channels=channels, name=path)


def _size_error(path, size, limit):
    reason = f"{size} bytes, over the {limit}-byte limit per image"
    return ImageReadError(
        f"The image file {path!r} holds {reason}; it is read only up to that limit. Shrink the file, or raise the "
        f"limit (--set max_image_bytes=N for training, keras_vit.images.MAX_IMAGE_BYTES) if it is trusted.",
        reason,
    )


def read_file(path, max_bytes=None):
    """The bytes of an image file, read only if it is a regular file of at most `max_bytes` bytes.

    A FIFO, socket or device (a link to /dev/zero, say) would block the reader or never end, and a huge file
    would be read whole before Pillow's pixel limit could refuse it: so the file's type and size are checked
    before it is opened, and at most `max_bytes + 1` bytes are read (a file that grows meanwhile is still caught).

    Args:
        path: a local path or a `tf.io.gfile` URL (an object store holds only regular files).
        max_bytes: the size limit; None for `MAX_IMAGE_BYTES`.

    Raises:
        FileNotFoundError: there is no file at `path`.
        ImageReadError: not a regular file, or over the limit (the message names the file).
    """
    limit = MAX_IMAGE_BYTES if max_bytes is None else int(max_bytes)
    path = os.fspath(path)
    if files.is_remote(path):  # an object store holds regular files only; the read is bounded all the same
        try:
            with files.open(path, "rb") as f:  # no separate existence check: this runs once per image per epoch
                data = f.read(limit + 1)
        except Exception as err:
            if files.isfile(path):  # gfile raises NotFoundError for a missing URL
                raise
            raise FileNotFoundError(f"No image file at {path!r}.") from err
    else:
        try:
            info = os.stat(path)  # follows links: the type and size of what would be read
        except FileNotFoundError as err:
            raise FileNotFoundError(f"No image file at {path!r}.") from err
        if not stat.S_ISREG(info.st_mode):
            if stat.S_ISDIR(info.st_mode):
                raise FileNotFoundError(f"No image file at {path!r} (it is a directory).")
            kind = _FILE_KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            raise ImageReadError(
                f"{path!r} is {kind}, not a regular file; it is not opened (reading it could block or never end). "
                f"Remove it, or replace it with the image file itself.",
                f"{kind}, not a regular file",
            )
        if info.st_size > limit:
            raise _size_error(path, info.st_size, limit)
        # O_NONBLOCK: if a FIFO replaced the file since the stat, opening it still returns at once.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ImageReadError(f"{path!r} is not a regular file; it is not read.", "not a regular file")
            data = f.read(limit + 1)
    if len(data) > limit:
        raise _size_error(path, f"more than {limit}", limit)
    return data


def find_unreadable(paths, *, background=DEFAULT_BACKGROUND, workers=None, max_bytes=None):
    """[(path, reason)] of the files `read_image` rejects, in the order of `paths`.

    Every file is read and decoded in full, so whatever passes here also decodes during training. Pillow
    decodes outside the GIL, so the files are read by a pool of threads (`workers`, default: the CPU count).
    """
    scan = scan_images(paths, background=background, workers=workers, max_bytes=max_bytes)
    return [(path, reason) for path, (reason, _) in zip(paths, scan) if reason]


def scan_images(paths, *, background=DEFAULT_BACKGROUND, workers=None, max_bytes=None):
    """[(reason or None, kind)] for each of `paths`, in order: `find_unreadable`'s check (files are read through
    `read_file`, so a FIFO, a device or a file over `max_bytes` is a reason, never a hang), and the file's kind:
    "plain_jpeg" (TensorFlow's JPEG decoder reads it to the same pixels as `read_image`: see `plain_jpeg`),
    "jpeg" (JPEG bytes that only `read_image` reads right) or "other"."""
    resolve_background(background)  # a bad option is one error, not one per file

    def check(path):
        try:
            data = read_file(os.fspath(path), max_bytes)
            decode_image(data, background=background, name=path)
        except ImageReadError as err:
            return err.reason, "other"
        except OSError as err:  # a file removed or unreadable since it was listed
            return f"{type(err).__name__}: {err}", "other"
        if plain_jpeg(data):
            return None, "plain_jpeg"
        return None, "jpeg" if data[:3] == b"\xff\xd8\xff" else "other"  # the bytes tf.io.is_jpeg checks

    paths = list(paths)
    workers = max(1, min(len(paths), workers or os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(check, paths))


def plain_jpeg(data):
    """True for a JPEG that `decode_image` reads as its decoder gives it: RGB or grey, and no EXIF orientation to
    apply. TensorFlow's `decode_jpeg` (which ignores EXIF and reads no CMYK) then yields the same pixels, so a
    training pipeline may decode just its crop window (`tf.io.decode_and_crop_jpeg`). `data` must be a picture
    `decode_image` reads."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as picture:  # the header only; `data` has passed `decode_image`
        return picture.format == "JPEG" and picture.mode in ("RGB", "L") and picture.getexif().get(_ORIENTATION, 1) == 1


def _to_rgb(picture, background, name):
    """A loaded Pillow image of any mode -> uint8 (H, W, 3), transparency composited onto `background`."""
    from PIL import Image

    mode = picture.mode
    if mode.startswith("I") or mode == "F":
        grey = _wide_to_uint8(np.asarray(picture), mode, name)
        picture = Image.fromarray(grey, "L")
    elif mode in ("LA", "La", "PA", "RGBA", "RGBa") or "transparency" in picture.info:  # tRNS / GIF index
        rgba = np.asarray(picture.convert("RGBA"), dtype=np.int64)
        alpha = rgba[..., 3:]
        # out = (rgb * a + background * (255 - a)) / 255, rounded exactly in integers (255 is odd: no ties).
        mixed = rgba[..., :3] * alpha + np.asarray(background, np.int64) * (255 - alpha)
        return ((mixed + 127) // 255).astype(np.uint8)
    try:
        return np.asarray(picture if mode == "RGB" else picture.convert("RGB"), dtype=np.uint8)
    except ValueError as err:  # a mode Pillow cannot turn into RGB (LAB)
        raise ImageReadError(
            f"Cannot convert the image {name!r} from Pillow mode {mode!r} to RGB ({err}). Save it as RGB or grey.",
            f"mode {mode!r} has no conversion to RGB",
        ) from err


def _wide_to_uint8(values, mode, name):
    """16-bit, 32-bit integer or float grey pixels -> uint8, as the module docstring says."""
    if mode == "F":
        low, high = float(values.min(initial=0.0)), float(values.max(initial=0.0))
        if not (np.isfinite(low) and np.isfinite(high) and low >= 0.0 and high <= 1.0):
            raise ImageReadError(
                f"The float image {name!r} has values in [{low:g}, {high:g}]; float pictures are read as 0..1 "
                f"intensities. Save it as 8- or 16-bit, or scale it to [0, 1]."
            )
        return np.round(values * 255.0).astype(np.uint8)
    values = values.astype(np.int64)
    low, high = int(values.min(initial=0)), int(values.max(initial=0))
    if low < 0 or high > 65535:
        raise ImageReadError(
            f"The 32-bit integer image {name!r} has values in [{low}, {high}]; integer pictures are read as 8- "
            f"or 16-bit intensities (0..65535). Save it as 8- or 16-bit."
        )
    return (values >> 8).astype(np.uint8)
