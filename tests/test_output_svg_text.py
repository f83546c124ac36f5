"""The time lines' XML escaping (sched.output.svg) gives xml.sax.saxutils' text without loading it."""

import subprocess
import sys
import unittest
import xml.sax.saxutils as saxutils
from pathlib import Path

from sched.output.svg import escape, quoteattr

ROOT = Path(__file__).resolve().parent.parent

# Hand-picked: each branch of quoteattr's quoting (no quote, a double quote, a single quote, both),
# every escaped character, request names as traces spell them.
CASES = ["", "req-1", 'say "hi"', "it's", "both \" and '", "<a & b>", "tab\there", "line\nbreak\r",
         "a&amp;b", "conv-00017 (turn 3)", "é ü 漢字"]


class SvgTextTest(unittest.TestCase):
    def test_same_text_as_saxutils(self):
        for text in CASES:
            with self.subTest(text=text):
                self.assertEqual(escape(text), saxutils.escape(text))
                self.assertEqual(quoteattr(text), saxutils.quoteattr(text))

    def test_hand_values(self):
        self.assertEqual(quoteattr('a "b" <c>'), "'a \"b\" &lt;c&gt;'")
        self.assertEqual(quoteattr("x'\"y"), '"x\'&quot;y"')
        self.assertEqual(quoteattr("a\tb"), '"a&#9;b"')

    def test_ms_picture_does_not_load_the_url_library(self):
        code = ("import sys, sched.output.ms_picture; "
                "print(sorted(m for m in sys.modules if m.startswith(('xml.sax', 'urllib.request', 'http', 'email'))))")
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.strip(), "[]")


if __name__ == "__main__":
    unittest.main()
