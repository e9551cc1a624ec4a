#!/usr/bin/python3
"""Checks that Loom's C++ namespaces follow its folders (docs/architecture.md).

Run from the repository root, with Debian's Python (standard library only):

  /usr/bin/python3 scripts/check_namespaces.py                # self-check, then the tree
  /usr/bin/python3 scripts/check_namespaces.py --self-check   # planted cases only

The rule: a C++ file (.h .cc .cu .cuh ...) in folder a/b/c declares its code in
namespace loom::a::b::c, and may nest further namespaces inside it (internal,
testing, detail, any name) and anonymous ones. Exceptions:
  - base/ is the project's root vocabulary: base/x maps to loom::x, so base/
    itself is loom and base/testing is loom::testing;
  - proto/a/b holds generated code in its package a::b (proto/loom/v1: loom::v1);
  - third_party/ is not checked;
  - a folder named by a C++ keyword takes a trailing underscore
    (deploy/operator: loom::deploy::operator_);
  - a block holding only forward declarations (`class X;`) may name any
    namespace under loom (it declares another folder's type);
  - a namespace outside loom is allowed only for the foreign libraries listed
    in FOREIGN (specializations such as httplib's, forward declarations such
    as gloo's).

What is checked is the full name of each named namespace block with
declarations in it: in `namespace loom { namespace kernels::cpu { ... } }` the
outer block holds nothing but the inner one, so loom::kernels::cpu is what
counts. A nested namespace whose full name is another folder's namespace (code
in kernels/ declaring loom::kernels::cpu::X) is a violation: every folder owns
the names under its namespace except those of its subfolders.

It prints one line per case, `PASS: ...` or `FAIL: ...` (the offending
declarations indented below a FAIL): the self-check's planted cases first, then
one case per source folder. Exit status 0 when every case passed, 1 when one
failed, 2 on bad usage or unreadable input.
"""
import argparse
import os
import re
import sys
import tempfile

