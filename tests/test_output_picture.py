"""The time-line picture and the HTML report (lab.md §7–8): parsed as XML, checked tick by tick."""

import json
import os
import re
import unittest
from unittest import mock
import xml.etree.ElementTree as ET

from sched.core.config import Batching, Case, EngineConfig
from sched.lab.engine import simulate
from sched.core.metrics import SUMMARY_FIELDS
from sched.core.clock import LAB_TICKS
from sched.output.picture import MAX_LANES, lane_segments, render_timeline_svg
from sched.core.records import CaseResult
from sched.workload.specs import RequestSpec
from tests.helpers import EXPECTED, REFERENCE_RUNS, read, run_cli, temp_dir

SVG = "{http://www.w3.org/2000/svg}"


def parse_lanes(svg_text: str) -> dict:
    """(case, request) -> {"segments": [(phase, from, to, tokens)], "marks": {mark: tick}}."""
    root = ET.fromstring(svg_text)
    lanes = {}
    for case_group in root.iter(f"{SVG}g"):
        case = case_group.get("data-case")
        if case is None:
            continue
        for lane in case_group.findall(f"{SVG}g"):
            segments, marks = [], {}
            for element in lane:
                if element.get("data-phase"):
                    tokens = tuple(int(t) for t in element.get("data-tokens", "").split())
                    segments.append((element.get("data-phase"), int(element.get("data-from")),
                                     int(element.get("data-to")), tokens))
                    title = element.find(f"{SVG}title")
                    assert title is not None and lane.get("data-request") in title.text
                elif element.get("data-mark"):
                    marks[element.get("data-mark")] = int(element.get("data-tick"))
            lanes[(case, lane.get("data-request"))] = {"segments": segments, "marks": marks}
    return lanes


class BaselinePictureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lanes = parse_lanes(read(os.path.join(EXPECTED, "baseline", "timeline.svg")))

    def test_static_case_tick_by_tick(self):
        """Static, hand-computed (budget 64, decode 8, 4 slots; lab.md §3).

        L0 alone: prefill 512 = 8 × 64 in ticks 0–7, decodes 8–31 (tokens 9..32), done 32.
        Tick 32: S1 S2 U3 S4 admitted together. S1 prefills 64, 64, 16 (ticks 32–34);
        S2 stalls 32–33 then 48, 56, 40 (34–36: each tick S1 decodes first); U3 stalls 32–35 then
        16, 48, 32 (36–38); S4 stalls 32–37 then 16, 40, 40, 40, 8 (38–42, three decoders).
        S4 done at 59 (first token 44 + 15); tick 59: S5 U6 S7 admitted. S5 64, 64, 16 (59–61);
        U6 stalls 59–60 then 48, 56, 56 (61–63); S7 stalls 59–63 then 48, 48, 48 (64–66), done 83.
        """
        expected = {  # name: (arrival, admitted, [segments], first token, done)
            "L0": (0, 0, [("prefill", 0, 8, (64,) * 8), ("decode", 8, 32, ())], 9, 32),
            "S1": (1, 32, [("waiting", 1, 32, ()), ("prefill", 32, 35, (64, 64, 16)), ("decode", 35, 51, ())], 36, 51),
            "S2": (2, 32, [("waiting", 2, 32, ()), ("stalled", 32, 34, ()), ("prefill", 34, 37, (48, 56, 40)),
                           ("decode", 37, 53, ())], 38, 53),
            "U3": (3, 32, [("waiting", 3, 32, ()), ("stalled", 32, 36, ()), ("prefill", 36, 39, (16, 48, 32)),
                           ("decode", 39, 55, ())], 40, 55),
            "S4": (9, 32, [("waiting", 9, 32, ()), ("stalled", 32, 38, ()),
                           ("prefill", 38, 43, (16, 40, 40, 40, 8)), ("decode", 43, 59, ())], 44, 59),
            "S5": (10, 59, [("waiting", 10, 59, ()), ("prefill", 59, 62, (64, 64, 16)), ("decode", 62, 78, ())], 63, 78),
            "U6": (11, 59, [("waiting", 11, 59, ()), ("stalled", 59, 61, ()), ("prefill", 61, 64, (48, 56, 56)),
                            ("decode", 64, 80, ())], 65, 80),
            "S7": (12, 59, [("waiting", 12, 59, ()), ("stalled", 59, 64, ()), ("prefill", 64, 67, (48, 48, 48)),
                            ("decode", 67, 83, ())], 68, 83),
        }
        for name, (_, admitted, segments, first, done) in expected.items():
            with self.subTest(request=name):
                lane = self.lanes[("static", name)]
                self.assertEqual(lane["segments"], segments)
                self.assertEqual(lane["marks"], {"admission": admitted, "first-token": first, "done": done})

    def test_continuous_s1_waits_for_budget_not_for_a_slot(self):
        """lab.md §6: admitted at 1, first token 12. L0 takes the whole budget in ticks 1–7; then
        L0 decodes first (8) and S1 prefills 56, 56, 32 in ticks 8–10; 16 tokens stamped 12..27."""
        lane = self.lanes[("continuous", "S1")]
        self.assertEqual(lane["segments"], [("stalled", 1, 8, ()), ("prefill", 8, 11, (56, 56, 32)),
                                            ("decode", 11, 27, ())])
        self.assertEqual(lane["marks"], {"admission": 1, "first-token": 12, "done": 27})

    def test_apc_s7_hits_at_admission_32(self):
        """lab.md §6: S7 admitted at 32 with a hit (16 of 144 tokens left), first token 37, so its
        prefill ends at tick 35 and it decodes 36–51 (16 tokens stamped 37..52)."""
        lane = self.lanes[("continuous+APC", "S7")]
        self.assertEqual(lane["segments"][0], ("waiting", 12, 32, ()))
        self.assertEqual(lane["segments"][-1], ("decode", 36, 52, ()))
        prefill = [s for s in lane["segments"] if s[0] == "prefill"]
        self.assertEqual(sum(sum(s[3]) for s in prefill), 16)
        self.assertEqual(lane["marks"], {"cache-hit": 32, "first-token": 37, "done": 52})

    def test_chunk32_l0_and_s1_are_chunked_and_s7_is_the_tail(self):
        """Chunk cap 32: ticks 0–4 L0 and (from 1) S1 take 32 each (64 in all); tick 5 S1 prefills
        its last 16, so it decodes 6–21 (first token 7, lab.md §6). S7: admitted at 39 with a hit,
        prefills 16 in tick 39, first token 41, done 56 (the makespan)."""
        l0 = self.lanes[("continuous+APC+chunk32", "L0")]["segments"]
        self.assertEqual(l0[0][:3], ("chunked", 0, l0[0][2]))
        self.assertGreaterEqual(l0[0][2], 5)
        self.assertTrue(all(t == 32 for t in l0[0][3]))
        s1 = self.lanes[("continuous+APC+chunk32", "S1")]
        self.assertEqual(s1["segments"], [("chunked", 1, 5, (32, 32, 32, 32)), ("prefill", 5, 6, (16,)),
                                          ("decode", 6, 22, ())])
        self.assertEqual(s1["marks"], {"admission": 1, "first-token": 7, "done": 22})
        s7 = self.lanes[("continuous+APC+chunk32", "S7")]
        self.assertEqual(s7["segments"], [("waiting", 12, 39, ()), ("prefill", 39, 40, (16,)), ("decode", 40, 56, ())])
        self.assertEqual(s7["marks"], {"cache-hit": 39, "first-token": 41, "done": 56})


