"""Files the server writes are whole or absent: written beside, synced, then renamed over the old
one (and the folder synced), readable by this user only (0600) from the first byte."""

import logging
import os
import threading
import time
from pathlib import Path


def write_atomically(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new one, never a part,
    even after a power cut. ``mode`` applies from the first byte; the umask narrows it as usual."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _sync_folder(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _sync_folder(folder: Path) -> None:
    """The rename itself survives a power cut once the folder's entry is on disk."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def set_aside(path: Path, why: str) -> Path:
    """Move a damaged state file out of the way (``<name>.damaged-<time>``), so that the server
    starts without it; returns where it went."""
    aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
    os.replace(path, aside)
    logging.getLogger("verl_rl_insight.server").warning(
        "%s is damaged (%s): moved to %s; starting without it", path, why, aside
    )
    return aside


def private_folder(folder: Path) -> None:
    """Create ``folder`` (and its parents) readable by this user only, and make it so if it was not."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
