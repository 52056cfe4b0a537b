"""Check the built documentation site in a real browser, at a laptop's width.

Every page of the site (``make docs`` builds it in ``site/``) is opened in headless
Chromium at 1366 x 900 pixels; a script measures, after layout:

- code blocks that are clipped: content wider than the block, which neither scrolls
  nor wraps, or a block that reaches past the page's content column;
- inline code broken mid-token: an identifier wrapped onto two lines between two
  word characters (``SPOPlus(optmo`` / ``del)``).

A screenshot of each page is written beside the report. The exit code is 1 when any
page has a problem, and each problem is printed with its page.

    python tools/site_check.py [--site site] [--out site-check] [--browser /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH, HEIGHT = 1366, 900

#: Run in each page after load: what is clipped or broken, as JSON in a <pre>.
PROBE = r"""
<script>
window.addEventListener("load", () => setTimeout(() => {
  const found = {clipped: [], broken: []};
  const column = document.querySelector(".md-content__inner") || document.body;
  const right = column.getBoundingClientRect().right;
  for (const pre of document.querySelectorAll(".md-typeset pre")) {
    const code = pre.querySelector("code") || pre;
    const style = getComputedStyle(code);
    const scrolls = ["auto", "scroll"].includes(style.overflowX);
    const wraps = !["pre", "nowrap"].includes(style.whiteSpace);
    const text = code.textContent.trim().slice(0, 60);
    if (code.scrollWidth > code.clientWidth + 1 && !scrolls && !wraps) found.clipped.push(text);
    if (pre.getBoundingClientRect().right > right + 1 && !pre.closest(".md-typeset__scrollwrap")) {
      found.clipped.push("past the content column: " + text);
    }
  }
  for (const code of document.querySelectorAll(".md-typeset code")) {
    if (code.closest("pre") || code.getClientRects().length < 2) continue;
    const chars = [];
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.length; i++) {
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const box = range.getBoundingClientRect();
        // a space at a line's end collapses to no width: it still separates the tokens
        if (/\s/.test(node.data[i])) chars.push([" ", null]);
        else if (box.width > 0) chars.push([node.data[i], box.top]);
      }
    }
    for (let i = 1; i < chars.length; i++) {
      const [before, top0] = chars[i - 1], [after, top1] = chars[i];
      if (top0 !== null && top1 !== null && Math.abs(top1 - top0) > 2
          && /\w/.test(before) && /\w/.test(after)) {
        found.broken.push(code.textContent.slice(0, 60));
        break;
      }
    }
  }
  const out = document.createElement("pre");
  out.id = "site-check";
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
}, 200));
</script>
"""

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", f"--window-size={WIDTH},{HEIGHT}",
         "--virtual-time-budget=5000"]


def browser_path(given: str | None) -> str:
    for candidate in (given, "chromium", "chromium-browser", "google-chrome"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    sys.exit("site_check: no Chromium found: install it (Debian: apt-get install chromium) "
             "or pass --browser PATH")


def run(browser: str, profile: Path, *args: str) -> str:
    command = [browser, *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120).stdout


def check_page(browser: str, profile: Path, page: Path, shot: Path) -> dict:
    """The probe's findings on ``page`` (a copy of it carries the probe), and its screenshot."""
    probed = page.with_name(f".probe-{page.name}")
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    try:
        dom = run(browser, profile, "--dump-dom", probed.as_uri())
        run(browser, profile, f"--screenshot={shot}", page.as_uri())
    finally:
        probed.unlink()
    match = re.search(r'<pre id="site-check">(.*?)</pre>', dom, re.S)
    if match is None:
        return {"error": ["the probe did not run (the page did not load)"]}
    return json.loads(html.unescape(match.group(1)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default="site", type=Path)
    parser.add_argument("--out", default="site-check", type=Path)
    parser.add_argument("--browser")
    args = parser.parse_args(argv)
    # the browser opens pages by file:// address, which needs an absolute path
    args.site, args.out = args.site.resolve(), args.out.resolve()
    browser = browser_path(args.browser)
    pages = sorted(p for p in args.site.rglob("index.html")
                   if "assets" not in p.parts and "search" not in p.parts)
    if not pages:
        sys.exit(f"site_check: no pages under {args.site}: run `make docs` first")
    args.out.mkdir(parents=True, exist_ok=True)
    problems = 0
    with tempfile.TemporaryDirectory(prefix="site-check-") as profile:
        for page in pages:
            name = str(page.parent.relative_to(args.site)).replace("/", "_") or "home"
            found = check_page(browser, Path(profile), page, args.out / f"{name}.png")
            for kind, items in found.items():
                for item in items:
                    problems += 1
                    print(f"{page.relative_to(args.site)}: {kind}: {item}")
    print(f"site_check: {len(pages)} pages, {problems} problems; screenshots in {args.out}/")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
