"""The artifact store: big step outputs live here, not in workflow history.

Content-addressed (sha256) per run. History and status carry a small reference (see
longrun.refs): to a long string, or to a whole output too big to travel, stored as JSON.
Activities expand references back into content, so tools and models see the real data
while the workflow only moves references.

Two backends share one interface, `ArtifactStore`: files on a shared disk
(`LocalArtifactStore`) and an S3-compatible bucket (`S3ArtifactStore`); `store_for` picks
the one settings name.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import json
import os
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from longrun import refs
from longrun.contracts import RUN_FOLDER_PATTERN
from longrun.failures import fatal
from longrun.refs import is_ref
from longrun.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectTypeDef

PREVIEW_CHARS = 200
# An output whose JSON is bigger than this, once its long strings are stored, is stored
# whole: one activity result stays far below Temporal's 2 MB payload limit.
OUTPUT_MAX_BYTES = 64 * 1024
_RUN_ID = re.compile(RUN_FOLDER_PATTERN)
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def _checked(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise fatal(f"run id '{run_id}' cannot name an artifact folder")
    return run_id


def _digest_of(run_id: str, artifact: str) -> str:
    digest = artifact.removeprefix("sha256:")
    if not _DIGEST.match(digest):
        raise fatal(f"run '{run_id}' has no artifact '{artifact}'", type="NotFound")
    return digest


def _timestamp(moment: datetime) -> float:
    # A naive cutoff is taken as UTC, the zone of every stored time.
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _mentions_ref(value: Any) -> bool:
    """Whether `value` holds a reference, whole or as a marker in text (what `expand`
    replaces)."""
    if isinstance(value, str):
        return "⟦artifact:" in value
    if isinstance(value, dict):
        return is_ref(value) or any(_mentions_ref(v) for v in value.values())
    if isinstance(value, list):
        return any(_mentions_ref(v) for v in value)
    return False


def _too_big(value: Any, threshold: int) -> bool:
    """Whether `offload` would store any of `value`: a string over `threshold` bytes, or
    the whole over OUTPUT_MAX_BYTES."""
    if _long_string(value, threshold):
        return True
    structured = isinstance(value, dict | list) and not is_ref(value)
    return structured and len(json.dumps(value, ensure_ascii=False).encode()) > OUTPUT_MAX_BYTES


def _long_string(value: Any, threshold: int) -> bool:
    if isinstance(value, str):  # a character is at most four bytes
        return len(value) * 4 > threshold and len(value.encode()) > threshold
    if isinstance(value, dict) and not is_ref(value):
        return any(_long_string(v, threshold) for v in value.values())
    if isinstance(value, list):
        return any(_long_string(v, threshold) for v in value)
    return False


class ArtifactStore(ABC):
    """Where a run's big outputs live: content-addressed, one folder (or prefix) per run.

    Backends implement `put`, `get`, `list`, `delete_run` and `prune`; `offload` and
    `expand` work over any of them.
    """

    @abstractmethod
    def put(self, run_id: str, data: bytes) -> str:
        """Store `data`; its id is `sha256:<hex>`. Storing the same bytes twice is one object."""

    @abstractmethod
    def get(self, run_id: str, artifact: str) -> bytes:
        """The bytes of one of the run's artifacts; `NotFound` when it has no such artifact."""

    @abstractmethod
    def list(self, run_id: str) -> builtins.list[tuple[str, int]]:
        """The run's artifacts: id and size, sorted by id."""

    @abstractmethod
    def delete_run(self, run_id: str) -> int:
        """Delete every artifact of the run (and of no other); how many there were."""

    @abstractmethod
    def stale_runs(self, older_than: datetime) -> builtins.list[str]:
        """The runs whose newest artifact is older than `older_than` (a naive time is UTC),
        sorted."""

    def prune(self, older_than: datetime, *, keep: Collection[str] = ()) -> builtins.list[str]:
        """Delete whole runs whose newest artifact is older than `older_than`, except the
        runs in `keep`; the ids of the runs deleted, sorted."""
        pruned = [r for r in self.stale_runs(older_than) if r not in keep]
        for run_id in pruned:
            self.delete_run(run_id)
        return pruned

    def reference(self, run_id: str, text: str) -> dict[str, Any]:
        """Store `text`; a reference to it with its size and a preview."""
        data = text.encode()
        artifact = self.put(run_id, data)
        return {"artifact": artifact, "bytes": len(data), "preview": text[:PREVIEW_CHARS]}

    def keep(self, run_id: str, value: Any) -> dict[str, Any]:
        """Store `value` whole: text as it is, anything else as JSON; a reference that
        reads back as the value."""
        return (
            self.reference(run_id, value)
            if isinstance(value, str)
            else self.keep_json(run_id, value)
        )

    def keep_json(self, run_id: str, value: Any) -> dict[str, Any]:
        """Store `value` as JSON; a reference that reads back as the value."""
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        ref = self.reference(run_id, text)
        return refs.json_ref(ref["artifact"], ref["bytes"], ref["preview"])

    async def expanded(self, run_id: str, value: Any) -> Any:
        """`expand`, in a thread only if `value` holds a reference (most calls' arguments
        hold none, and a thread hop per call is a cost of every step)."""
        if not _mentions_ref(value):
            return value
        return await asyncio.to_thread(self.expand, run_id, value)

    async def offloaded(self, run_id: str, value: Any, threshold: int) -> Any:
        """`offload`, in a thread only if `value` has something to store."""
        if not _too_big(value, threshold):
            return value
        return await asyncio.to_thread(self.offload, run_id, value, threshold)

    def offload(self, run_id: str, value: Any, threshold: int) -> Any:
        """`value` with every string longer than `threshold` bytes stored and referenced,
        and stored whole if it is still bigger than OUTPUT_MAX_BYTES."""
        value = self._offload_strings(run_id, value, threshold)
        structured = isinstance(value, dict | list) and not is_ref(value)
        if structured and len(json.dumps(value, ensure_ascii=False).encode()) > OUTPUT_MAX_BYTES:
            return self.keep_json(run_id, value)
        return value

    def _offload_strings(self, run_id: str, value: Any, threshold: int) -> Any:
        if isinstance(value, str):
            if len(value.encode()) <= threshold:
                return value
            return self.reference(run_id, value)
        if isinstance(value, dict) and not is_ref(value):
            return {k: self._offload_strings(run_id, v, threshold) for k, v in value.items()}
        if isinstance(value, list):
            return [self._offload_strings(run_id, v, threshold) for v in value]
        return value

    def expand(self, run_id: str, value: Any) -> Any:
        """`value` with references (whole or written inside text) replaced by content."""
        if is_ref(value):
            return self._read(run_id, value)
        if isinstance(value, str):
            return refs.MARKER.sub(lambda m: self._marked(run_id, m), value)
        if isinstance(value, dict):
            return {k: self.expand(run_id, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.expand(run_id, v) for v in value]
        return value

    def _marked(self, run_id: str, match: re.Match[str]) -> str:
        path = [p for p in match.group(2).split(".") if p]
        if not path:
            return self.get(run_id, match.group(1)).decode(errors="replace")
        ref = refs.json_ref(match.group(1), 0, "")
        return refs.as_text(self._read(run_id, {**ref, "path": path}))

    def _read(self, run_id: str, ref: dict[str, Any]) -> Any:
        try:
            return refs.read_back(ref, self.get(run_id, ref["artifact"]))
        except (LookupError, ValueError) as exc:
            raise fatal(f"run '{run_id}', artifact {ref['artifact']}: {exc}") from None


class LocalArtifactStore(ArtifactStore):
    """Artifacts as files under `<root>/<run id>/<sha256>`; one run's never touch another's.

    API and workers must share `root` (a volume in docker-compose.yml).
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, run_id: str) -> Path:
        return self.root / _checked(run_id)

    def put(self, run_id: str, data: bytes) -> str:
        """Store `data` atomically; its id is `sha256:<hex>`. The same bytes are one file."""
        digest = hashlib.sha256(data).hexdigest()
        folder = self._dir(run_id)
        target = folder / digest
        try:
            # Storing again counts as new for retention, as an S3 overwrite does.
            os.utime(target)
        except FileNotFoundError:
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
        """The bytes of one of the run's artifacts; `NotFound` when it has no such artifact."""
        folder = self._dir(run_id)
        path = folder / _digest_of(run_id, artifact)
        try:
            # A sweep may delete the run's folder at any moment: gone is not found.
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise fatal(f"run '{run_id}' has no artifact '{artifact}'", type="NotFound") from None

    def list(self, run_id: str) -> builtins.list[tuple[str, int]]:
        """The run's artifacts: id and size, sorted by id."""
        found = []
        # No such run, or a sweep deleting it while it is listed: it has no artifacts.
        try:
            for path in self._dir(run_id).iterdir():
                if _DIGEST.match(path.name):
                    found.append((f"sha256:{path.name}", path.stat().st_size))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(found)

    def stale_runs(self, older_than: datetime) -> builtins.list[str]:
        """The runs whose newest file is older than `older_than`."""
        if not self.root.is_dir():
            return []
        cutoff = _timestamp(older_than)
        stale = []
        for folder in self.root.iterdir():
            if _RUN_ID.match(folder.name) and folder.is_dir() and _newest(folder) < cutoff:
                stale.append(folder.name)
        return sorted(stale)

    def delete_run(self, run_id: str) -> int:
        """Delete the run's folder; how many artifacts it held."""
        folder = self._dir(run_id)
        try:
            count = sum(1 for p in folder.iterdir() if _DIGEST.match(p.name))
            # Another replica's sweep may be deleting the same folder: gone is gone.
            shutil.rmtree(folder)
        except FileNotFoundError:
            return 0
        return count


def _newest(folder: Path) -> float:
    """When the newest file in `folder` was written (the folder's own time if it is empty)."""
    times = []
    # Half-written `.tmp-` files count too: a write in progress means the run is alive.
    for path in folder.iterdir():
        try:
            times.append(path.stat().st_mtime)
        except FileNotFoundError:  # renamed or deleted since it was listed
            continue
    return max(times) if times else folder.stat().st_mtime


class S3ArtifactStore(ArtifactStore):
    """Artifacts as objects `<prefix><run id>/<sha256>` in an S3-compatible bucket.

    Credentials come from boto3's standard chain (environment, shared config, instance or
    task role), never from longrun's settings. Calls are blocking: callers run them in a
    thread.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "longrun/",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.client = _s3_client(endpoint_url, region)

    def _key(self, run_id: str, digest: str) -> str:
        return f"{self.prefix}{_checked(run_id)}/{digest}"

    def _objects(self, prefix: str) -> Iterator[ObjectTypeDef]:
        """Every object under `prefix`, page by page."""
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        ):
            yield from page.get("Contents", [])

    def put(self, run_id: str, data: bytes) -> str:
        """Store `data`; its id is `sha256:<hex>`. The same bytes overwrite the same key."""
        digest = hashlib.sha256(data).hexdigest()
        # No existence check first: a write of identical bytes is harmless, saves a round
        # trip in the usual case (new content) and renews the object's age for retention.
        self.client.put_object(Bucket=self.bucket, Key=self._key(run_id, digest), Body=data)
        return f"sha256:{digest}"

    def get(self, run_id: str, artifact: str) -> bytes:
        """The bytes of one of the run's artifacts; `NotFound` when it has no such artifact."""
        from botocore.exceptions import ClientError

        key = self._key(run_id, _digest_of(run_id, artifact))
        try:
            found = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise fatal(
                    f"run '{run_id}' has no artifact '{artifact}'", type="NotFound"
                ) from None
            raise
        return found["Body"].read()

    def list(self, run_id: str) -> builtins.list[tuple[str, int]]:
        """The run's artifacts: id and size, sorted by id."""
        prefix = f"{self.prefix}{_checked(run_id)}/"
        found = []
        for obj in self._objects(prefix):
            name = obj["Key"].removeprefix(prefix)
            if _DIGEST.match(name):
                found.append((f"sha256:{name}", obj.get("Size", 0)))
        return sorted(found)

    def delete_run(self, run_id: str) -> int:
        """Delete the run's artifacts (keys of any other shape stay); how many there were."""
        prefix = f"{self.prefix}{_checked(run_id)}/"
        keys = [
            obj["Key"] for obj in self._objects(prefix) if _DIGEST.match(obj["Key"][len(prefix) :])
        ]
        for start in range(0, len(keys), 1000):  # S3's limit per DeleteObjects call
            batch = keys[start : start + 1000]
            answer = self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
            )
            if errors := answer.get("Errors"):
                first = errors[0]
                raise RuntimeError(
                    f"S3 refused to delete {len(errors)} artifact(s) of run '{run_id}', "
                    f"e.g. {first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                )
        return len(keys)

    def stale_runs(self, older_than: datetime) -> builtins.list[str]:
        """The runs whose newest object is older than `older_than`."""
        cutoff = _timestamp(older_than)
        newest: dict[str, float] = {}
        for obj in self._objects(self.prefix):
            run_id, slash, name = obj["Key"].removeprefix(self.prefix).partition("/")
            # Only keys of our own shape: other things that share the bucket stay untouched.
            if not slash or not _DIGEST.match(name) or not _RUN_ID.match(run_id):
                continue
            at = obj["LastModified"].timestamp()
            newest[run_id] = max(at, newest.get(run_id, at))
        return sorted(r for r, at in newest.items() if at < cutoff)


@lru_cache(maxsize=8)
def _s3_client(endpoint_url: str | None, region: str | None) -> S3Client:
    """One client per endpoint, shared by every store and thread (boto3 clients are
    thread-safe; sessions are not): making one costs milliseconds and about 35,000 objects,
    with reference cycles that only a full garbage-collector pass frees."""
    # Imported here: boto3 is slow to import and deployments on the local store never
    # need it.
    import boto3
    from botocore.config import Config

    # Checksums only where S3 requires them, because several S3-compatible servers reject
    # the newer default ones.
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        config=Config(
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            retries={"max_attempts": 3, "mode": "standard"},
        ),
    )


def store_for(settings: Settings) -> ArtifactStore:
    """The artifact store that settings name (`LONGRUN_ARTIFACT_STORE`)."""
    if settings.artifact_store == "s3":
        if not settings.s3_bucket:
            raise ValueError("LONGRUN_ARTIFACT_STORE=s3 needs LONGRUN_S3_BUCKET")
        # An empty variable (common in compose files) means unset, not "".
        return S3ArtifactStore(
            settings.s3_bucket,
            settings.s3_prefix,
            endpoint_url=settings.s3_endpoint_url or None,
            region=settings.s3_region or None,
        )
    return LocalArtifactStore(settings.artifacts_dir)
