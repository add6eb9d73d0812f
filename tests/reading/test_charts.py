"""The SVG line charts: scales, stretches, and markup that parses and escapes what it shows."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from django.utils.safestring import SafeString

from whos_online.reading.charts import Scale, compact, line_chart, runs, scale

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert("x")</script> & </svg>'


def label(start: int) -> str:
    return f"t{start}"


def parse(markup: str) -> ET.Element:
    return ET.fromstring(markup)


def points(root: ET.Element) -> list[tuple[float, float, str]]:
    return [
        (float(c.attrib["cx"]), float(c.attrib["cy"]), c.findtext(f"{SVG}title") or "")
        for c in root.iter(f"{SVG}circle")
    ]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], Scale(0, 1, 1)),
        ([0, 0], Scale(0, 1, 1)),
        ([1], Scale(0, 1, 1)),
        ([3], Scale(0, 3, 1)),
        ([5], Scale(0, 5, 1)),
        ([7], Scale(0, 8, 2)),
        ([12], Scale(0, 15, 5)),
        ([45], Scale(0, 50, 10)),
        ([99], Scale(0, 100, 20)),
        ([312, 4], Scale(0, 400, 100)),
        ([-3, 2], Scale(-3, 2, 1)),
        ([-6, 5], Scale(-10, 5, 5)),
        ([-7], Scale(-8, 0, 2)),
    ],
)
def test_scale_starts_at_zero_and_ends_on_a_round_number(values, expected):
    found = scale(values)
    assert found == expected
    assert len(found.ticks) - 1 <= 5
    assert found.low <= min([0, *values])
    assert found.high >= max([0, *values])


def test_scale_of_huge_counts():
    found = scale([2**63 - 1])
    assert found.high >= 2**63 - 1
    assert len(found.ticks) <= 6


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (999, "999"), (1000, "1k"), (1234, "1.2k"), (-2500, "-2.5k"), (5_000_000, "5M")],
)
def test_compact_numbers(value, text):
    assert compact(value) == text


def test_runs_split_at_missing_samples():
    assert runs([None, 1, 2, None, None, 3, 0]) == [[(1, 1), (2, 2)], [(5, 3), (6, 0)]]
    assert runs([None, None]) == []
    assert runs([]) == []


def test_chart_draws_a_point_per_sample_and_a_line_per_stretch():
    starts = [1000 + 60 * i for i in range(6)]
    markup = line_chart(starts, [1, 3, None, 2, 2, 5], title="Users online", label=label)

    assert isinstance(markup, SafeString)
    root = parse(markup)
    assert root.attrib["viewBox"] == "0 0 640 180"
    assert root.attrib["aria-label"] == "Users online"
    assert root.findtext(f"{SVG}title") == "Users online"
    found = points(root)
    assert [title for _, _, title in found] == [
        "t1000: 1",
        "t1060: 3",
        "t1180: 2",
        "t1240: 2",
        "t1300: 5",
    ]
    assert len(root.findall(f"{SVG}polyline")) == 2
    assert len(root.findall(f"{SVG}polygon")) == 2
    # The first and last slices sit at the plot's edges; the highest sample is the highest point.
    assert found[0][0] == 44
    assert found[-1][0] == 630
    assert min(found, key=lambda point: point[1])[2] == "t1300: 5"
    assert [t.text for t in root.iter(f"{SVG}text") if t.attrib["class"] == "time-label"] == [
        "t1000",
        "t1180",
        "t1300",
    ]
    assert [t.text for t in root.iter(f"{SVG}text") if t.attrib["class"] == "value-label"] == [
        "0",
        "1",
        "2",
        "3",
        "4",
        "5",
    ]


def test_every_coordinate_is_inside_the_view_box():
    starts = list(range(0, 120 * 5, 5))
    values: list[int | None] = [(i * 37) % 101 - 20 for i in range(120)]
    markup = line_chart(starts, values, title="t", label=label, width=300, height=100)

    numbers = [float(n) for n in re.findall(r'(?:cx|cy|x1|x2|y1|y2|x|y)="(-?[\d.]+)"', markup)]
    numbers += [
        float(n)
        for pair in re.findall(r'points="([^"]+)"', markup)
        for n in re.split(r"[ ,]", pair)
    ]
    assert numbers
    assert all(0 <= n <= 300 for n in numbers)


def test_a_lone_sample_is_a_point_without_a_line():
    root = parse(line_chart([0, 60, 120], [None, 4, None], title="t", label=label))

    assert len(points(root)) == 1
    assert root.findall(f"{SVG}polyline") == []


def test_a_chart_without_samples_says_so():
    root = parse(line_chart([0, 60], [None, None], title="t", label=label, empty="Nothing yet"))

    assert points(root) == []
    assert [t.text for t in root.iter(f"{SVG}text") if t.attrib["class"] == "empty"] == [
        "Nothing yet"
    ]


def test_a_chart_of_no_slices_at_all_still_parses():
    root = parse(line_chart([], [], title="t", label=label))
    assert points(root) == []


def test_title_labels_and_empty_text_are_escaped():
    markup = line_chart(
        [0, 60], [1, None], title=HOSTILE, label=lambda start: HOSTILE, empty=HOSTILE
    )

    assert "<script>" not in markup
    root = parse(markup)
    assert root.attrib["aria-label"] == HOSTILE
    assert root.findtext(f"{SVG}title") == HOSTILE
    assert points(root)[0][2] == f"{HOSTILE}: 1"


def test_starts_and_values_must_match():
    with pytest.raises(ValueError, match="as many starts as values"):
        line_chart([0], [1, 2], title="t", label=label)
