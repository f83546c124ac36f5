"""report.html in the order a learner reads it: a short summary, the picture scaled to the page,
then the long tables folded away (README §12.1). The short table's numbers are summary.json's."""

import json
import os
import re
import unittest

from sched.output.report import SHORT_SUMMARY
from tests.helpers import EXPECTED, REFERENCE_RUNS, read


class ReportLayoutTest(unittest.TestCase):
    def test_summary_then_picture_then_folded_tables(self):
        for reference in REFERENCE_RUNS:
            with self.subTest(reference=reference):
                html = read(os.path.join(EXPECTED, reference, "report.html"))
                short = html.index('<table class="short">')
                picture = html.index('<div class="picture">')
                fields = html.index('<tr data-field="')
                workload = html.index('<table class="workload">')
                self.assertLess(short, picture)
                self.assertLess(picture, fields)
                for position in (fields, workload):   # each long table inside a <details> that opens after the picture
                    opened = html.rindex("<details>", 0, position)
                    self.assertGreater(opened, picture)
                    self.assertLess(position, html.index("</details>", opened))

    def test_the_short_table_holds_summary_json(self):
        for reference in REFERENCE_RUNS:
            with self.subTest(reference=reference):
                html = read(os.path.join(EXPECTED, reference, "report.html"))
                cases = json.loads(read(os.path.join(EXPECTED, reference, "summary.json")))["cases"]
                table = html.split('<table class="short">')[1].split("</table>")[0]
                rows = [re.findall(r"<td>([^<]*)</td>", row) for row in re.findall(r"<tr><td>.*?</tr>", table)]
                expected = [[case["case"]] + ["NA" if case[f] is None else json.dumps(case[f]) for f, _ in SHORT_SUMMARY]
                            + [f"{case['succeeded']}/{case['arrived']}"] for case in cases]
                self.assertEqual(rows, expected)

    def test_the_picture_scales_to_the_page_without_a_scroll_box(self):
        html = read(os.path.join(EXPECTED, "baseline", "report.html"))
        style = html.split("<style>")[1].split("</style>")[0]
        self.assertIn(".picture svg{display:block;max-width:100%;height:auto}", style)
        self.assertNotIn("overflow-x:auto;max-width:100%", style)   # the old inner scroll box
        svg = read(os.path.join(EXPECTED, "baseline", "timeline.svg"))
        self.assertRegex(svg.split("\n", 1)[0], r'viewBox="0 0 \d+ \d+"')   # what lets the browser scale it


if __name__ == "__main__":
    unittest.main()
