"""The manual holds together: every relative link of README.md and docs/ reaches a file, every
#anchor a heading GitHub makes (or an <a id>), and every page of docs/ is reached from the
README by links (no page a reader cannot find)."""

from __future__ import annotations

import pytest
from helpers import docs


@pytest.mark.parametrize("page", docs.pages(), ids=docs.name)
def test_every_link_reaches_a_file(page):
    broken = [f"{link.where}: {link.target}" for link in docs.links(page) if not link.path.exists()]
    assert not broken, f"links to files that do not exist (a path is relative to the page's folder): {broken}"


@pytest.mark.parametrize("page", docs.pages(), ids=docs.name)
def test_every_anchor_is_a_heading(page):
    broken = []
    for link in docs.links(page):
        if link.anchor and link.path.suffix == ".md" and link.path.is_file():
            have = docs.anchors(link.path)
            if link.anchor not in have:
                broken.append(f"{link.where}: {link.target}")
    assert not broken, (
        f"links to #anchors no heading of their page makes (GitHub's anchor: the heading in lower case, "
        f"punctuation dropped, each space a '-', a repeated heading -1, -2...): {broken}")


def test_every_page_is_reached_from_the_readme():
    reached, todo = set(), [docs.README.resolve()]
    while todo:
        page = todo.pop()
        if page in reached:
            continue
        reached.add(page)
        todo += [link.path.resolve() for link in docs.links(page)
                 if link.path.suffix == ".md" and link.path.is_file()]
    orphans = [docs.name(page) for page in docs.pages() if page.resolve() not in reached]
    assert not orphans, (
        f"pages no chain of links from README.md reaches: {orphans}; link each from the page it belongs "
        f"under (docs/README.md, the manual's index, links every page)")


def test_the_anchors_are_githubs():
    """The slugs the link test relies on, on headings this manual has."""
    assert docs.slug("`genesis status --json`: the schema") == "genesis-status---json-the-schema"
    assert docs.slug("The loop script's flags") == "the-loop-scripts-flags"
    assert docs.slug("28 `UNTRUSTED_COMMAND`") == "28-untrusted_command"
    assert docs.slug("Past one machine: [Temporal](guides/temporal.md)") == "past-one-machine-temporal"


def test_the_reading_finds_links_and_anchors_as_github_does(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n")
    page.write_text("# Setup\n\nSee [the other\npage](other.md#other) and `[not](a-link.md)`,\n"
                    "[out](https://example.com/x.md), [here](#setup-1).\n\n```bash\n[no](code.md)\n# Setup\n```\n\n"
                    "## Setup\n\n[ref]: other.md\n<a id=\"Knob_A\"></a>\n")
    assert [(link.line, link.target) for link in docs.links(page)] == [(3, "other.md#other"), (5, "#setup-1"),
                                                                       (14, "other.md")]
    assert docs.anchors(page) == {"setup", "setup-1", "knob_a"}
    assert docs.links(page)[0].path == tmp_path / "other.md" and docs.links(page)[1].path == page
