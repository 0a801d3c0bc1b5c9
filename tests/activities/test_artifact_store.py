"""The artifact store's contract, held by both backends: files on disk and an S3 bucket
(a real moto server over HTTP)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from longrun import plans
from longrun.artifacts import (
    OUTPUT_MAX_BYTES,
    ArtifactStore,
    LocalArtifactStore,
    S3ArtifactStore,
    store_for,
)
from longrun.refs import is_ref
from longrun.settings import Settings

RUN_A = "run-" + "a" * 32
RUN_B = "run-" + "b" * 32
BIG = "ab" * 10_000


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, settings: Settings) -> ArtifactStore:
    """Each backend in turn, empty, as `store_for` builds it from settings."""
    if request.param == "s3":
        settings = request.getfixturevalue("s3_settings")
    return store_for(settings)


def s3_keys(store: S3ArtifactStore) -> list[str]:
    """Every key in the store's bucket, whatever its shape."""
    listed = store.client.list_objects_v2(Bucket=store.bucket)
    return sorted(obj["Key"] for obj in listed.get("Contents", []))


def test_settings_pick_the_backend(settings: Settings, s3_settings: Settings) -> None:
    assert isinstance(store_for(settings), LocalArtifactStore)
    s3 = store_for(s3_settings)
    assert isinstance(s3, S3ArtifactStore)
    assert s3.bucket == s3_settings.s3_bucket and s3.prefix == "longrun/"
    assert store_for(s3_settings).client is s3.client  # one client per endpoint
    elsewhere = s3_settings.model_copy(update={"s3_bucket": "another", "s3_prefix": "x/"})
    assert store_for(elsewhere).client is s3.client


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"LONGRUN_ARTIFACT_STORE": "s3"}, "LONGRUN_ARTIFACT_STORE=s3 needs LONGRUN_S3_BUCKET"),
        ({"LONGRUN_ARTIFACT_STORE": "gcs"}, "LONGRUN_ARTIFACT_STORE"),
        ({"LONGRUN_S3_PREFIX": "longrun"}, "LONGRUN_S3_PREFIX"),
        ({"LONGRUN_S3_PREFIX": "/longrun/"}, "LONGRUN_S3_PREFIX"),
        ({"LONGRUN_ARTIFACT_RETENTION_DAYS": "0"}, "LONGRUN_ARTIFACT_RETENTION_DAYS"),
    ],
)
def test_bad_store_settings_are_refused(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], complaint: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=complaint):
        Settings(_env_file=None)  # type: ignore[call-arg]


def test_store_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONGRUN_ARTIFACT_STORE", "s3")
    monkeypatch.setenv("LONGRUN_S3_BUCKET", "outputs")
    monkeypatch.setenv("LONGRUN_S3_PREFIX", "")
    monkeypatch.setenv("LONGRUN_ARTIFACT_RETENTION_DAYS", "0.5")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert (settings.artifact_store, settings.s3_bucket, settings.s3_prefix) == (
        "s3",
        "outputs",
        "",
    )
    assert settings.artifact_retention_days == 0.5
    assert Settings(_env_file=None, LONGRUN_S3_PREFIX="a/b/").s3_prefix == "a/b/"  # type: ignore[call-arg]


def test_put_and_get(store: ArtifactStore) -> None:
    data = b"\x00binary\xff" * 1000
    artifact = store.put(RUN_A, data)
    assert artifact == "sha256:" + hashlib.sha256(data).hexdigest()
    assert store.get(RUN_A, artifact) == data


def test_the_same_bytes_are_stored_once(store: ArtifactStore) -> None:
    first = store.put(RUN_A, b"same")
    assert store.put(RUN_A, b"same") == first
    assert store.list(RUN_A) == [(first, 4)]
    if isinstance(store, S3ArtifactStore):
        assert s3_keys(store) == [f"longrun/{RUN_A}/{first.removeprefix('sha256:')}"]


def test_missing_artifacts_are_not_found(store: ArtifactStore) -> None:
    stored = store.put(RUN_A, b"x")
    absent = "sha256:" + "0" * 64
    for run_id, artifact in [(RUN_A, absent), (RUN_B, stored), (RUN_A, "sha256:nothex")]:
        with pytest.raises(ApplicationError) as failure:
            store.get(run_id, artifact)
        assert failure.value.type == "NotFound" and failure.value.non_retryable


