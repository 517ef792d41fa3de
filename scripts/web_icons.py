"""Render the web app's PNG icons from their SVGs (web/icons/), with the Chromium the e2e tests
use: ``python scripts/web_icons.py``. The PNGs are committed; run this after changing an SVG."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import sync_playwright

ICONS = Path(__file__).resolve().parents[1] / "web" / "icons"
#: (svg, png, size)
RENDERS = [("icon.svg", "icon-192.png", 192), ("icon.svg", "icon-512.png", 512),
           ("maskable.svg", "maskable-512.png", 512), ("badge.svg", "badge.png", 96)]


def main() -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                    args=["--no-sandbox", "--disable-gpu"])
        for svg, png, size in RENDERS:
            page = browser.new_page(viewport={"width": size, "height": size})
            markup = (ICONS / svg).read_text()
            page.set_content(f"<style>html,body{{margin:0;background:transparent}}svg{{"
                             f"display:block;width:{size}px;height:{size}px}}</style>{markup}")
            page.screenshot(path=str(ICONS / png), omit_background=True)
            page.close()
        browser.close()


if __name__ == "__main__":
    main()