class PictureAgreesWithRequestsTest(unittest.TestCase):
    def test_every_reference_lane_agrees_with_requests_jsonl(self):
        """Each lane tiles [arrival, done_at) without gaps; marks sit at admitted_at, first_token_at and
        done_at; prefill tokens add up to prompt − hit tokens when the prefill completed."""
        for reference in REFERENCE_RUNS:
            lanes = parse_lanes(read(os.path.join(EXPECTED, reference, "timeline.svg")))
            rows = [json.loads(line) for line in read(os.path.join(EXPECTED, reference, "requests.jsonl")).splitlines()]
            self.assertEqual(len(lanes), len(rows))
            for row in rows:
                with self.subTest(reference=reference, case=row["case"], request=row["name"]):
                    lane = lanes[(row["case"], row["name"])]
                    segments = lane["segments"]
                    self.assertEqual(segments[0][1], row["arrival"])
                    self.assertEqual(segments[-1][2], row["done_at"])
                    for before, after in zip(segments, segments[1:]):
                        self.assertEqual(before[2], after[1])
                    end_mark = "done" if row["status"] == "ok" else "timeout"
                    self.assertEqual(lane["marks"][end_mark], row["done_at"])
                    if row["admitted_at"] is not None:
                        admission = "cache-hit" if row["hit_tokens"] else "admission"
                        self.assertEqual(lane["marks"][admission], row["admitted_at"])
                    if row["first_token_at"] is not None:
                        self.assertEqual(lane["marks"]["first-token"], row["first_token_at"])
                        prefilled = sum(sum(s[3]) for s in segments if s[0] in ("prefill", "chunked"))
                        self.assertEqual(prefilled, row["prompt_tokens"] - row["hit_tokens"])
                    decode_ticks = sum(s[2] - s[1] for s in segments if s[0] == "decode")
                    self.assertEqual(decode_ticks, row["output_tokens_emitted"])

    def test_report_embeds_the_picture_and_the_summary(self):
        """Every summary field is a row of one of the report's small tables, one column per case,
        each cell equal to summary.json (null shown as NA), each field exactly once."""
        for reference in REFERENCE_RUNS:
            with self.subTest(reference=reference):
                html = read(os.path.join(EXPECTED, reference, "report.html"))
                self.assertTrue(read(os.path.join(EXPECTED, reference, "timeline.svg")).rstrip() in html)
                self.assertNotIn("<script", html)
                cases = json.loads(read(os.path.join(EXPECTED, reference, "summary.json")))["cases"]
                rows = report_rows(html)
                self.assertEqual(sorted(rows), sorted(SUMMARY_FIELDS[1:]))
                self.assertEqual(len(re.findall(r'<tr data-field="', html)), len(SUMMARY_FIELDS) - 1)
                for field, (_, cells) in rows.items():
                    self.assertEqual(cells, ["NA" if case[field] is None else json.dumps(case[field]) for case in cases],
                                     field)
                heads = re.findall(r"<tr><th>field</th><th>unit</th>(.*?)</tr>", html)
                self.assertEqual(len(heads), 3)   # latency; throughput and hits; queue, outcomes and fairness
                for head in heads:
                    names = [name.replace("<wbr>", "") for name in re.findall(r'<th class="case">(.*?)</th>', head)]
                    self.assertEqual(names, [case["case"] for case in cases])

    def test_report_lists_the_input_workload(self):
        """The "Input workload" table has one row per request of workload.json, in order."""
        html = read(os.path.join(EXPECTED, "priority-mix", "report.html"))
        specs = json.loads(read(os.path.join(EXPECTED, "priority-mix", "workload.json")))["requests"]
        table = html.split('<table class="workload">')[1].split("</table>")[0]
        rows = [re.findall(r"<td>([^<]*)</td>", row) for row in re.findall(r"<tr><td>.*?</tr>", table)]
        self.assertEqual(len(rows), len(specs))
        for row, spec in zip(rows, specs):
            prompt = spec["prefix_tokens"] + spec["suffix_tokens"]
            self.assertEqual(row, [spec["name"], str(spec["arrival"]), spec["prefix_key"] or "null",
                                   str(spec["prefix_tokens"]), str(spec["suffix_tokens"]), str(prompt),
                                   str(spec["output_tokens"]), str(spec["priority"])])

    def test_the_p95_request_of_each_case_is_marked(self):
        """One band per case behind the request whose TTFT is the case's P95 TTFT (summary.json);
        by hand for the baseline (TTFTs in table.txt): static S7 (56), continuous S7 (30),
        continuous+APC U6 (26), chunk32 S7 (29)."""
        picked = {}
        for reference in REFERENCE_RUNS:
            svg = read(os.path.join(EXPECTED, reference, "timeline.svg"))
            rows = [json.loads(line) for line in read(os.path.join(EXPECTED, reference, "requests.jsonl")).splitlines()]
            cases = json.loads(read(os.path.join(EXPECTED, reference, "summary.json")))["cases"]
            root = ET.fromstring(svg)
            for group in root.iter(f"{SVG}g"):
                case = group.get("data-case")
                if case is None:
                    continue
                bands = [e.get("data-p95-request") for e in group if e.get("data-p95-request")]
                p95 = next(c["p95_ttft"] for c in cases if c["case"] == case)
                with self.subTest(reference=reference, case=case):
                    if p95 is None:
                        self.assertEqual(bands, [])
                        continue
                    self.assertEqual(len(bands), 1)
                    row = next(r for r in rows if r["case"] == case and r["name"] == bands[0])
                    self.assertEqual(row["ttft"], p95)
                    picked[(reference, case)] = bands[0]
        self.assertEqual([picked[("baseline", case)] for case in
                          ("static", "continuous", "continuous+APC", "continuous+APC+chunk32")], ["S7", "S7", "U6", "S7"])

    def test_cache_hits_are_strips_wide_enough_to_see(self):
        """Every lane whose request hit the cache has a green strip at least 8 px wide starting at
        its admission, and no other lane has one."""
        for reference in REFERENCE_RUNS:
            root = ET.fromstring(read(os.path.join(EXPECTED, reference, "timeline.svg")))
            rows = {(r["case"], r["name"]): r for r in map(json.loads, read(
                os.path.join(EXPECTED, reference, "requests.jsonl")).splitlines())}
            for group in root.iter(f"{SVG}g"):
                case = group.get("data-case")
                if case is None:
                    continue
                for lane in group.findall(f"{SVG}g"):
                    name = lane.get("data-request")
                    strips = [e for e in lane if e.tag == f"{SVG}rect" and e.get("fill") == "#009e73"
                              and e.get("height") == "3"]
                    with self.subTest(reference=reference, case=case, request=name):
                        if rows[(case, name)]["hit_tokens"]:
                            self.assertEqual(len(strips), 1)
                            self.assertGreaterEqual(float(strips[0].get("width")), 8)
                        else:
                            self.assertEqual(strips, [])

    def test_waiting_titles_give_the_reason_of_the_case(self):
        """Static batching admits a new batch only when the whole batch has ended (lab.md §4): S1
        waits 1–31 behind L0 alone, slots free, so its title says the batch was running; a
        continuous case waits only when every slot is taken."""
        svg = read(os.path.join(EXPECTED, "baseline", "timeline.svg"))
        self.assertIn("<title>S1 in static: waiting: static batch still running, ticks 1–31 (31 ticks)</title>", svg)
        self.assertIn("<title>S7 in continuous+APC+chunk32: waiting: no free slot, ticks 12–38 (27 ticks)</title>",
                      svg)
        self.assertNotIn("static: waiting: no free slot", svg)
        self.assertNotIn("waiting (no slot)", svg)
        self.assertIn(">waiting: no slot / static batch</text>", svg)

    def test_every_report_column_but_the_case_names_its_unit(self):
        """lab.md §7: units on every number. Latencies are ticks; throughput and completed_output_tps
        (the spec's name, kept) are output tokens per tick, not per second."""
        html = read(os.path.join(EXPECTED, "baseline", "report.html"))
        units = {field: unit for field, (unit, _) in report_rows(html).items()}
        self.assertEqual(sorted(units), sorted(SUMMARY_FIELDS[1:]))
        for field in SUMMARY_FIELDS[1:]:
            with self.subTest(field=field):
                self.assertNotEqual(units[field], "")
        self.assertEqual(units["p95_ttft"], "ticks")
        self.assertEqual(units["throughput"], "output tokens per tick")
        self.assertTrue(units["completed_output_tps"].startswith("output tokens per tick"))


