"""tools/coverage_page.py: the coverage page's totals, per-package rows and fallen files
come from the runs' coverage.py JSON reports and pytest logs."""

import json
from pathlib import Path

import pytest
from testkit import load_script

ROOT = Path(__file__).resolve().parents[1]
coverage_page = load_script(ROOT / "tools" / "coverage_page.py", "coverage_page")


def report(path: Path, files: dict[str, tuple[int, int]]) -> Path:
    """A coverage.py JSON report with ``files``: path -> (covered, statements)."""
    path.write_text(json.dumps({
        "meta": {"version": "7.17.5", "timestamp": "2026-11-29T02:00:00"},
        "files": {name: {"summary": {"covered_lines": covered, "num_statements": statements}}
                  for name, (covered, statements) in files.items()},
        "totals": {}}))
    return path


def log(path: Path, line: str) -> Path:
    path.write_text(f"....\n-- Docs: https://docs.pytest.org\n{line}\n")
    return path


@pytest.fixture
def page(tmp_path):
    before = report(tmp_path / "before.json", {"combolayer/a.py": (8, 10),
                                               "combolayer/b/c.py": (5, 10),
                                               "combolayer/gone.py": (1, 2)})
    now = report(tmp_path / "now.json", {"combolayer/a.py": (6, 10),
                                         "combolayer/b/c.py": (10, 10),
                                         "combolayer/b/new.py": (0, 5)})
    out = tmp_path / "coverage.md"
    coverage_page.main([
        "--run", "before", "HEAD", str(before),
        str(log(tmp_path / "before.log", "===== 9 passed, 1 skipped in 12.50s =====")),
        "--run", "now", "HEAD", str(now),
        str(log(tmp_path / "now.log", "1 failed, 8 passed in 3.00s (0:00:03)")),  # -q: no rule
        "--note", "before", "a sentence on the first run", "--out", str(out)])
    return out.read_text()


def table_row(page: str, first_cell: str) -> list[str]:
    rows = [line for line in page.splitlines() if line.startswith(f"| {first_cell} |")]
    assert len(rows) == 1, f"expected one row starting {first_cell!r}, got {rows}"
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def test_each_runs_total_and_outcome(page):
    before, now = table_row(page, "before"), table_row(page, "now")
    assert before[2:] == ["9 passed, 1 skipped in 12.50s", "14 / 22", "**63.6 %**"]
    assert now[2:] == ["1 failed, 8 passed in 3.00s (0:00:03)", "16 / 25", "**64.0 %**"]
    assert "before: a sentence on the first run" in page


def test_packages_are_folders_with_their_change(page):
    assert table_row(page, "`combolayer`") == [
        "`combolayer`", "9 / 12", "6 / 10", "75.0 %", "60.0 %", "-15.0"]
    assert table_row(page, "`combolayer.b`") == [
        "`combolayer.b`", "5 / 10", "10 / 15", "50.0 %", "66.7 %", "+16.7"]
    assert table_row(page, "**total**")[1:3] == ["14 / 22", "16 / 25"]


def test_only_the_files_that_fell_are_listed(page):
    fallen = page.split("## Files whose coverage fell from before to now", 1)[1]
    assert table_row(fallen, "`combolayer/a.py`") == [
        "`combolayer/a.py`", "8 / 10", "6 / 10", "80.0 %", "60.0 %", "-20.0"]
    assert "`combolayer/b/c.py` |" not in fallen
    assert "Files only in before: `combolayer/gone.py`." in page
    assert "Files only in now: `combolayer/b/new.py`." in page


def test_a_report_that_is_not_coverage_json_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"totals": {}}))
    with pytest.raises(ValueError, match=r"expected the keys 'meta' and 'files', got \['totals'\]"):
        coverage_page.read_run("x", "HEAD", bad, log(tmp_path / "x.log", "= 1 passed in 1s ="))


def test_an_unfinished_log_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no closing summary line"):
        coverage_page.outcome_line("bringing up nodes...\n.....")
