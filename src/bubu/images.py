"""Images a model can be shown: recognized by their magic bytes, bounded in size, kept as blobs.

An image enters a session two ways: attached to the task (``bubu run --image PATH``) or read by
the model (`read_file` on a PNG, JPEG, GIF or WebP file). Either way the bytes go to the blob
table and the event holds only an `ImageRef` (hash, size, media type), so the log never inlines
megabytes; the request projection reads the bytes back for the models that accept images.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bubu.errors import ConfigError
from bubu.events import ImageRef
from bubu.log import codec

MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""The largest image Bubu sends (Anthropic's limit per image; OpenAI's is higher)."""
MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def sniff(data: bytes) -> str | None:
    """The media type of an image by its magic bytes, or None when it is not PNG/JPEG/GIF/WebP."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def load(path: str | Path) -> tuple[str, bytes]:
    """The media type and bytes of the image at `path`, or a one-line ConfigError saying why not."""
    p = Path(path).expanduser()
    try:
        size = p.stat().st_size
        if not p.is_file():
            raise ConfigError(f"--image {path}: not a file; give the path of an image file")
        if size > MAX_IMAGE_BYTES:
            raise ConfigError(
                f"--image {path}: {size:,} bytes is larger than the {MAX_IMAGE_BYTES // 2**20} MB "
                "an image may have; scale it down or crop it"
            )
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"--image {path}: no such file") from None
    except OSError as e:
        raise ConfigError(f"--image {path}: cannot be read ({e.strerror or e})") from None
    media_type = sniff(data)
    if media_type is None:
        raise ConfigError(f"--image {path}: not a PNG, JPEG, GIF or WebP image")
    return media_type, data


def refs(images: Sequence[tuple[str, bytes]]) -> tuple[list[ImageRef], list[bytes]]:
    """The references an event holds for `images` (media type, bytes), and the blobs to store."""
    out = [
        ImageRef(sha256=codec.sha256_hex(data), size=len(data), media_type=media_type)
        for media_type, data in images
    ]
    return out, [data for _, data in images]


def base64_text(data: bytes) -> str:
    """The bytes as base64 text (what the wire formats carry)."""
    import base64

    return base64.b64encode(data).decode("ascii")


def data_url(media_type: str, data: bytes) -> str:
    """A ``data:`` URL of the image (OpenAI's image inputs)."""
    return f"data:{media_type};base64,{base64_text(data)}"


def accepts_images(provider: object) -> bool:
    """Whether a provider's model is shown images (its `accepts_images` flag; absent: no)."""
    return bool(getattr(provider, "accepts_images", False))


__all__ = [
    "MAX_IMAGE_BYTES",
    "MEDIA_TYPES",
    "accepts_images",
    "base64_text",
    "data_url",
    "load",
    "refs",
    "sniff",
]
