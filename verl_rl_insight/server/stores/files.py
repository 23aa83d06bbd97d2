"""Files the server writes are whole or absent: written beside, then renamed over the old one."""

import os
import threading
from pathlib import Path
from typing import Any


def write_atomically(path: Path, text: str, mode: int = 0o666) -> Any:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new one, never a part.
    ``mode`` applies from the first byte (0o600 for secrets); the umask narrows it as usual."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
