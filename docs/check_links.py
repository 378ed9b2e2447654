"""Check the built site's internal links: every relative href and src in build/site/ must name
a file of the site, and every #anchor an id on that page.

MkDocs in strict mode already checks the links written in the Markdown pages; this also covers
what it does not see: links the API reference (mkdocstrings, autorefs) and the rendered
notebooks generate. External links (http:, https:, mailto:) are not followed.

    python docs/check_links.py [SITE_DIR]      # exit 1 listing every broken link
"""
from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (name == "name" and tag == "a"):
                self.ids.add(value)
            elif name in ("href", "src") and tag in ("a", "img", "link", "script"):
                self.links.append(value)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(errors="replace"))
    return page


def _target(site: Path, page: Path, url: str) -> Path:
    path = unquote(url)
    base = site if path.startswith("/") else page.parent
    target = (base / path.lstrip("/")).resolve()
    return target / "index.html" if target.is_dir() else target


def broken_links(site: Path) -> list[str]:
    """Every broken internal link of the site, as 'page: link (why)'."""
    site = site.resolve()
    pages = {p: _parse(p) for p in site.rglob("*.html")}
    problems = []
    for page, parsed in pages.items():
        for url in parsed.links:
            parts = urlsplit(url)
            if parts.scheme or parts.netloc or url.startswith(("mailto:", "javascript:", "data:")):
                continue
            target = page if not parts.path else _target(site, page, parts.path)
            where = f"{page.relative_to(site)}: {url}"
            if not target.exists():
                problems.append(f"{where} (no such file)")
                continue
            anchor = unquote(parts.fragment)
            if anchor and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if anchor not in ids:
                    problems.append(f"{where} (no id '{anchor}' on {target.relative_to(site)})")
    return problems


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    site = Path(argv[0]) if argv else ROOT / "build" / "site"
    if not site.is_dir():
        print(f"{site}: no built site (run `make docs`)", file=sys.stderr)
        return 2
    problems = broken_links(site)
    for p in problems:
        print(p)
    print(f"{len(problems)} broken internal link(s) in {site}", file=sys.stderr if problems else sys.stdout)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
