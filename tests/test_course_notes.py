"""Whether a learner's note is still the template (``grade``'s ``notes`` column and ``handin``'s warning).

Expected values: the template files shipped in the lab folder themselves (their sha256 computed here
with hashlib, not read from the code), and notes made by hand from them.
"""

import hashlib
import os
import pathlib
import unittest

from sched.course.notes import TEMPLATE_SHA256, unchanged_template
from sched.course.plan import NOTES
from tests.helpers import PROJECT, temp_dir


class TemplateTest(unittest.TestCase):
    def test_recorded_digests_are_the_shipped_templates(self):
        self.assertEqual(set(TEMPLATE_SHA256), set(NOTES))
        for note in NOTES:
            data = pathlib.Path(PROJECT, note).read_bytes().replace(b"\r\n", b"\n")
            self.assertEqual(TEMPLATE_SHA256[note], hashlib.sha256(data).hexdigest(), note)

    def test_the_template_filled_in_or_not(self):
        folder = temp_dir(self)
        for note in NOTES:
            template = pathlib.Path(PROJECT, note).read_bytes()
            with self.subTest(note=note):
                path = os.path.join(folder, note)
                pathlib.Path(path).write_bytes(template)
                self.assertTrue(unchanged_template(path, note))
                pathlib.Path(path).write_bytes(template.replace(b"\n", b"\r\n"))   # saved on Windows
                self.assertTrue(unchanged_template(path, note))
                pathlib.Path(path).write_bytes(template + b"My name: Li Lei\n")
                self.assertFalse(unchanged_template(path, note))
                self.assertFalse(unchanged_template(os.path.join(folder, "absent.md"), note))

    def test_the_instructors_own_template_counts_too(self):
        folder = temp_dir(self)
        template, note = os.path.join(folder, "mine.md"), os.path.join(folder, "prediction.md")
        pathlib.Path(template).write_bytes(b"# Prediction (our course's own version)\n")
        pathlib.Path(note).write_bytes(b"# Prediction (our course's own version)\n")
        self.assertFalse(unchanged_template(note, "prediction.md"))
        self.assertTrue(unchanged_template(note, "prediction.md", template))


if __name__ == "__main__":
    unittest.main()
