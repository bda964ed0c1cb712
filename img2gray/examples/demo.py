"""Convert a generated test card to grayscale with the fastest backend available and write both PNGs.

    python img2gray/examples/demo.py [--size 3840x2160] [--out-dir demo-output]
"""

import argparse
import struct
import time
import zlib
from pathlib import Path

import torch

import img2gray


def test_card(height: int, width: int) -> torch.Tensor:
    """An RGB image with gradients, colour bars and a circle: (H, W, 3) uint8."""
    y = torch.linspace(0, 1, height).unsqueeze(1).expand(height, width)
    x = torch.linspace(0, 1, width).unsqueeze(0).expand(height, width)
    r, g, b = x, y, 1 - x
    bars = (x * 8).floor()  # eight colour bars across the top third
    top = y < 1 / 3
    r = torch.where(top, (bars.remainder(2) == 1).float(), r)
    g = torch.where(top, (bars.div(2, rounding_mode="floor").remainder(2) == 1).float(), g)
    b = torch.where(top, (bars.div(4, rounding_mode="floor").remainder(2) == 1).float(), b)
    circle = ((x - 0.5) * width / height) ** 2 + (y - 0.62) ** 2 < 0.2**2
    r, g, b = (torch.where(circle, 1 - c, c) for c in (r, g, b))
    return (torch.stack([r, g, b], dim=-1) * 255).round().to(torch.uint8)


def write_png(path: Path, image: torch.Tensor) -> None:
    """Minimal PNG writer (8-bit gray or RGB), so the demo needs nothing beyond torch."""
    image = image.cpu().contiguous()
    height, width = image.shape[:2]
    color_type = 2 if image.dim() == 3 else 0
    rows = image.reshape(height, -1).numpy()
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", default="3840x2160", help="WIDTHxHEIGHT of the generated image")
    ap.add_argument("--out-dir", type=Path, default=Path("demo-output"))
    args = ap.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))

    device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = f"{device} ({torch.cuda.get_device_name()})" if device == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    image = test_card(height, width).to(device)
    gray = img2gray.img2gray(image)  # warm-up
    times = []
    for _ in range(20):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        img2gray.img2gray(image, out=gray)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    best = sorted(times)[len(times) // 2]

    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_png(args.out_dir / "test_card_rgb.png", image)
    write_png(args.out_dir / "test_card_gray.png", gray)
    print(f"img2gray: backend {backend}, ops {img2gray.ops.__name__ if hasattr(img2gray.ops, '__name__') else img2gray.ops}")
    print(f"img2gray: {width}x{height} RGB -> gray in {best * 1e3:.3f} ms (median of 20), "
          f"{4 * width * height / best / 1e9:.1f} GB/s; wrote {args.out_dir}/test_card_gray.png")


if __name__ == "__main__":
    main()
