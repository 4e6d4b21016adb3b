"""How `make images` decides what to build (devcluster/jupyterhub_gpu_dev/images.py), without building: an image's key
covers exactly what its build reads (recipe, the files its COPY lines send minus .dockerignore, its bases' keys), and
the product images are the repository's Dockerfiles with only their base arguments replaced by stand-ins."""
from __future__ import annotations

import re

import pytest

from jupyterhub_gpu_dev import images


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A one-file context with a Dockerfile on a stand-in base, as the image table describes the real ones."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print(1)\n")
    (tmp_path / "app" / "__pycache__").mkdir()
    (tmp_path / "app" / "__pycache__" / "main.pyc").write_bytes(b"\0")
    (tmp_path / ".dockerignore").write_text("# comment\n**/__pycache__\napp/build\n")
    (tmp_path / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY app \\\n  /app\n")
    monkeypatch.setattr(images, "ROOT", tmp_path)
    monkeypatch.setitem(images.IMAGES, "toy", images.Image("toy", tmp_path / "Dockerfile",
                                                           bases={"BASE_IMAGE": "base-cpu"}))
    images.key.cache_clear()
    yield tmp_path
    images.key.cache_clear()


def fresh_key(name: str) -> str:
    images.key.cache_clear()
    return images.key(name)


def test_the_key_follows_copied_files_and_not_ignored_ones(toy):
    assert [p.relative_to(toy).as_posix() for p in images.copied_files(toy / "Dockerfile", toy)] == ["app/main.py"]
    before = fresh_key("toy")
    (toy / "app" / "__pycache__" / "main.pyc").write_bytes(b"\1")
    (toy / "app" / "build").mkdir()
    (toy / "app" / "build" / "out.js").write_text("x")
    assert fresh_key("toy") == before  # .dockerignore keeps them out of the context
    (toy / "app" / "main.py").write_text("print(2)\n")
    changed = fresh_key("toy")
    assert changed != before
    (toy / "Dockerfile").write_text((toy / "Dockerfile").read_text() + "USER 1000\n")
    assert fresh_key("toy") != changed


def test_a_new_base_recipe_rebuilds_every_image_on_it(toy, monkeypatch):
    before = fresh_key("toy")
    monkeypatch.setattr(images, "ROOTFS_PACKAGES", (*images.ROOTFS_PACKAGES, "less"))  # every suite's rootfs
    assert fresh_key("toy") != before


def test_product_images_are_the_repositorys_dockerfiles_with_stand_in_bases_only():
    for name in images.PRODUCT:
        img = images.IMAGES[name]
        assert img.recipe.name == "Dockerfile" and img.recipe.parent.parent == images.ROOT / "images"
        declared = set(re.findall(r"^ARG (\w+)=", img.recipe.read_text(), re.M))
        froms = set(re.findall(r"^FROM \$\{(\w+)\}", img.recipe.read_text(), re.M))
        assert set(img.bases) == froms <= declared, name  # every FROM gets a stand-in, nothing else is passed
        assert all(not images.IMAGES[b].product for b in img.bases.values())
    assert set(images.PRODUCT) == {"hub", "singleuser-cpu", "singleuser-cuda", "runner-cuda"}


def test_make_images_also_builds_the_proxy_stand_in_of_the_chart(monkeypatch):
    assert images.DEFAULT == (*images.PRODUCT, "chp")
    chp = images.IMAGES["chp"]
    assert chp.recipe == images.STANDIN / "chp.Containerfile" and chp.bases == {"BASE_IMAGE": "base-node"}
    assert chp.args == {"CHP_VERSION": images.CHP_VERSION} and re.fullmatch(r"\d+\.\d+\.\d+", images.CHP_VERSION)
    recipe = chp.recipe.read_text()
    assert '"configurable-http-proxy@${CHP_VERSION}"' in recipe and "\nUSER 65534\n" in recipe
    assert "standin=quay.io/jupyterhub/configurable-http-proxy:${CHP_VERSION}" in recipe
    values = images.z2jh_dir() / "jupyterhub" / "values.yaml"  # the chart's proxy.chp.image.tag, where it is here
    if values.is_file():
        assert f'tag: "{images.CHP_VERSION}"' in values.read_text().split("\n  chp:", 1)[1].split("\n  traefik:")[0]
    before = fresh_key("chp")
    monkeypatch.setitem(images.IMAGES, "chp", images.Image("chp", chp.recipe, bases=chp.bases, product=False,
                                                           deployed=True, args={"CHP_VERSION": "0.0.1"}))
    assert fresh_key("chp") != before  # the version is in the key
    images.key.cache_clear()


def test_without_the_z2jh_pins_only_the_hub_is_left_out(monkeypatch, tmp_path):
    monkeypatch.setenv("Z2JH", str(tmp_path))
    assert images.buildable() == ["singleuser-cpu", "singleuser-cuda", "runner-cuda", "chp"]
    assert str(tmp_path) in images.NO_PINS.format(images.hub_pins())
