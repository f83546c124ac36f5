"""``jsonl_chunks``: the JSON Lines text of records in bounded chunks (sched.output.jsonl_lines).

The chunks joined are the whole text, every chunk ends with a newline, and no chunk holds more
than its character cap plus one line (the line that reached the cap), nor more lines than its cap.
"""

import json
import unittest

from sched.output.jsonl_lines import CHUNK_CHARS, jsonl_chunks, jsonl_text


class JsonlChunksTest(unittest.TestCase):
    def test_chunks_join_to_the_text_and_stay_under_their_caps(self):
        records = [{"name": f"r{i}", "pad": "x" * (i % 37)} for i in range(500)] + ['{"line": "already text"}']
        whole = "".join(json.dumps(r, ensure_ascii=False) + "\n" if isinstance(r, dict) else r + "\n"
                        for r in records)
        self.assertEqual(jsonl_text(records), whole)
        longest = max(len(line) for line in whole.splitlines())
        for lines_cap, chars_cap in ((4096, 200), (7, 10**6), (3, 50), (1, 1)):
            chunks = list(jsonl_chunks(records, lines_per_chunk=lines_cap, chars_per_chunk=chars_cap))
            self.assertEqual("".join(chunks), whole)
            for chunk in chunks:
                self.assertTrue(chunk.endswith("\n"))
                lines = chunk.splitlines()
                self.assertLessEqual(len(lines), lines_cap)
                # all lines but the last stay under the cap: the chunk ends at the line that reached it
                self.assertLess(sum(map(len, lines[:-1])), chars_cap)
                self.assertLessEqual(len(chunk), chars_cap + longest + len(lines))

    def test_no_records_no_chunk(self):
        self.assertEqual(list(jsonl_chunks([])), [])

    def test_the_default_cap_is_a_few_hundred_kilobytes(self):
        self.assertTrue(64 * 1024 <= CHUNK_CHARS <= 1024 * 1024)


if __name__ == "__main__":
    unittest.main()
