"""report.html in a real browser (headless Chromium) at 800 and 1,400 px wide: the time line scales
to the page instead of hiding its right part in a scroll box (README §12.1).

Measured on the screenshot itself: the pale P95 bands of the baseline's four cases span, from the
first band's top to the last band's bottom, what the SVG says (its own coordinates) at 1,400 px,
and that times the page's content width over the picture's width at 800 px. Runs with ISL_FULL=1
where ``chromium`` is installed; ``ISL_SCREENSHOTS=DIR`` keeps the screenshots there (never in the
repository).
"""

import os
import re
import shutil
import struct
import subprocess
import tempfile
import unittest
import zlib

from tests.helpers import EXPECTED, full_only, read

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
_BAND = (0xff, 0xf1, 0xb8)   # the P95 band's fill (sched.output.colours.P95_FILL)
_MARGIN = 24                  # report.html's body margin at 16 px (1.5em), each side


def png_rows(path: str) -> tuple[int, int, list[bytes], int]:
    """``(width, height, rows, bytes per pixel)`` of an 8-bit, non-interlaced RGB or RGBA PNG."""
    with open(path, "rb") as handle:
        data = handle.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xff
        elif kind == 2:
            line = bytearray((a + b) & 0xff for a, b in zip(line, previous))
        elif kind == 3:
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + previous[i]) // 2) & 0xff
        elif kind == 4:
            for i in range(stride):
                a, b, c = (line[i - bpp] if i >= bpp else 0), previous[i], (previous[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xff
        rows.append(bytes(line))
        previous = line
    return width, height, rows, bpp


def band_extent(path: str) -> tuple[int, int, int]:
    """(first row, last row, rightmost column) holding the band's colour (±3 per channel) over at
    least 20 pixels: a band, not the legend's 14-pixel swatch of the same colour."""
    _, _, rows, bpp = png_rows(path)
    found, right = [], 0
    for y, row in enumerate(rows):
        xs = [x for x in range(0, len(row) // bpp)
              if all(abs(row[x * bpp + k] - _BAND[k]) <= 3 for k in range(3))]
        if len(xs) >= 20:
            found.append(y)
            right = max(right, xs[-1])
    assert found, f"{path}: no P95 band in the screenshot: the picture is not on the first screenful"
    return found[0], found[-1], right


@full_only("report.html screenshots in headless Chromium")
@unittest.skipIf(BROWSER is None, "needs chromium (apt-get install chromium)")
class ReportInBrowserTest(unittest.TestCase):
    def screenshot(self, width: int, height: int) -> str:
        keep = os.environ.get("ISL_SCREENSHOTS")
        folder = keep or tempfile.mkdtemp(prefix="isl-shots-")
        if not keep:
            self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"baseline-report-{width}.png")
        page = "file://" + os.path.join(EXPECTED, "baseline", "report.html")
        subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--force-device-scale-factor=1", f"--window-size={width},{height}", f"--screenshot={path}", page],
                       capture_output=True, timeout=180, check=False)
        self.assertTrue(os.path.isfile(path), "chromium wrote no screenshot")
        return path

    def test_the_picture_fits_800_and_keeps_its_size_at_1400(self):
        svg = read(os.path.join(EXPECTED, "baseline", "timeline.svg"))
        svg_width = float(re.search(r'viewBox="0 0 ([\d.]+) ', svg).group(1))
        bands = [float(y) for y in re.findall(r'data-p95-request="[^"]+" x="[\d.]+" y="([\d.]+)"', svg)]
        span = bands[-1] + 18 - bands[0]   # from the first band's top to the last band's bottom, SVG units
        for width, height, scale in ((1400, 1500, 1.0), (800, 1200, (800 - 2 * _MARGIN) / svg_width)):
            with self.subTest(width=width):
                top, bottom, right = band_extent(self.screenshot(width, height))
                self.assertAlmostEqual((bottom + 1 - top) / span, scale, delta=0.03)
                self.assertLessEqual(right, width - _MARGIN)   # the whole picture is on the page


if __name__ == "__main__":
    unittest.main()