SOURCE_EXTENSIONS = (".cc", ".h", ".cu", ".cuh", ".cpp", ".hpp", ".inc")
SKIPPED_TOPS = ("third_party",)
# Foreign libraries whose namespaces Loom's code may open.
FOREIGN = ("std", "absl", "gloo", "httplib", "grpc", "google", "nlohmann", "YAML", "testing", "benchmark")
CXX_KEYWORDS = set("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t
class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
decltype default delete do double dynamic_cast else enum explicit export extern false float for friend
goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private
protected public register reinterpret_cast requires return short signed sizeof static static_assert
static_cast struct switch template this thread_local throw true try typedef typeid typename union
unsigned using virtual void volatile wchar_t while xor xor_eq
""".split())


class InputError(Exception):
    """Unreadable or malformed input: exit 2 with the message."""


def folder_namespace(folder):
    """The namespace a folder's code belongs to, e.g. 'loom::kernels::cpu'."""
    parts = folder.split("/")
    if parts[0] == "proto":
        return "::".join(parts[1:])
    if parts[0] == "base":
        parts = parts[1:]
    names = ["loom"]
    for p in parts:
        p = re.sub(r"[^A-Za-z0-9_]", "_", p)
        names.append(p + "_" if p in CXX_KEYWORDS else p)
    return "::".join(names)


# --- reading namespace blocks --------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^(\s]{0,16})\(.*?\)(?P=delim)")
  | (?P<string>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*")
  | (?P<number>\.?\d(?:[eEpP][+-]|[\w.']|)*)
  | (?P<char>(?:u8|u|U|L)?'(?:\\.|[^'\\\n])+')
  | (?P<id>[A-Za-z_]\w*)
  | (?P<scope>::)
  | (?P<op>.)
""", re.S | re.X)


def tokens(text):
    """(kind, text, line) for identifiers, `::` and punctuation; comments, literals and
    preprocessor lines dropped."""
    # preprocessor lines (with their continuations) become blank lines
    text = re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*",
                  lambda m: "\n" * m.group(0).count("\n"), text)
    line = 1
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup if m.lastgroup != "delim" else "raw"
        s = m.group(0)
        if kind in ("id", "scope", "op"):
            yield kind, s, line
        line += s.count("\n")


class Block:
    def __init__(self, path, line, anonymous, parent):
        self.path = path  # full name, '' for the global scope
        self.line = line
        self.anonymous = anonymous
        self.parent = parent
        self.content = False  # declarations directly inside (an anonymous namespace counts)
        self.statements = []  # direct statements, as lists of token texts


def namespace_blocks(text):
    """Every named namespace block with declarations directly inside, as (full name, line, forward_only)."""
    stack = [("ns", Block("", 0, False, None))]  # (kind, Block or None)
    stmt = []
    blocks = []
    for kind, tok, line in tokens(text):
        top_kind, top = stack[-1]
        if tok == "{":
            head = [t for t, _ in stmt]
            if top_kind == "ns" and head[:1] in (["namespace"], ["inline"]) and "namespace" in head[:2] and \
                    "=" not in head:
                names = [t for t in head[head.index("namespace") + 1:] if t not in ("::", "inline")]
                anonymous = not names
                path = "::".join([top.path] + names if top.path else names)
                b = Block(path, stmt[0][1], anonymous, top)
                if anonymous:
                    b.path = top.path
                    top.content = True
                blocks.append(b)
                stack.append(("ns", b))
            else:
                if top_kind == "ns" and stmt:
                    top.content = True
                    top.statements.append(head + ["{"])
                stack.append(("extern" if head[:1] == ["extern"] and top_kind == "ns" else "other", top))
            stmt = []
        elif tok == "}":
            if len(stack) == 1:
                raise InputError(f"line {line}: '}}' without a matching '{{'")
            k, _ = stack.pop()
            stmt = []
            if k == "extern":  # extern "C" { ... } is transparent
                continue
        elif tok == ";" and top_kind in ("ns", "extern"):
            if stmt:
                top.content = True
                top.statements.append([t for t, _ in stmt] + [";"])
            stmt = []
        elif top_kind in ("ns", "extern"):
            stmt.append((tok, line))
    if len(stack) != 1:
        raise InputError(f"{len(stack) - 1} unclosed '{{' at the end of the file")
    return [(b.path, b.line, all(is_forward_declaration(s) for s in b.statements))
            for b in blocks if not b.anonymous and b.content]


def is_forward_declaration(statement):
    s = list(statement)
    if s[:1] == ["template"] and "<" in s:
        depth = 0
        for i, t in enumerate(s):
            depth += (t == "<") - (t == ">")
            if depth == 0 and i > 0:
                s = s[i + 1:]
                break
    if s[:1] == ["enum"]:
        s = s[1:] if s[1:2] not in (["class"], ["struct"]) else s[2:]
        if ":" in s:
            s = s[:s.index(":")] + [";"]
    elif s[:1] and s[0] in ("class", "struct", "union"):
        s = s[1:]
    else:
        return False
    return len(s) == 2 and re.fullmatch(r"[A-Za-z_]\w*", s[0]) is not None and s[1] == ";"


# --- the check -------------------------------------------------------------------


def source_files(root):
    for top in sorted(os.listdir(root)):
        if top.startswith((".", "bazel-")) or top in SKIPPED_TOPS or not os.path.isdir(os.path.join(root, top)):
            continue
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(x for x in dirs if not x.startswith((".", "bazel-")))
            for f in sorted(files):
                if f.endswith(SOURCE_EXTENSIONS):
                    yield os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")


def under(path, base):
    return path == base or path.startswith(base + "::")


def owner(path, namespaces):
    """The folder whose namespace is the longest prefix of path, or None."""
    best = None
    for folder, ns in namespaces.items():
        if under(path, ns) and (best is None or len(ns) > len(namespaces[best])):
            best = folder
    return best


def check_tree(root):
    """{folder: (files, [problems])} for every folder holding C++ sources."""
    by_folder = {}
    for path in source_files(root):
        by_folder.setdefault(os.path.dirname(path), []).append(path)
    namespaces = {folder: folder_namespace(folder) for folder in by_folder}
    out = {}
    for folder, paths in sorted(by_folder.items()):
        problems = []
        mine = namespaces[folder]
        for path in paths:
            try:
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    blocks = namespace_blocks(f.read())
            except InputError as e:
                problems.append(f"{path}: cannot read its namespaces: {e}")
                continue
            for ns, line, forward_only in blocks:
                where = f"{path}:{line}: namespace {ns}"
                if not under(ns, "loom"):
                    if ns.split("::")[0] not in FOREIGN:
                        problems.append(f"{where} (expected {mine}; a foreign namespace must be one of "
                                        f"FOREIGN in scripts/check_namespaces.py)")
                elif forward_only:
                    continue
                elif not under(ns, mine):
                    problems.append(f"{where} (expected {mine})")
                elif owner(ns, namespaces) != folder:
                    problems.append(f"{where} (that is {owner(ns, namespaces)}/'s namespace; "
                                    f"expected {mine} or a detail namespace inside it)")
        out[folder] = (len(paths), problems)
    return out


# --- cases -------------------------------------------------------------------------


class Report:
    def __init__(self):
        self.failed = 0

    def case(self, name, problems, summary=""):
        if problems:
            self.failed += 1
            print(f"FAIL: {name}: {len(problems)} found")
            for p in problems:
                print(f"    {p}")
        else:
            print(f"PASS: {name}" + (f" ({summary})" if summary else ""))
        sys.stdout.flush()


PLANTED = {
    # a folder's own namespace, a nested detail namespace, the anonymous one
    "kernels/cpu/matmul.cc": "namespace loom::kernels::cpu {\nnamespace internal { int a; }\n"
                             "namespace { int b; }\nint c;\n}  // namespace loom::kernels::cpu\n",
    # the old namespace: must fail
    "kernels/cpu/old.cc": '#include "x.h"\n// namespace loom::kernels::cpu { in a comment\n'
                          "namespace loom::cpu {\nint d;\n}  // namespace loom::cpu\n",
    # the nested form, with a wrapper that holds nothing itself
    "kernels/cpu/nn/optim.cc": "namespace loom {\nnamespace kernels::cpu::nn {\nint e;\n}\n}\n",
    # a subfolder's namespace declared by its parent folder: must fail
    "kernels/registry.cc": "namespace loom::kernels {\nint f;\n}\nnamespace loom::kernels::cpu {\nint g;\n}\n",
    # forward declarations of another folder's type; a foreign library's namespace
    "compiler/comm/communicator.h": "namespace loom::collectives {\nclass ProcessGroup;\n}\n"
                                    "namespace gloo { class Context; }\n"
                                    "namespace loom::compiler::comm {\nstruct Communicator {};\n}\n",
    # a made-up top-level namespace: must fail
    "compiler/comm/stray.cc": "namespace comm {\nint h;\n}\n",
    # base is loom; base/testing is loom::testing; strings and macros are not code
    "base/tensor.h": 'namespace loom {\nconst char* k = "namespace loom::compiler {";\n'
                     "#define NS namespace loom::kernels {\n}\n",
    "base/testing/full_sweep.h": "namespace loom::testing {\nbool FullSweep();\n}\n",
    # a keyword folder; a file with only an anonymous namespace
    "deploy/operator/reconciler.cc": "namespace loom::deploy::operator_ {\nint i;\n}\n",
    "tests/cli/main.cc": "namespace {\nint j;\n}\nint main() { return 0; }\n",
    # a forward declaration beside other declarations does not make a block forward-only
    "runtime/train/trainer.h": "namespace loom::collectives {\nclass ProcessGroup;\nint k;\n}\n"
                               "namespace loom::runtime::train {\nint l;\n}\n",
}

PLANTED_EXPECTED = {  # folder: (what the case shows, the problems it must report)
    "kernels/cpu": ("a file declaring the old loom::cpu is reported, alone",
                    ["kernels/cpu/old.cc:3: namespace loom::cpu (expected loom::kernels::cpu)"]),
    "kernels": ("code in kernels/ declaring kernels/cpu's namespace is reported, alone",
                ["kernels/registry.cc:4: namespace loom::kernels::cpu (that is kernels/cpu/'s namespace; "
                 "expected loom::kernels or a detail namespace inside it)"]),
    "compiler/comm": ("a made-up top-level namespace is reported; forward declarations and gloo pass",
                      ["compiler/comm/stray.cc:1: namespace comm (expected loom::compiler::comm; a foreign "
                       "namespace must be one of FOREIGN in scripts/check_namespaces.py)"]),
    "runtime/train": ("a block mixing a forward declaration with other declarations is reported",
                      ["runtime/train/trainer.h:1: namespace loom::collectives (expected loom::runtime::train)"]),
}


def self_check(report):
    report.case("self-check: the folder rule (kernels/cpu, base, base/testing, proto/loom/v1, deploy/operator)",
                expect([folder_namespace(f) for f in ("kernels/cpu", "base", "base/testing", "proto/loom/v1",
                                                       "deploy/operator")],
                       ["loom::kernels::cpu", "loom", "loom::testing", "loom::v1", "loom::deploy::operator_"]))
    with tempfile.TemporaryDirectory() as root:
        for path, text in PLANTED.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        got = check_tree(root)
    for folder in sorted(got):
        what, want = PLANTED_EXPECTED.get(folder, ("passes", []))
        report.case(f"self-check: planted {folder}/: {what}", expect(got[folder][1], want))
    try:
        namespace_blocks("namespace loom::kernels {\nint a;\n")
        problem = ["an unclosed block was not reported"]
    except InputError:
        problem = []
    report.case("self-check: an unbalanced file is an error, not a pass", problem)


def expect(got, want):
    """[] when got == want, else what differs (the case's problems)."""
    if list(got) == list(want):
        return []
    return [f"expected {w}" for w in want if w not in got] + [f"unexpected {g}" for g in got if g not in want]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--self-check", action="store_true", help="run only the planted cases")
    ap.add_argument("--root", default=".", help="the repository root (default: .)")
    args = ap.parse_args(argv)
    report = Report()
    try:
        self_check(report)
        if not args.self_check:
            if not os.path.isdir(os.path.join(args.root, "base")):
                raise InputError(f"{args.root}: not the repository root (no base/)")
            for folder, (files, problems) in check_tree(args.root).items():
                report.case(f"namespaces: {folder}/", problems, f"{files} files, {folder_namespace(folder)}")
    except InputError as e:
        print(f"check_namespaces: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"check_namespaces: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
