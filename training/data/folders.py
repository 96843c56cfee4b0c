"""Image-folder sources (`folder:PATH`): one sub-folder of images per class, scanned before training."""

import os
import warnings

import numpy as np
import tensorflow as tf

import keras_vit.files
import keras_vit.images

from .decoders import path_decoder, path_window_decoder
from .source import Source, stratified_split


def list_image_folder(path, follow_symlinks=False):
    """(paths, labels, class names) of a folder with one sub-folder of images per class.

    Every file whose extension is a format Pillow reads is listed (`keras_vit.images.image_suffixes()`:
    .jpg, .png, .webp, .tif(f), .bmp, .gif, .ppm, ...); other files are ignored. Class names are checked first
    (`check_class_name`). A symbolic link (a class folder or a file) is followed when its target lies inside
    `path`; one pointing outside it is refused unless `follow_symlinks`, so a data set cannot pull in files from
    elsewhere on the machine (their pixels would land in samples/*.npz).
    """
    if not keras_vit.files.isdir(path):  # a local path or a gs:// URL
        raise FileNotFoundError(
            f"Image folder {path!r} does not exist. Use folder:PATH with one sub-folder per class "
            f"(PATH/cat/1.jpg, PATH/dog/2.png, ...)."
        )
    class_names = [d for d in keras_vit.files.listdir(path) if keras_vit.files.isdir(keras_vit.files.join(path, d))]
    for name in class_names:
        check_class_name(name, path)
    suffixes = keras_vit.images.image_suffixes()
    paths, labels = [], []
    for label, name in enumerate(class_names):
        for file in keras_vit.files.walk(keras_vit.files.join(path, name)):
            if keras_vit.images.is_image_path(file, suffixes):
                paths.append(file)
                labels.append(label)
    if not follow_symlinks and not keras_vit.files.is_remote(path):
        _check_links_inside(path, [keras_vit.files.join(path, name) for name in class_names], paths)
    if not paths:
        raise ValueError(
            f"No images found in {path!r} (found sub-folders: {class_names or 'none'}). Expected one sub-folder per "
            f"class holding image files (any format Pillow reads: .jpg, .png, .webp, .tiff, .bmp, .gif, ...): put each "
            f"class's images into {path}/CLASS_NAME/ and run again."
        )
    return paths, np.asarray(labels, np.int64), class_names


def check_class_name(name, path="."):
    """Refuses a class folder name that cannot be one line of a labels file, naming it and the fix.

    Labels files (the export's labels.txt, TFLite metadata) hold one name per line, so a name that
    `str.splitlines` splits (a newline, U+2028, ...), a blank name, or one that is not UTF-8 (the file system's
    bytes, which os.listdir hands back as surrogate escapes) would come back as other labels than were trained.
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"The class folder {name!r} in {path!r} has a name that is not UTF-8 (its bytes: "
            f"{os.fsencode(name)!r}); class names become labels. Rename the folder to a UTF-8 name."
        ) from None
    if name.splitlines() != [name] or not name.strip():
        raise ValueError(
            f"The class folder {name!r} in {path!r} has a name with a line break (or no visible character); class "
            f"names are written one per line to labels files. Rename the folder to a one-line name."
        )


def _check_links_inside(root, class_dirs, paths):
    """Raises if a class folder or a file listed under the local folder `root` resolves outside it."""
    real_root = os.path.realpath(root)
    outside = []
    # os.walk follows no link below a class folder, so only class folders and links among the files can lead out.
    for p in class_dirs + [p for p in paths if os.path.islink(p)]:
        target = os.path.realpath(p)
        if os.path.commonpath([real_root, target]) != real_root:
            outside.append(f"{p!r} -> {target!r}")
    if outside:
        shown = ", ".join(outside[:3]) + (f" and {len(outside) - 3} more" if len(outside) > 3 else "")
        raise ValueError(
            f"{len(outside)} symbolic link(s) in {root!r} point outside it ({shown}); they are not followed. Copy "
            f"the files into the folder, or, if their targets are trusted, allow them with "
            f"--set follow_symlinks=True."
        )


def folder_source(path, fraction, background=keras_vit.images.DEFAULT_BACKGROUND, skip_unreadable=False,
            follow_symlinks=False, max_bytes=None):  # fmt: skip
    keras_vit.images.resolve_background(background)  # a bad option fails before the scan, not after
    paths, labels, class_names = list_image_folder(path, follow_symlinks)
    # Each file is decoded in full through the pipeline's reader, so a file that passes cannot fail mid-epoch
    # (unless it changes on disk in between); a bad one is named before training.
    scan = keras_vit.images.scan_images(paths, background=background, max_bytes=max_bytes)
    bad = [(p, reason) for p, (reason, _) in zip(paths, scan) if reason]
    # JPEGs by their bytes that Pillow reads differently from TensorFlow: these few stay on the Pillow path.
    pillow_jpegs = [p for p, (reason, kind) in zip(paths, scan) if not reason and kind == "jpeg"]
    if bad:
        listing = "\n".join(f"  {p}: {reason}" for p, reason in bad[:20])
        more = f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else ""
        if not skip_unreadable:
            raise ValueError(
                f"{len(bad)} unreadable image(s) in {path!r}; remove or replace them and run again, or skip them "
                f"with --set skip_unreadable_images=True:\n{listing}{more}"
            )
        warnings.warn(
            f"Skipping {len(bad)} unreadable image(s) of {len(paths)} in {path!r} "
            f"(skip_unreadable_images=True):\n{listing}{more}",
            stacklevel=2,
        )
        unreadable = {p for p, _ in bad}
        keep = np.asarray([p not in unreadable for p in paths])
        paths, labels = [p for p, k in zip(paths, keep) if k], labels[keep]
    if len(class_names) < 2:
        raise ValueError(f"Image folder {path!r} has {len(class_names)} class sub-folder(s); at least 2 are needed.")
    counts = np.bincount(labels, minlength=len(class_names))
    if counts.min() < 2:
        few = [class_names[i] for i in np.flatnonzero(counts < 2)]
        raise ValueError(
            f"Classes {few} in {path!r} have fewer than 2 (readable) images; a held-out split needs at least 2. "
            f"Add images to those sub-folders (2 or more each) or remove the sub-folders, and run again."
        )
    train, heldout = stratified_split(labels, fraction)
    kept = list(paths)  # what the run's fingerprint hashes: never a file the scan left out
    paths = np.asarray(paths)
    source = Source(
        train=tf.data.Dataset.from_tensor_slices((paths[train], labels[train])),
        heldout=tf.data.Dataset.from_tensor_slices((paths[heldout], labels[heldout])),
        num_train=len(train),
        num_heldout=len(heldout),
        class_names=class_names,
        decode=path_decoder(background, max_bytes),
        train_arrays=(paths[train], labels[train]),
        decode_window=path_window_decoder(background, pillow_jpegs, max_bytes),
        files=kept,
    )
    return source
