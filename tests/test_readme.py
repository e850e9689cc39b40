"""The documentation's promises: README.md and the pages under docs/.

README's test command is what CI runs; every documented command exists and every command is documented; README
stays short; the names the pages give to Python objects exist; every package has an API page; the CLI reference
and the registry's lists are generated from the code; the docs links of the analysis registry have their anchors.
"""

import importlib
import re
import unicodedata
from pathlib import Path

import click
import pytest

from landscape.analyses.registry import analyses
from landscape.cli import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
PAGES = {path.relative_to(DOCS).as_posix(): path.read_text() for path in sorted(DOCS.rglob("*.md"))}
#: README and every docs page: name -> text
ALL = {"README.md": README, **{f"docs/{name}": text for name, text in PAGES.items()}}
README_LIMIT = 10_000


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _setup_commands(text: str = README) -> list[str]:
    return re.findall(r"```bash\n(.*?)\n```", _section(text, "Set-up"), flags=re.S)


def _fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def _inline_code(text: str) -> list[str]:
    """The inline code spans of ``text`` outside its fenced blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.findall(r"`([^`\n]+)`", prose)


def test_exactly_two_setup_commands():
    assert len(_setup_commands()) == 2


def test_ci_runs_the_readme_test_command():
    test_command = _setup_commands()[1].strip()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines


def test_the_install_page_gives_the_readme_setup_commands():
    assert _setup_commands(PAGES["install.md"]) == _setup_commands()


def test_ci_builds_the_docs_strictly():
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert 'pip install -e ".[docs]" && mkdocs build --strict' in ci_lines


def test_readme_is_short():
    assert len(README) <= README_LIMIT, len(README)


def test_every_documented_subcommand_is_registered():
    documented = set()
    for text in ALL.values():
        documented |= set(re.findall(r"^#{2,3} `landscape (\w+)`", text, flags=re.M))
    assert documented <= set(COMMANDS), documented - set(COMMANDS)
    assert set(COMMANDS) <= documented, set(COMMANDS) - documented


def test_every_command_mentioned_exists():
    """Every ``landscape WORD`` in a bash block or an inline code span names a command."""
    mentioned: dict[str, set[str]] = {}
    for name, text in ALL.items():
        lines = [line.split(" #", 1)[0] for block in _fenced(text, "bash") for line in block.splitlines()]
        spans = [span for span in _inline_code(text) if span.startswith(("landscape ", "torchrun "))]
        for line in lines + spans:
            for word in re.findall(r"(?:^|[\s;&|(=]|-m )landscape ([a-z][\w-]*)", line):
                mentioned.setdefault(word, set()).add(name)
    unknown = {word: sorted(where) for word, where in mentioned.items() if word not in COMMANDS}
    assert not unknown, unknown
    assert set(COMMANDS) <= set(mentioned), set(COMMANDS) - set(mentioned)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for part in parts[i:]:
                obj = getattr(obj, part)
        except AttributeError:
            return False
        return True
    return False


def test_python_names_in_the_docs_exist():
    """Every ``landscape.x.y`` the pages name in code, and every name their Python blocks import, exists."""
    missing = set()
    for name, text in ALL.items():
        for span in _inline_code(text) + _fenced(text, "python"):
            for dotted in re.findall(r"\b(landscape(?:\.\w+)+)", span):
                if not _resolves(dotted):
                    missing.add((name, dotted))
        for block in _fenced(text, "python"):
            for module, names in re.findall(r"^from (landscape[\w.]*) import ([\w, ]+)$", block, flags=re.M):
                for imported in names.split(","):
                    if not _resolves(f"{module}.{imported.strip()}"):
                        missing.add((name, f"{module}.{imported.strip()}"))
    assert not missing, sorted(missing)


def test_every_package_has_an_api_page():
    api = "\n".join(text for name, text in PAGES.items() if name.startswith("api/"))
    documented = set(re.findall(r"^::: (landscape\.\w+)$", api, flags=re.M))
    packages = {f"landscape.{p.parent.name}" for p in (ROOT / "landscape").glob("*/__init__.py")} - {"landscape.cli"}
    modules = {f"landscape.{p.stem}" for p in (ROOT / "landscape").glob("*.py") if not p.stem.startswith("_")}
    assert packages | modules <= documented, (packages | modules) - documented


def test_every_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text()
    nav = set(re.findall(r"^\s+- (?:[^:\n]+: )?(\S+\.md)$", config, flags=re.M))
    assert set(PAGES) == nav, set(PAGES) ^ nav


def test_the_cli_reference_is_generated_from_the_root_group():
    """docs/cli.md documents the lazy root group, whose commands mkdocs-click lists as click does."""
    directive = re.search(r"^::: mkdocs-click\n((?:    :.*\n)+)", PAGES["cli.md"], flags=re.M)
    assert directive is not None
    options = dict(re.findall(r":(\w+): (\S+)", directive.group(1)))
    assert (options["module"], options["command"], options["prog_name"]) == ("landscape.cli", "cli", "landscape")
    ctx = click.Context(cli, info_name="landscape")
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name


def test_the_cli_reference_shows_every_option():
    """What mkdocs-click writes for the root group holds every command's every option (needs the docs extra)."""
    docs = pytest.importorskip("mkdocs_click._docs")
    text = "\n".join(docs.make_command_docs("landscape", cli, depth=1, style="plain"))
    ctx = click.Context(cli, info_name="landscape")
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        section = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[0] in section, (name, param.opts[0])


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading (what the site's toc slugify, pymdownx.slugs, also makes)."""
    text = unicodedata.normalize("NFC", heading.replace("`", "")).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(text: str) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+?)\s*$", text, flags=re.M)}