def test_list(store: ArtifactStore) -> None:
    assert store.list(RUN_A) == []
    ids = {store.put(RUN_A, data): len(data) for data in (b"one", b"three", b"")}
    store.put(RUN_B, b"other run")
    assert store.list(RUN_A) == sorted(ids.items())


def test_deleting_a_run_leaves_other_runs_alone(store: ArtifactStore) -> None:
    for data in (b"1", b"2", b"3"):
        store.put(RUN_A, data)
    kept = store.put(RUN_B, b"1")  # the same bytes as one of A's
    assert store.delete_run(RUN_A) == 3
    assert store.list(RUN_A) == []
    assert store.list(RUN_B) == [(kept, 1)]
    assert store.get(RUN_B, kept) == b"1"
    assert store.delete_run(RUN_A) == 0


def test_pruning_deletes_runs_older_than_the_cutoff(store: ArtifactStore) -> None:
    a = store.put(RUN_A, b"a")
    b = store.put(RUN_B, b"b")
    past = datetime.now(UTC) - timedelta(hours=1)
    future = datetime.now(UTC) + timedelta(hours=1)
    assert store.prune(past) == []
    assert store.list(RUN_A) == [(a, 1)] and store.list(RUN_B) == [(b, 1)]
    # Runs in `keep` (open ones) are spared however old.
    assert store.prune(future, keep={RUN_A}) == [RUN_B]
    assert store.list(RUN_A) == [(a, 1)] and store.list(RUN_B) == []
    assert store.prune(future.replace(tzinfo=None)) == [RUN_A]  # naive times are UTC
    assert store.list(RUN_A) == []
    assert store.prune(future) == []


def test_a_run_deleted_while_it_is_read_has_no_artifacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalArtifactStore(tmp_path)
    stored = store.put(RUN_A, b"x")
    listed = Path.iterdir

    def swept_meanwhile(folder: Path) -> Iterator[Path]:
        # The folder is listed, then a sweep deletes it before each file is looked at.
        entries = list(listed(folder))
        shutil.rmtree(folder)
        yield from entries

    monkeypatch.setattr(Path, "iterdir", swept_meanwhile)
    assert store.list(RUN_A) == []
    monkeypatch.undo()
    with pytest.raises(ApplicationError) as failure:
        store.get(RUN_A, stored)
    assert failure.value.type == "NotFound"
    (tmp_path / RUN_A).mkdir()
    (tmp_path / RUN_A / stored.removeprefix("sha256:")).mkdir()  # not a file: not found either
    with pytest.raises(ApplicationError) as failure:
        store.get(RUN_A, stored)
    assert failure.value.type == "NotFound"


