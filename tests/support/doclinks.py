"""The docs checks' machinery (tests/unit/test_doc_links.py, test_doc_contract.py): the
repository's markdown and its links and anchors, and the paths, modules and names that docs,
comments and docstrings write in backticks, resolved against the tree."""

from __future__ import annotations

import ast
import builtins
import functools
import io
import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


#: Folders that are not the repository's content (environments, caches, build output).
SKIP = {
    ".git",
    ".venv",
    "build",
    "dist",
    ".pytest_cache",
    ".hypothesis",
    ".tickerwire",
    "bench-results",
    ".ruff_cache",
    ".mypy_cache",
    ".import_linter_cache",
    "node_modules",
    ".tools",
}


LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


#: A path written out in prose that climbs out of its folder (``../x``), linked or not.
CLIMB = re.compile(r"(?<![\w./-])((?:\.\./)+[\w.-][\w./-]*)")


FENCE = re.compile(r"^(```|~~~)")


def markdown_files() -> list[Path]:
    """The repository's markdown: what git tracks or would track (ignored folders such as
    .tools/, with CI's 1.5 GB of node_modules, are never walked); every file outside git."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if listed.returncode == 0:
        candidates = [ROOT / line for line in listed.stdout.splitlines() if (ROOT / line).is_file()]
    else:  # not a git checkout
        candidates = list(ROOT.rglob("*.md"))
    return sorted(
        p
        for p in candidates
        if not any(part in SKIP or part.endswith(".egg-info") for part in p.relative_to(ROOT).parts)
    )


def prose(path: Path) -> str:
    """The file without its fenced code blocks (shell examples are not links)."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"\s*>")


def anchors(path: Path) -> set[str]:
    """The anchors of a markdown file: each heading's slug and each explicit ``<a id="...">``."""
    text = prose(path)
    headings = {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}
    return headings | set(EXPLICIT_ANCHOR.findall(text))


