"""The web view: the plan drawn as SVG (operators, edges by kind, loop scopes as boxes around
exactly their operators), the page and its JSON over loopback, and the page as a real headless
Chromium renders it while a job runs (with a screenshot)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.datastream.window import EndOfStreamWindows
from slipstream.runtime.plan_formats import plan_document
from slipstream.runtime.plan_svg import plan_svg
from slipstream.runtime.planner import plan_job

N = 100_000
SVG = "{http://www.w3.org/2000/svg}"


def countdown(stream):
    """A FLIP-15 loop body: each number goes round until it reaches zero."""
    minus = stream.map(lambda x: x - 1).name("minus one").uid("minus-one")
    return minus.filter(lambda x: x > 0).uid("again"), minus.filter(lambda x: x <= 0).uid("done")


def watched_job(released: threading.Event, parallelism: int = 2) -> StreamExecutionEnvironment:
    """numbers -> slow -> per-key totals (sorted backlog, BLOCKING out) and -> a countdown loop."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(show_progress=False, progress_interval=0.1, ui_port=0, batch_size=100)

    def slow(x: int) -> int:
        if x % 10 == 0 and not released.is_set():
            threading.Event().wait(0.001)
        return x

    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda x, _: x)
    numbers = env.from_source(NumberSequenceSource(1, N), strategy, "numbers").uid("numbers") \
        .map(slow).name("slow").uid("slow")
    (numbers.key_by(lambda x: x % 5).window(EndOfStreamWindows.get()).reduce(lambda a, b: a + b)
     .name("totals").uid("totals").rebalance().filter(lambda x: False).uid("quiet").print().uid("totals-out"))
    (numbers.filter(lambda x: x % 1000 == 0).uid("thousands").map(lambda x: x // 10_000).uid("rounds")
     .iterate(countdown)
     .filter(lambda x: False).uid("quiet-loop").print().uid("loop-out"))
    return env


def test_the_picture_has_every_operator_edge_kinds_and_loop_boxes_around_exactly_their_operators():
    env = watched_job(threading.Event())
    document = plan_document(plan_job(env._job_spec(list(env._transformations))))
    root = ET.fromstring(plan_svg(document))
    boxes = {g.get("data-uid"): g.find(f"{SVG}rect") for g in root.iter(f"{SVG}g")
             if "operator" in (g.get("class") or "").split()}
    assert set(boxes) == {op["uid"] for op in document["operators"]}
    kinds = sorted(g.get("data-kind") for g in root.iter(f"{SVG}g") if g.get("data-kind"))
    assert kinds == sorted(edge["kind"] for edge in document["edges"])
    assert {"BLOCKING", "FEEDBACK", "PIPELINED"} <= set(kinds)
    sorted_ops = {g.get("data-uid") for g in root.iter(f"{SVG}g") if "sorted" in (g.get("class") or "")}
    assert sorted_ops == {op["uid"] for op in document["operators"] if op["batch"]["sorted_backlog"]} \
        and sorted_ops
    scopes = [g for g in root.iter(f"{SVG}g") if g.get("class") == "scope"]
    assert [g.get("data-scope") for g in scopes] == [s["scope"] for s in document["loop_scopes"]]

    def inside(inner, outer) -> bool:
        x, y, w, h = (float(inner.get(a)) for a in ("x", "y", "width", "height"))
        ox, oy, ow, oh = (float(outer.get(a)) for a in ("x", "y", "width", "height"))
        return ox <= x and oy <= y and x + w <= ox + ow and y + h <= oy + oh

    for scope, group in zip(document["loop_scopes"], scopes):
        members = {op["uid"] for op in document["operators"] if op["id"] in scope["operators"]}
        rect = group.find(f"{SVG}rect")
        assert {uid for uid, box in boxes.items() if inside(box, rect)} == members


def get(url: str) -> tuple[str, bytes]:
    assert url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.headers["Content-Type"], response.read()


def test_the_page_plan_progress_and_metrics_are_served_over_loopback(capsys):
    released = threading.Event()
    env = watched_job(released)
    expected_plan = plan_document(plan_job(env._job_spec(list(env._transformations))))
    client = env.execute_async("served")
    try:
        url = client.get_urls()["web view"]
        kind, page = get(url)
        assert kind.startswith("text/html") and b"<svg" in page and b"served" in page
        assert not re.search(rb"(src|href)=\"(https?:)?//", page), "the page must not load anything from outside"
        _, plan = get(url + "api/plan")
        assert json.loads(plan)["operators"] == expected_plan["operators"]
        _, progress = get(url + "api/progress")
        assert json.loads(progress)["job_name"] == "served"
        _, metrics = get(url + "metrics")
        assert b"slipstream_operator_numRecordsOut" in metrics
        with pytest.raises(urllib.error.HTTPError):
            get(url + "nothing-here")
    finally:
        released.set()
    client.get_job_execution_result().result()
    capsys.readouterr()


def chromium() -> str:
    """The headless browser: Debian's chromium (the Makefile's test target installs it as root)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed: `make test` installs it with apt-get (as root)")
    pytest.skip("chromium is not installed (apt-get install chromium); `make test` installs it as root")


def browse(url: str, *args: str) -> str:
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--virtual-time-budget=4000", "--window-size=1500,1400", *args, url]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout


def test_chromium_renders_the_plan_and_live_figures_of_a_running_job(tmp_path, capsys):
    released = threading.Event()
    client = watched_job(released).execute_async("in the browser")
    try:
        url = client.get_urls()["web view"]
        threading.Event().wait(1.0)  # a few samples, so rates are there
        dom = browse(url, "--dump-dom")
        screenshot = tmp_path / "web_view.png"
        browse(url, f"--screenshot={screenshot}")
    finally:
        released.set()
    client.get_job_execution_result().result()
    capsys.readouterr()
    updates = int(re.search(r'<body data-updates="(\d+)"', dom).group(1))
    assert updates >= 1, "the page's script never showed the job's progress"
    rows = re.findall(r'<tr data-uid="([^"]+)"><td>([^<]*)</td>', dom)
    assert {uid for uid, _ in rows} >= {"numbers", "slow", "totals", "minus-one", "loop-out"}
    live = dict(re.findall(r'id="live-([^"]+)"[^>]*>([^<]*)<', dom))
    assert re.match(r"[\d,]+/s out · [\d,]+", live["slow"]), live["slow"]
    assert "buffering" in live["totals"] or "batch work" in live["totals"] or "streaming" in live["totals"]
    assert re.search(r'id="backlog-read">read [\d,]+<', dom)
    assert re.search(r'id="backlog-eta">ETA [\d.]+ s<', dom) or 'id="switch">switched' in dom
    assert 'class="scope"' in dom and 'data-kind="BLOCKING"' in dom and 'data-kind="FEEDBACK"' in dom
    assert 'id="status">RUNNING<' in dom
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 20_000
    if os.environ.get("SLIPSTREAM_SCREENSHOT"):  # where to keep the picture, to look at it
        shutil.copy(screenshot, os.environ["SLIPSTREAM_SCREENSHOT"])
