"""jupyterhub_gpu_dev.realnodes.pause_archive: the pod sandbox image as a docker-archive made here from the gpuhub-pause
binary (no registry serves one to the dev cluster). Pure file work in a tmp folder: no root, no containerd."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from jupyterhub_gpu_dev.realnode_config import PAUSE_IMAGE
from jupyterhub_gpu_dev.realnodes import pause_archive

BINARY = b"\x7fELF fake pause binary\x00" + bytes(range(256))


@pytest.fixture
def bins(tmp_path):
    d = tmp_path / "bin"
    d.mkdir()
    (d / "gpuhub-pause").write_bytes(BINARY)
    return d


def members(path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_a_docker_archive_of_the_pause_binary(bins, tmp_path):
    dest = tmp_path / "images"  # made when missing
    archive = pause_archive(bins, dest)
    assert archive.parent == dest and archive.is_file() and archive.suffix == ".tar"
    assert not list(dest.glob("*.part"))
    files = members(archive)
    (manifest,) = json.loads(files["manifest.json"])
    assert manifest["RepoTags"] == [PAUSE_IMAGE]
    config = json.loads(files[manifest["Config"]])
    assert manifest["Config"] == hashlib.sha256(files[manifest["Config"]]).hexdigest() + ".json"
    assert config["config"]["Entrypoint"] == ["/pause"]
    assert config["config"]["User"].split(":") == ["65535", "65535"]
    assert config["os"] == "linux" and config["architecture"] == "amd64"
    (layer_name,) = manifest["Layers"]
    layer = files[layer_name]
    assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        (pause,) = tar.getmembers()
        assert pause.name == "pause" and pause.isfile()
        assert pause.mode & 0o7777 == 0o755
        assert tar.extractfile(pause).read() == BINARY


def test_a_second_call_reuses_the_archive(bins, tmp_path):
    first = pause_archive(bins, tmp_path)
    before = first.stat().st_mtime_ns, first.read_bytes()
    second = pause_archive(bins, tmp_path)
    assert second == first
    assert (second.stat().st_mtime_ns, second.read_bytes()) == before
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == [first.name]


def test_the_archive_is_the_same_bytes_every_time(bins, tmp_path):
    a, b = pause_archive(bins, tmp_path / "a"), pause_archive(bins, tmp_path / "b")
    assert a.name == b.name and a.read_bytes() == b.read_bytes()


def test_a_new_binary_makes_a_new_archive(bins, tmp_path):
    dest = tmp_path / "images"
    first = pause_archive(bins, dest)
    (bins / "gpuhub-pause").write_bytes(BINARY + b"v2")
    second = pause_archive(bins, dest)
    assert second != first and first.is_file()
    layer_name = json.loads(members(second)["manifest.json"])[0]["Layers"][0]
    with tarfile.open(fileobj=io.BytesIO(members(second)[layer_name])) as tar:
        assert tar.extractfile("pause").read() == BINARY + b"v2"


def test_no_binary_no_archive(tmp_path):
    with pytest.raises(FileNotFoundError):
        pause_archive(tmp_path, tmp_path / "images")
    assert not (tmp_path / "images").exists()
