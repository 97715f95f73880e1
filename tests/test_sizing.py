"""Sizing from the measured scale curve: `ragvps plan --chunks N`, and the RAM verdict in `ragvps stats`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ragvps.backends import LOCAL_MODEL
from ragvps.errors import UsageError
from ragvps.measure import sizing

DOCS = Path(__file__).resolve().parents[1] / "docs"
GB = 1024**3


def test_plan_chunks_at_a_measured_size_prints_the_measurement(cli):
    curve = sizing.load_curve()
    point = [p for p in curve["points"] if len(p["index_bytes"]) == 3][-1]  # the largest size with every type
    n = point["rows"]
    # the curve was measured with MiniLM's 384 dimensions: the plan for that model is the measurement
    out = json.loads(cli("plan", "--chunks", str(n), "--model", LOCAL_MODEL, "--json").stdout)
    assert out["measured"] == curve["measured"] and out["chunks"] == n and out["dims"] == 384
    by_type = {p["vector_type"]: p for p in out["predictions"]}
    assert set(by_type) == {"vector", "halfvec", "bit"}
    for t, p in by_type.items():  # at a measured size the prediction is the measurement itself
        assert p["index_bytes"] == pytest.approx(point["index_bytes"][t], rel=1e-6)
        assert p["disk_bytes"] == pytest.approx(
            point["text_bytes"] + point["table_bytes"][t] + point["index_bytes"][t], rel=1e-6
        )
        assert p["build_s"] == pytest.approx(point["build_s"][t], rel=1e-6)
        assert p["hybrid_p95_ms"] == pytest.approx(point["hybrid_ms"][t]["p95"], rel=1e-6)
    assert by_type["bit"]["index_bytes"] < by_type["halfvec"]["index_bytes"] < by_type["vector"]["index_bytes"]
    for t, p in by_type.items():  # the depth advice is the measured overlap at that size
        assert p["build_memory_bytes"] == pytest.approx(sizing.BUILD_MEMORY_FACTOR * point["index_bytes"][t], rel=1e-6)
        depths = {int(k.rsplit(" ", 1)[1]): v for k, v in point["overlap"].items() if k.startswith(f"{t},")}
        assert p["depth_rows"] == n and p["depth_setting"] == ("bit_rerank_depth" if t == "bit" else "ef_search")
        if p["depth"] is None:
            assert max(depths.values()) < sizing.OVERLAP_GOAL and p["depth_overlap"] == depths[max(depths)]
        else:
            assert p["depth_overlap"] == depths[p["depth"]] >= sizing.OVERLAP_GOAL
            assert all(v < sizing.OVERLAP_GOAL for d, v in depths.items() if d < p["depth"])

    human = cli("plan", "--chunks", str(n), "--ram", "64GB").stdout
    assert f"from: {curve['measured']}" in human
    assert "halfvec: index" in human and "fits in 64.0 GB: keep it" in human
    assert f"measured at {n:,} chunks); build with index_memory >=" in human

    # Beyond the largest measured size: more than the measurement, and said to be an extrapolation.
    top = curve["points"][-1]["rows"]
    far = json.loads(cli("plan", "--chunks", str(2 * top), "--json").stdout)["predictions"]
    assert all(f["extrapolated"] and f["index_bytes"] > by_type[f["vector_type"]]["index_bytes"] for f in far)
    assert "extrapolated" in cli("plan", "--chunks", str(2 * top)).stdout
    # A model with twice the dimensions: a larger index, the graph part unchanged.
    wide = json.loads(cli("plan", "--chunks", str(n), "--dims", "768", "--json").stdout)["predictions"]
    assert wide[1]["index_bytes"] == pytest.approx(by_type["halfvec"]["index_bytes"] + n * 2 * 384, rel=1e-6)

    assert "--chunks 0 must be at least 1" in cli("plan", "--chunks", "0", expect=2).stderr
    assert "is not a size" in cli("plan", "--chunks", "10", "--ram", "lots", expect=2).stderr


def test_search_depth_is_the_smallest_measured_one_reaching_the_goal():
    curve = {
        "points": [
            {
                "rows": 100,
                "overlap": {
                    "halfvec, ef_search 40": 0.9,
                    "halfvec, ef_search 100": 0.96,
                    "halfvec, ef_search 200": 0.99,
                },
            },
            {"rows": 1000, "overlap": {"halfvec, ef_search 100": 0.8, "halfvec, ef_search 400": 0.9}},
        ]
    }
    assert sizing.search_depth(curve, 50, "halfvec") == (100, 0.96, 100)  # the first measured size >= chunks
    assert sizing.search_depth(curve, 500, "halfvec") == (None, 0.9, 1000)  # none reaches it: the deepest's
    assert sizing.search_depth(curve, 5000, "halfvec") == (None, 0.9, 1000)  # beyond: the largest size
    depth, _, rows = sizing.search_depth(curve, 50, "bit")
    assert depth is None and rows == 0


def test_ram_verdict_says_what_to_switch_to():
    sizes = {"vector": int(2.0 * GB), "halfvec": int(1.1 * GB), "bit": int(0.1 * GB)}
    fits, text = sizing.ram_verdict(sizes["halfvec"], 8 * GB, "halfvec", sizes)  # shared_buffers: a quarter, 2 GB
    assert fits and text == "index 1.1 GB fits in 8.0 GB: keep it; vector would take 2.0 GB; bit would take 102 MB"
    fits, text = sizing.ram_verdict(sizes["halfvec"], 4 * GB, "halfvec", sizes)  # 1 GB: the 1M measurement
    assert not fits and "does not fit in 4.0 GB" in text and "hold 1.0 GB" in text and "switch to bit" in text
    fits, text = sizing.ram_verdict(sizes["vector"], 2 * GB, "vector", sizes)
    assert not fits and "does not fit in 2.0 GB" in text and 'switch to bit (vector_type = "bit"' in text
    fits, text = sizing.ram_verdict(sizes["bit"], GB // 4, "bit", sizes)
    assert not fits and "add RAM or split the corpus over a second server" in text


def test_curve_interpolation_and_exponent():
    pts = [(10_000, 1.0), (100_000, 10.0), (1_000_000, 100.0)]
    assert sizing.at(pts, 300_000) == (pytest.approx(30.0), False)
    assert sizing.at(pts, 10_000_000) == (pytest.approx(1000.0), True)
    assert sizing.exponent(pts) == pytest.approx(1.0)
    assert sizing.exponent([(10_000, 4.0), (1_000_000, 40.0)]) == pytest.approx(0.5)
    with pytest.raises(UsageError, match="not a size"):
        sizing.parse_ram("four")
    assert sizing.parse_ram("512MB") == 512 * 1024**2 and sizing.parse_ram("4") == 4 * GB


def test_stats_gives_the_ram_verdict(cli, tmp_path):
    shutil.copytree(DOCS, tmp_path / "docs")
    cli.env["RAGVPS_INDEX_MIN_ROWS"] = "1"
    cli("ingest", str(tmp_path / "docs"))
    s = json.loads(cli("stats", "--json").stdout)
    ram = s["ram"]
    assert ram["fits"] is True and ram["index_bytes"] == s["vector_index"]["bytes"]
    assert ram["verdict"].startswith(f"index {sizing.gib(ram['index_bytes'])} fits in ")
    assert set(ram["others"]) == {"halfvec", "bit"} and ram["others"]["bit"] < ram["index_bytes"]
    assert "halfvec would take" in ram["verdict"] and ram["measured"] == sizing.load_curve()["measured"]
    assert f"RAM verdict: {ram['verdict']}" in " ".join(cli("stats").stdout.split())


def test_stats_without_an_index_says_so(cli, tmp_path):
    shutil.copytree(DOCS, tmp_path / "docs")
    cli("ingest", str(tmp_path / "docs"))
    s = json.loads(cli("stats", "--json").stdout)
    assert s["ram"] == {"fits": None, "verdict": "no HNSW index: every search is exact", "others": {}}
