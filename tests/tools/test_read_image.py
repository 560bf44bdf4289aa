"""`read_file` on an image: the image itself for a model that is shown images, else a clear line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bubu import images
from bubu.errors import ConfigError
from bubu.tools import ToolContext
from bubu.tools.base import Tool

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
SAMPLES = {
    "a.png": (PNG, "image/png"),
    "b.jpg": (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(64), "image/jpeg"),
    "c.gif": (b"GIF89a\x01\x00\x01\x00" + bytes(32), "image/gif"),
    "d.webp": (b"RIFF\x24\x00\x00\x00WEBPVP8 " + bytes(32), "image/webp"),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_an_image_is_returned_as_an_image_to_a_model_that_sees_them(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext, name: str
) -> None:
    data, media_type = SAMPLES[name]
    (ws / name).write_bytes(data)
    result = tools["read_file"].run({"path": name}, dataclasses.replace(ctx, images=True), None)
    assert not result.is_error
    assert result.images == ((media_type, data),)
    kind = media_type.removeprefix("image/").upper()
    assert result.output == f"{name}: {kind} image, {len(data):,} bytes"


def test_a_model_that_does_not_see_images_is_told_what_the_file_is(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "a.png").write_bytes(PNG)
    result = tools["read_file"].run({"path": "a.png"}, ctx, None)
    assert not result.is_error
    assert result.images == ()
    assert result.output == (
        "a.png is a PNG image (1,040 bytes); this model is not shown images, so its content "
        "cannot be read"
    )


def test_an_image_past_the_limit_is_not_shown(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "huge.png").write_bytes(PNG + bytes(images.MAX_IMAGE_BYTES))
    result = tools["read_file"].run(
        {"path": "huge.png"}, dataclasses.replace(ctx, images=True), None
    )
    assert result.images == ()
    assert "larger than the 5 MB an image may have" in result.output


def test_an_attached_image_is_checked_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("not an image\n")
    (tmp_path / "big.gif").write_bytes(b"GIF89a" + bytes(images.MAX_IMAGE_BYTES))
    assert images.load(tmp_path / "a.png") == ("image/png", PNG)
    for name, why in (
        ("missing.png", "no such file"),
        ("notes.txt", "not a PNG, JPEG, GIF or WebP image"),
        ("big.gif", "larger than the 5 MB an image may have"),
        (".", "not a file"),
    ):
        with pytest.raises(ConfigError) as caught:
            images.load(tmp_path / name)
        assert why in str(caught.value)
        assert "\n" not in str(caught.value)