def report_rows(html: str) -> dict:
    """field -> (unit, [cell per case]) from report.html's summary tables."""
    rows = {}
    for field, unit, cells in re.findall(r'<tr data-field="([^"]*)"><td>[^<]*</td><td class="unit">([^<]*)</td>(.*?)</tr>',
                                         html):
        rows[field] = (unit, re.findall(r"<td>([^<]*)</td>", cells))
    return rows


class ReplayTest(unittest.TestCase):
    def test_replayed_workload_gives_the_same_picture_and_report(self):
        base = temp_dir(self)
        first, replay = os.path.join(base, "first"), os.path.join(base, "replay")
        self.assertEqual(run_cli(["--timeout-ticks", "30", "--artifacts", first])[0], 0)
        code, _, err = run_cli(["--timeout-ticks", "30", "--workload", os.path.join(first, "workload.json"),
                                "--artifacts", replay])
        self.assertEqual(code, 0, err)
        for artifact in ("timeline.svg", "report.html"):
            with self.subTest(artifact=artifact):
                self.assertEqual(read(os.path.join(first, artifact)), read(os.path.join(replay, artifact)))


class BoundedPictureTest(unittest.TestCase):
    CASE = Case("continuous", Batching.CONTINUOUS, apc=False, chunk_tokens=None)

    def test_many_requests_draw_at_most_max_lanes_and_say_so(self):
        """47 equal requests, one per tick: each alone, so every TTFT is 2 (prefill in its arrival
        tick, first token stamped arrival + 2). The P95 request is the ceil(0.95 × 47) = 45th by TTFT,
        ties in workload order: R44, beyond the first 40, drawn as one more lane."""
        workload = [RequestSpec(f"R{i}", i, None, 0, 8, 2) for i in range(MAX_LANES + 7)]
        result = simulate(workload, EngineConfig(), self.CASE)
        self.assertEqual({r.first_token_at - r.spec.arrival for r in result.requests}, {2})
        svg = render_timeline_svg([result], LAB_TICKS)
        lanes = parse_lanes(svg)
        self.assertEqual(len(lanes), MAX_LANES + 1)
        self.assertIn(("continuous", "R44"), lanes)
        self.assertIn('data-p95-request="R44"', svg)
        self.assertIn(f"Showing the first {MAX_LANES} of {MAX_LANES + 7} requests", svg)

    def test_without_tick_records_prefill_is_one_segment(self):
        """A: 20-token prompt, budget 16: prefill ticks 0–1, decodes 2–3 (tokens at 3 and 4)."""
        result = simulate([RequestSpec("A", 0, None, 0, 20, 2)], EngineConfig(budget=16, decode_cost=4), self.CASE)
        bare = CaseResult(result.case, result.config, result.requests, ticks=[])
        lane = parse_lanes(render_timeline_svg([bare], LAB_TICKS))[("continuous", "A")]
        self.assertEqual(lane["segments"], [("prefill", 0, 2, ()), ("decode", 2, 4, ())])
        self.assertEqual(lane["marks"], {"admission": 0, "first-token": 3, "done": 4})

    def test_decode_skipped_for_lack_of_budget_and_the_coarse_fallback(self):
        """Budget 8 = one decode, 2 slots. t0: A and B admitted, each prefills its 4 tokens.
        t1–t3: A decodes (tokens 2, 3, 4; done 4), B is skipped. t4–t5: B decodes (5, 6; done 6)."""
        workload = [RequestSpec("A", 0, None, 0, 4, 3), RequestSpec("B", 0, None, 0, 4, 2)]
        result = simulate(workload, EngineConfig(budget=8, decode_cost=8, max_active=2), self.CASE)
        b = result.requests[1]
        fine = lane_segments(b, {0: 4}, None)
        self.assertEqual([(s.phase, s.start, s.end, s.tokens, s.emitted) for s in fine],
                         [("prefill", 0, 1, (4,), 0), ("skipped", 1, 4, (), 0), ("decode", 4, 6, (), 2)])
        with mock.patch("sched.output.lanes.MAX_SEGMENTS", 2):
            coarse = lane_segments(b, {0: 4}, None)
        self.assertEqual([(s.phase, s.start, s.end, s.emitted) for s in coarse],
                         [("prefill", 0, 1, 0), ("decode", 1, 6, 2)])
        lane = parse_lanes(render_timeline_svg([result], LAB_TICKS))[("continuous", "B")]
        self.assertEqual(lane["marks"], {"admission": 0, "first-token": 5, "done": 6})

    def test_names_are_escaped(self):
        result = simulate([RequestSpec('<a&"b>', 0, None, 0, 4, 1)], EngineConfig(), self.CASE)
        lanes = parse_lanes(render_timeline_svg([result], LAB_TICKS))
        self.assertIn(("continuous", '<a&"b>'), lanes)


if __name__ == "__main__":
    unittest.main()