def test_the_registry_docs_links_have_their_anchors():
    for analysis in analyses():
        page, _, anchor = analysis.docs.partition("#")
        assert page in PAGES, (analysis.kind, analysis.docs)
        assert anchor in _anchors(PAGES[page]), (analysis.kind, analysis.docs)


def test_the_result_kinds_come_from_the_registry():
    index = PAGES["index.md"]
    assert "<!-- analyses -->" in index
    assert not re.search(r"\b(four|five|six|seven) result kinds\b", index)
    assert "<!-- analyses-python -->" in PAGES["api/index.md"]


def test_links_between_docs_pages_resolve():
    """Relative links of README and the pages reach a file; links into docs pages reach an anchor."""
    generated = {"landscape"} | {f"landscape-{command}" for command in COMMANDS}  # cli.md's, by mkdocs-click
    broken = []
    for name, text in ALL.items():
        base = (ROOT / name).parent
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (base / path).resolve() if path else ROOT / name
            known = dest.exists() and (
                not anchor or dest.suffix != ".md" or anchor in _anchors(dest.read_text()) | generated
            )
            if not known:
                broken.append((name, target))
    assert not broken, broken


@pytest.mark.parametrize("name", ["README.md", "docs/index.md", "docs/api/index.md"])
def test_the_front_door_leads_with_landscape_surface_on_a_module(name):
    """The first Python block of README, the docs home and the API overview: ``import landscape``, an nn.Module,
    ``landscape.surface(model, loader, ...)``, a number and a figure from the result; no runner, no options class."""
    text = ALL[name]
    first = _fenced(text, "python")[0]
    assert re.search(r"^import landscape$", first, flags=re.M), first
    assert re.search(r"^model = nn\.\w+\(", first, flags=re.M), "the model is an nn.Module built in the block"
    assert "landscape.surface(model, loader" in first
    assert ".summary()" in first and ".plot()" in first
    assert "run_" not in first and "Options" not in first
    assert "landscape.surface" in text.split("```python", 1)[0] + first  # what the docs' search finds


def test_the_readme_python_block_runs_as_written(tmp_path, monkeypatch):
    """README's first Python block, executed as it stands: a 21 x 21 surface of its model, a summary, a figure."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(_fenced(README, "python")[0], "README.md", "exec"), namespace)
    surface = namespace["s"]
    assert surface.kind == "surface" and surface["loss"].shape == (21, 21)
    assert (tmp_path / "surface.png").stat().st_size > 0
    import torch

    model, loader = namespace["model"], namespace["loader"]
    with torch.no_grad():  # the centre is the model itself: its mean cross-entropy (BatchNorm in eval mode)
        nll = sum(float(torch.nn.functional.cross_entropy(model.eval()(x), y, reduction="sum")) for x, y in loader)
    assert surface["loss"][10, 10] == pytest.approx(nll / 256, rel=1e-5)


def test_the_site_shows_code_whole_and_breaks_names_between_their_parts():
    """The stylesheet widens the pages and keeps names whole; the hook marks where a name in inline code breaks."""
    import importlib.util

    config = (ROOT / "mkdocs.yml").read_text()
    sheet = re.search(r"^extra_css:\n  - (\S+)$", config, flags=re.M).group(1)
    css = (DOCS / sheet).read_text()
    assert "word-break: normal" in css and re.search(r"\.md-grid \{\s*max-width: 100rem", css)
    assert re.search(r"^\s+line_length: 100$", config, flags=re.M)  # signatures formatted to that width
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    html = (
        '<p><code>landscape.analyses.surface.run</code>, <a href="x"><code>out/s.h5</code></a>, <code>3.5</code></p>'
        '<pre><span></span><code>import landscape.core\n</code></pre><code class="highlight"><span>a.b</span></code>'
    )
    marked = hooks.on_page_content(html)
    assert "<code>landscape.<wbr>analyses.<wbr>surface.<wbr>run</code>" in marked
    assert "<code>out/<wbr>s.<wbr>h5</code>" in marked and "<code>3.5</code>" in marked  # not inside a number
    assert "<code>import landscape.core\n</code>" in marked and "<span>a.b</span>" in marked  # code blocks as they are
    assert marked.replace("<wbr>", "") == html
