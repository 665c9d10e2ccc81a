"""Does `dvc plots show` render offline? The page DVC writes, opened in headless Chromium with no network.

    python bench/plots_offline.py                   # in this repository (after a run, or `dvc exp apply NAME`)
    python bench/plots_offline.py --repo /tmp/run --out /tmp/plots-check

Runs `dvc plots show -o OUT/plots` (and `dvc metrics show`) in the repository, counting "failed to load" lines;
then opens `OUT/plots/index.html` in Debian's headless `chromium` (fresh profile, no sandbox, no GPU, background
networking off, every host name resolving to nothing) twice: once for a screenshot (`--screenshot`, 1400x3000)
and once for `--dump-dom` of a copy of the page with a small inline script that records, after the load event,
each `<img>`'s `naturalWidth` x `naturalHeight` and every resource the page fetched. It prints one JSON object:
images declared and loaded, http(s) URLs in the page's source and among the fetched resources, the share of
non-white pixels in the screenshot, its path, and the failed-load lines. Exit 1 when a check fails (an image that
did not load, a network URL, a failed-load line, a blank page).

Installs nothing: when `chromium` is missing it says `apt-get install -y chromium`.
"""

from __future__ import annotations

import argparse
import html.parser
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--host-resolver-rules=MAP * ~NOTFOUND", "--hide-scrollbars"]
WINDOW = "1400,3000"
URL = re.compile(r"https?://[^\s\"'<>)]+")
FAILED = re.compile(r"failed to load", re.IGNORECASE)
# Appended to a copy of the page: after load (images decoded), write what the browser saw into the DOM.
CHECK_SCRIPT = """
<script>
window.addEventListener("load", () => {
  const imgs = Array.from(document.images).map(i => ({src: i.getAttribute("src"), complete: i.complete,
                                                    width: i.naturalWidth, height: i.naturalHeight}));
  const fetched = performance.getEntriesByType("resource").map(e => e.name);
  const pre = document.createElement("pre");
  pre.id = "offline-check";
  pre.textContent = JSON.stringify({imgs, fetched});
  document.body.appendChild(pre);
});
</script>
"""


class _Tags(html.parser.HTMLParser):
    """``<img src>`` values and every attribute value that is an http(s) URL."""

    def __init__(self) -> None:
        super().__init__()
        self.img_src: list[str] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if tag == "img":
            self.img_src.append(values.get("src") or "")
        if tag == "script":
            self.scripts.append(values.get("src") or "(inline)")


def dvc(args: list[str], repo: Path) -> tuple[int, str]:
    """Exit status and stdout+stderr of ``dvc ARGS`` in ``repo``."""
    proc = subprocess.run(["dvc", *args], cwd=repo, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def chromium(binary: str, args: list[str], profile: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run headless Chromium with the fixed flags and a fresh profile directory."""
    return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=timeout)


def non_white_share(png: Path) -> float:
    """Share of the screenshot's pixels that are not (near) white: 0.0 is a blank page."""
    from PIL import Image

    gray = Image.open(png).convert("L")
    hist = gray.histogram()
    return round(sum(hist[:250]) / max(1, sum(hist)), 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="repository to run dvc in (default: cwd)")
    parser.add_argument("--out", type=Path, help="folder for the page, the screenshot and the DOM (default: temp)")
    args = parser.parse_args()
    binary = shutil.which("chromium")
    if binary is None:
        print("error: chromium not found (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 1
    out = (args.out or Path(tempfile.mkdtemp(prefix="plots-offline-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    repo = args.repo.resolve()

    rc_plots, plots_log = dvc(["plots", "show", "-o", str(out / "plots")], repo)
    rc_metrics, metrics_log = dvc(["metrics", "show"], repo)
    plots_failed = [line.strip() for line in plots_log.splitlines() if FAILED.search(line)]
    metrics_failed = [line.strip() for line in metrics_log.splitlines() if FAILED.search(line)]
    page = out / "plots" / "index.html"
    if rc_plots != 0 or not page.exists():
        print(json.dumps({"dvc_plots_show_rc": rc_plots, "output": plots_log[-2000:]}, indent=1))
        return 1
    source = page.read_text(encoding="utf-8")
    tags = _Tags()
    tags.feed(source)

    shot = out / "screenshot.png"
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        chromium(binary, [f"--screenshot={shot}", f"--window-size={WINDOW}", page.as_uri()], Path(profile))
    check_page = page.with_name("index-check.html")  # beside the page, so its relative image links resolve
    check_page.write_text(source.replace("</body>", CHECK_SCRIPT + "</body>"), encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        dom = chromium(binary, ["--dump-dom", "--virtual-time-budget=10000", check_page.as_uri()], Path(profile))
    check_page.unlink()
    (out / "dom.html").write_text(dom.stdout, encoding="utf-8")
    found = re.search(r'<pre id="offline-check">(.*?)</pre>', dom.stdout, re.DOTALL)
    seen = json.loads(html.unescape(found.group(1))) if found else {"imgs": [], "fetched": []}
    loaded = [i for i in seen["imgs"] if i["complete"] and i["width"] > 0]
    network = sorted({u for u in seen["fetched"] if not u.startswith("file:")})

    report = {
        "repo": str(repo),
        "page": str(page),
        "dvc_plots_show_rc": rc_plots,
        "dvc_metrics_show_rc": rc_metrics,
        "plots_failed_to_load": plots_failed,
        "metrics_failed_to_load": metrics_failed,
        "img_elements": len(tags.img_src),
        "img_loaded": len(loaded),
        "img_sizes": {i["src"]: f"{i['width']}x{i['height']}" for i in seen["imgs"]},
        "scripts": tags.scripts,
        "http_urls_in_page": sorted(set(URL.findall(source))),
        "network_resources_fetched": network,
        "screenshot": str(shot) if shot.exists() else None,
        "screenshot_non_white_share": non_white_share(shot) if shot.exists() else None,
        "dom_check_found": bool(found),
    }
    print(json.dumps(report, indent=1))
    ok = (found and tags.img_src and len(loaded) == len(tags.img_src) == len(seen["imgs"]) and not plots_failed
          and not metrics_failed
          and not report["http_urls_in_page"] and not network and (report["screenshot_non_white_share"] or 0) > 0.01)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
