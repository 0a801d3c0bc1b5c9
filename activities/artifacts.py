"""The artifact store: big step outputs live here, not in workflow history.

Content-addressed (sha256) per run, written atomically. History and status carry a small
reference, `{"artifact": "sha256:…", "bytes": n, "preview": "…"}`; a reference inside text
is written `⟦artifact:sha256:…⟧`. Activities expand both back into content, so tools and
models see the real data while the workflow only moves references.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from activities.errors import fatal

PREVIEW_CHARS = 200
_MARKER = re.compile(r"⟦artifact:(sha256:[0-9a-f]{64})⟧")
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def is_ref(value: Any) -> bool:
    """Whether `value` is an artifact reference."""
    return isinstance(value, dict) and set(value) == {"artifact", "bytes", "preview"}


class LocalArtifactStore:
    """Artifacts as files under `<root>/<run id>/<sha256>`; one run's never touch another's."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, run_id: str) -> Path:
        if not _RUN_ID.match(run_id):
            raise fatal(f"run id '{run_id}' cannot name an artifact folder")
        return self.root / run_id

    def put(self, run_id: str, data: bytes) -> str:
        """Store `data`; its id is `sha256:<hex>`. Storing the same bytes twice is one file."""
        digest = hashlib.sha256(data).hexdigest()
        folder = self._dir(run_id)
        target = folder / digest
        if not target.exists():
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        return f"sha256:{digest}"

    def get(self, run_id: str, artifact: str) -> bytes:
        """The bytes of one of the run's artifacts."""
        digest = artifact.removeprefix("sha256:")
        path = self._dir(run_id) / digest
        if not re.fullmatch(r"[0-9a-f]{64}", digest) or not path.is_file():
            raise fatal(f"run '{run_id}' has no artifact '{artifact}'", type="NotFound")
        return path.read_bytes()

    def list(self, run_id: str) -> list[tuple[str, int]]:
        """The run's artifacts: id and size."""
        folder = self._dir(run_id)
        if not folder.is_dir():
            return []
        return sorted(
            (f"sha256:{p.name}", p.stat().st_size)
            for p in folder.iterdir()
            if re.fullmatch(r"[0-9a-f]{64}", p.name)
        )

    def offload(self, run_id: str, value: Any, threshold: int) -> Any:
        """`value` with every string longer than `threshold` bytes stored and referenced."""
        if isinstance(value, str):
            data = value.encode()
            if len(data) <= threshold:
                return value
            artifact = self.put(run_id, data)
            return {"artifact": artifact, "bytes": len(data), "preview": value[:PREVIEW_CHARS]}
        if isinstance(value, dict) and not is_ref(value):
            return {k: self.offload(run_id, v, threshold) for k, v in value.items()}
        if isinstance(value, list):
            return [self.offload(run_id, v, threshold) for v in value]
        return value

    def expand(self, run_id: str, value: Any) -> Any:
        """`value` with references (whole or written inside text) replaced by content."""
        if is_ref(value):
            return self.get(run_id, value["artifact"]).decode(errors="replace")
        if isinstance(value, str):
            return _MARKER.sub(
                lambda m: self.get(run_id, m.group(1)).decode(errors="replace"), value
            )
        if isinstance(value, dict):
            return {k: self.expand(run_id, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.expand(run_id, v) for v in value]
        return value