def broken_links(path: Path) -> list[str]:
    problems = []
    for target in LINK.findall(prose(path)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto: ...
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{target}: outside the repository")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    for climb in CLIMB.findall(prose(path)):
        resolved = (path.parent / climb.rstrip(".")).resolve()
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            problems.append(f"{climb}: a path outside the repository")
    return problems


# ------------------------------------------------------------ references written in backticks
#: The product's packages by every name a document gives them: the installed one
#: (``tickerwire.services``) and the repository's folder (``services``).
PACKAGES = {
    "tickerwire.services": ROOT / "services",
    "tickerwire.schemas": ROOT / "schemas",
    "tickerwire.devstack": ROOT / "devstack",
    "services": ROOT / "services",
    "schemas": ROOT / "schemas",
    "devstack": ROOT / "devstack",
    "tickerwire_client": ROOT / "clients" / "python" / "src" / "tickerwire_client",
    "tests": ROOT / "tests",
}


#: The Python whose comments and docstrings are checked.
PYTHON_ROOTS = ("services", "schemas", "devstack", "clients/python/src", "tests")


#: A code span: `x` or ``x`` (markdown, comments, reStructuredText docstrings).
SPAN = re.compile(r"(?<!`)(`{1,2})(?!`)([^`\n]+?)(?<!`)\1(?!`)")


#: A Sphinx cross-reference: :func:`name`, :class:`~pkg.Name`, :mod:`..module`.
ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|const):`~?([^`<>\s]+)`")


DOTTED = re.compile(r"\.{0,3}[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


#: What a file named in prose ends with (a bare ``x.y`` otherwise is a wire name or a field).
FILE_SUFFIXES = {
    ".py",
    ".md",
    ".json",
    ".jsonl",
    ".sql",
    ".yaml",
    ".yml",
    ".toml",
    ".ts",
    ".mjs",
    ".js",
    ".sh",
    ".env",
    ".xml",
    ".html",
    ".png",
    ".service",
    ".timer",
}


#: Files that prose names but the repository does not hold, each with its reason.
NOT_REPOSITORY_FILES = {
    "up.json": "written by tickerwire up into its state folder",
    "kafka/demo.json": "written by tickerwire up into its state folder",
    "position.json": "the TypeScript README's example program writes it",
    "follow.mjs": "the TypeScript README's example program, saved by the reader",
    "tickerwire.env": "an operator's environment file (deploy/README.md)",
    "timeline.png": "written by each chaos run beside its report",
}


@functools.cache
def tracked_files() -> tuple[str, ...]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return tuple(
        line
        for line in listed.stdout.splitlines()
        if (ROOT / line).exists() and not any(part in SKIP or part.endswith(".egg-info") for part in Path(line).parts)
    )


@functools.cache
def top_level() -> frozenset[str]:
    return frozenset(Path(name).parts[0] for name in tracked_files())


def looks_like_path(ref: str) -> bool:
    """A repository path: ``folder/…`` from a top-level folder, ``./x``, or a name with a file
    suffix (``apply.py``, ``base/config.env``). Not URLs, routes (``/posts``), media types
    (``application/json``), placeholders (``<prefix>.posts.v1``) or shell lines."""
    if ref.startswith(("/", "~", "-", "$")) or "://" in ref:
        return False
    if not re.fullmatch(r"(?:\.{1,2}/)?\.?[\w@+-][\w.@+-]*(?:/[\w.@+-]+)*/?", ref):
        return False
    first = ref.split("/")[0]
    if first.startswith(".") and first not in {".", ".."}:
        return first in top_level()  # .ci/run; not .tickerwire/, which `up` makes at run time
    if "/" in ref.rstrip("/"):
        return first in top_level() or first in {".", ".."} or Path(ref).suffix in FILE_SUFFIXES
    return Path(ref).suffix in FILE_SUFFIXES and ref.count(".") == 1


def path_exists(ref: str, source: Path) -> bool:
    """From the root or from the referring file's folder (a sibling: ``apply.py`` in
    ``services/projector/``, ``api.md`` in ``docs/``), nowhere else: a bare name that is the
    tail of some tracked file elsewhere is not a path (``readmodel.py`` is not
    ``tests/support/readmodel.py``)."""
    ref = ref.rstrip("/")
    if ref in NOT_REPOSITORY_FILES:
        return True
    return (ROOT / ref).exists() or (source.parent / ref).exists()


def module_file(dotted: str) -> tuple[Path | None, list[str]]:
    """The file (or package folder) of the longest module prefix of a product name, and the
    names after it; ``(None, [])`` for a name that is not the product's."""
    for root_name, folder in sorted(PACKAGES.items(), key=lambda kv: -len(kv[0])):
        if dotted != root_name and not dotted.startswith(root_name + "."):
            continue
        rest = dotted[len(root_name) + 1 :].split(".") if dotted != root_name else []
        current, used = folder, 0
        for part in rest:
            if (current / part).is_dir():
                current, used = current / part, used + 1
            elif (current / f"{part}.py").is_file():
                current, used = current / f"{part}.py", used + 1
                break
            else:
                break
        if current.is_dir() and (current / "__init__.py").is_file():
            current = current / "__init__.py"
        return current, rest[used:]
    return None, []


def _names_of(node: ast.stmt) -> list[str]:
    """The names one statement binds, other than a definition's (imports and assignments)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [alias.asname or alias.name.split(".")[0] for alias in node.names]
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)]
    return []


def bound_in(body: list[ast.stmt]) -> dict[str, list[ast.stmt]]:
    """The names a block binds (definitions, assignments, imports; also under if/try), each
    with the body of the class it names, if it is one."""
    names: dict[str, list[ast.stmt]] = {}
    for node in body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = node.body
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = []
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            for block in blocks + [handler.body for handler in getattr(node, "handlers", [])]:
                names.update(bound_in(block))
        else:
            names.update({name: [] for name in _names_of(node)})
    return names


@functools.cache
def module_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def name_resolves(path: Path, names: list[str]) -> bool:
    """``names`` (``Name``, ``Class.attr``) are bound in the module at ``path``; a package's
    submodules count as its names. Past a class's own body nothing is followed."""
    if not names:
        return True
    if path.is_dir():
        return (path / f"{names[0]}.py").exists() or (path / names[0]).is_dir()
    scope = bound_in(module_tree(path).body)
    if path.name == "__init__.py" and ((path.parent / f"{names[0]}.py").exists() or (path.parent / names[0]).is_dir()):
        return True
    if names[0] not in scope:
        return False
    if len(names) > 1 and scope[names[0]]:  # a class: its attribute
        members = bound_in(scope[names[0]])
        for node in ast.walk(ast.Module(body=scope[names[0]], type_ignores=[])):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                members[node.attr] = []  # self.x = ...
        return names[1] in members
    return True


@functools.cache
def every_name(path: Path) -> frozenset[str]:
    """Every name a module binds anywhere (functions, classes, attributes, parameters)."""
    names: set[str] = set()
    for node in ast.walk(module_tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
    return frozenset(names)


def dotted_resolves(dotted: str) -> bool:
    path, names = module_file(dotted)
    return path is None or name_resolves(path, names)


def python_module(path: Path) -> str:
    """The dotted name of a Python file of the repository (``services.api.pipeline``)."""
    for root_name, folder in PACKAGES.items():
        if not root_name.startswith("tickerwire.") and path.is_relative_to(folder):
            parts = [root_name, *path.relative_to(folder).with_suffix("").parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return ""


def absolute(ref: str, module: str, is_package: bool) -> str:
    """A relative reference (``.access.gated``, ``..common.http``) from inside ``module``."""
    dots = len(ref) - len(ref.lstrip("."))
    if not dots:
        return ref
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (dots - 1)] if dots > 1 else base
    return ".".join([*base, ref[dots:]])


def broken_reference(ref: str, source: Path, module: str = "", is_package: bool = False) -> bool:
    """Whether one span names something of the repository that does not exist."""
    ref = ref.strip().rstrip(".,:;")
    if looks_like_path(ref):
        return not path_exists(ref, source)
    if DOTTED.fullmatch(ref):
        if ref.startswith(".") and module:
            # Sphinx looks a relative name up from the module, then from its package.
            return not (
                dotted_resolves(absolute(ref, module, is_package))
                or dotted_resolves(absolute("." + ref, module, is_package))
            )
        return not dotted_resolves(ref.removeprefix("tickerwire.") if ref.startswith("tickerwire.s") else ref)
    return False


#: Names written right after their file: `apply.py:name`, `apply.py`, `name`, `apply.py` (`a`,
#: `b`), `apply.py` in `name`; and the one span `apply.py:name`.
NAMED_IN_FILE = re.compile(
    r"`([\w./-]+\.py)(?:`(?::`?|, `| \(`| in `)([A-Za-z_]\w*)`((?:(?:, | and | or )`[A-Za-z_]\w*`)*)|:([A-Za-z_]\w*)`)"
)


def files_at(ref: str, source: Path) -> list[Path]:
    """The Python files a written path may mean (a bare ``apply.py`` may be several)."""
    for candidate in (ROOT / ref, source.parent / ref):
        if candidate.is_file():
            return [candidate]
    return [ROOT / name for name in tracked_files() if ("/" + name).endswith("/" + ref.removeprefix("./"))]


def names_in_files(text: str, source: Path) -> list[str]:
    """Each `file.py`-then-`name` pair whose file exists but binds no such name."""
    broken = []
    for match in NAMED_IN_FILE.finditer(text.replace("``", "`")):
        ref, first, more, joined = match.groups()
        names = [joined] if joined else [first, *re.findall(r"`(\w+)`", more or "")]
        files = [f for f in files_at(ref, source) if f.suffix == ".py"]
        if joined and not files:  # `gone.py:name`: no other span names the file
            broken.append(f"{ref}:{joined}")
        broken += [f"{ref}: {name}" for name in names if files and not any(name in every_name(f) for f in files)]
    return broken


def prose_lines(path: Path) -> list[str]:
    """The file's lines, those of fenced code blocks (and the fences) blanked, so numbers hold."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return out


def markdown_references(path: Path) -> list[tuple[int, str]]:
    return [
        (number, match.group(2)) for number, line in enumerate(prose_lines(path), 1) for match in SPAN.finditer(line)
    ]


@functools.cache
def python_texts(path: Path) -> tuple[tuple[int, str], ...]:
    """Each line of the file's comments and docstrings, with its line number."""
    source = path.read_text(encoding="utf-8")
    lines = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    scopes: list[ast.AST] = [module_tree(path)]
    while scopes:  # statements only: a docstring is never inside an expression
        node = scopes.pop()
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        first = body[0] if body else None
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            lines += [(first.lineno + offset, line) for offset, line in enumerate(first.value.value.splitlines())]
        for block in ("body", "orelse", "finalbody", "handlers"):
            scopes += [child for child in getattr(node, block, []) if isinstance(child, ast.AST)]
    return tuple(sorted(lines))


def python_references(path: Path) -> list[tuple[int, str, bool]]:
    """``(line, reference, is_role)``: a role's target resolves even undotted; a plain span only
    when it is a path or a product module."""
    refs: list[tuple[int, str, bool]] = []
    for number, text in python_texts(path):
        roles = list(ROLE.finditer(text))
        refs += [(number, match.group(1), True) for match in roles]
        rest = ROLE.sub(" ", text)
        refs += [(number, match.group(2), False) for match in SPAN.finditer(rest)]
    return refs


def python_files() -> list[Path]:
    return sorted(
        ROOT / name
        for name in tracked_files()
        if name.endswith(".py") and name.startswith(PYTHON_ROOTS) and ROOT / name != Path(__file__)
    )


def broken_references() -> list[str]:
    """Every broken reference of the repository, as ``file:line: reference``."""
    problems = []
    for path in markdown_files():
        for number, ref in markdown_references(path):
            if broken_reference(ref, path):
                problems.append(f"{path.relative_to(ROOT)}:{number}: {ref}")
        for number, line in enumerate(prose_lines(path), 1):
            problems += [f"{path.relative_to(ROOT)}:{number}: {pair}" for pair in names_in_files(line, path)]
    for path in python_files():
        module = python_module(path)
        is_package = path.name == "__init__.py"
        for number, ref, is_role in python_references(path):
            target = ref.strip()
            if is_role and not target.startswith(".") and "." not in target and module:
                # An undotted role names something of this module: a method from its class's
                # docstring, an attribute, a parameter.
                broken = not hasattr(builtins, target) and target not in every_name(path)
            else:
                broken = broken_reference(target, path, module, is_package)
            if broken:
                problems.append(f"{path.relative_to(ROOT)}:{number}: {ref}")
        for number, text in python_texts(path):
            problems += [f"{path.relative_to(ROOT)}:{number}: {pair}" for pair in names_in_files(text, path)]
    return sorted(set(problems), key=lambda line: (line.split(":")[0], int(line.split(":")[1]), line))