def test_pruning_judges_a_run_by_its_newest_artifact(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    old, recent = datetime.now(UTC) - timedelta(days=10), datetime.now(UTC) - timedelta(days=1)

    def age(run_id: str, artifact: str, at: datetime) -> None:
        path = tmp_path / run_id / artifact.removeprefix("sha256:")
        os.utime(path, (at.timestamp(), at.timestamp()))

    age(RUN_A, store.put(RUN_A, b"old"), old)
    age(RUN_A, store.put(RUN_A, b"old too"), old)
    age(RUN_B, store.put(RUN_B, b"old"), old)
    age(RUN_B, store.put(RUN_B, b"recent"), recent)
    run_c = "run-c"
    age(run_c, store.put(run_c, b"old"), old)
    (tmp_path / "not a run").mkdir()
    assert store.prune(datetime.now(UTC) - timedelta(days=5), keep={run_c}) == [RUN_A]
    assert not (tmp_path / RUN_A).exists()
    assert len(store.list(RUN_B)) == 2 and len(store.list(run_c)) == 1
    assert (tmp_path / "not a run").is_dir()
    # Storing bytes that are already there makes the run recent again.
    store.put(run_c, b"old")
    assert store.prune(datetime.now(UTC) - timedelta(days=5)) == []


def test_pruning_touches_only_keys_of_our_shape(s3_settings: Settings) -> None:
    store = store_for(s3_settings)
    assert isinstance(store, S3ArtifactStore)
    foreign = [
        "elsewhere/run-x/" + "0" * 64,
        "longrun/readme.txt",
        f"longrun/{RUN_A}/x/y",
        f"longrun/{RUN_B}/notes.txt",
    ]
    for key in foreign:
        store.client.put_object(Bucket=store.bucket, Key=key, Body=b"not ours")
    store.put(RUN_B, b"b")
    assert store.prune(datetime.now(UTC) + timedelta(hours=1)) == [RUN_B]
    assert s3_keys(store) == sorted(foreign)


@pytest.mark.parametrize("run_id", ["../x", "", "a/b", "..", ".", "a b", "x" * 256, "a\\b"])
def test_run_ids_cannot_leave_their_folder(store: ArtifactStore, run_id: str) -> None:
    calls = [
        lambda: store.put(run_id, b"x"),
        lambda: store.get(run_id, "sha256:" + "0" * 64),
        lambda: store.list(run_id),
        lambda: store.delete_run(run_id),
        lambda: store.offload(run_id, BIG, 100),
    ]
    for call in calls:
        with pytest.raises(ApplicationError, match="cannot name an artifact folder") as failure:
            call()
        assert failure.value.non_retryable
    if isinstance(store, S3ArtifactStore):
        assert s3_keys(store) == []
    else:
        assert isinstance(store, LocalArtifactStore)
        assert not store.root.exists() or not any(store.root.iterdir())
        assert not (store.root.parent / "x").exists()


def test_offload_and_expand_round_trip(store: ArtifactStore) -> None:
    value = {"stdout": BIG, "small": "short", "items": [BIG + "!", 3, None], "n": 1.5}
    offloaded = store.offload(RUN_A, value, 1000)
    ref = offloaded["stdout"]
    assert set(ref) == {"artifact", "bytes", "preview"} and ref["bytes"] == len(BIG)
    assert ref["preview"] == BIG[:200]
    assert offloaded["small"] == "short" and offloaded["items"][1:] == [3, None]
    assert len(store.list(RUN_A)) == 2
    assert store.offload(RUN_A, offloaded, 1000) == offloaded  # references stay references
    assert store.expand(RUN_A, offloaded) == value
    # A reference written inside text, as plans.render writes it.
    text = f"before ⟦artifact:{ref['artifact']}⟧ after"
    assert store.expand(RUN_A, {"prompt": text}) == {"prompt": f"before {BIG} after"}
    with pytest.raises(ApplicationError, match="has no artifact"):
        store.expand(RUN_B, offloaded)  # another run cannot read it


def test_an_output_too_big_to_travel_is_stored_whole_and_read_back_by_parts(
    store: ArtifactStore,
) -> None:
    # No string is long enough to be stored on its own; together they are too big.
    value = {"words": [f"word-{i:05d}" for i in range(10_000)], "n": 7}
    ref = store.offload(RUN_A, value, 1000)
    assert is_ref(ref) and ref["json"] is True and ref["bytes"] > OUTPUT_MAX_BYTES
    assert store.expand(RUN_A, ref) == value
    # A plan's reference into the output names the part; the activity reads the part.
    part = plans.lookup(ref, ["words", "42"], "{{steps.s.output.words.42}}")
    assert store.expand(RUN_A, part) == "word-00042"
    assert store.expand(RUN_A, plans.lookup(ref, ["n"], "n")) == 7
    # Inside text the part is written with its path.
    text = plans.render(plans.lookup(ref, ["words"], "words"))
    assert json.loads(store.expand(RUN_A, text)) == value["words"]
    # A part that is not there fails the call, naming it.
    with pytest.raises(ApplicationError, match="no field 'missing'"):
        store.expand(RUN_A, plans.lookup(ref, ["missing"], "m"))
    # Stored text has no parts: the plan is told so before any call.
    text_ref = store.offload(RUN_A, BIG, 1000)
    with pytest.raises(plans.ReferenceError_, match="stored text"):
        plans.lookup(text_ref, ["x"], "{{steps.s.output.x}}")
