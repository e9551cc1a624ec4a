#!/usr/bin/python3
"""Checks that Loom's dependencies point one way (docs/layers.txt).

Run from the repository root, with Debian's Python (standard library only):

  /usr/bin/python3 scripts/check_layers.py                 # self-check, then the tree
  /usr/bin/python3 scripts/check_layers.py --self-check    # planted cases only
  /usr/bin/python3 scripts/check_layers.py --query-xml F   # F: bazel query '//...' --output=xml

Without --query-xml it runs `bazel query '//...' --output=xml` itself (outside
any Bazel sandbox: Bazel cannot query from inside a test).

The rules, all read from the one table in docs/layers.txt:
  - every first-party package and source folder has a layer (its top folder);
  - every edge of the build graph between two top folders (any attribute: deps,
    data, srcs, tools) goes from a line to a line below it; peers on one line
    use neither each other;
  - a production rule (neither a test nor testonly) depends on no package with a
    `testing` folder in its path: test doubles and helpers live there, and
    every rule there is a test or testonly;
  - every `#include "folder/..."` of a source file under a top folder obeys
    the same order, and production sources include no `testing/` header (a file
    is test code when every rule that lists it is a test or testonly; files no
    rule lists are judged by their path);
  - docs/architecture.md shows the table's lines verbatim in the first code
    block after its "Imports point one way" heading.

It prints one line per case, `PASS: ...` or `FAIL: ...` (offending edges
indented below a FAIL), and exits 0 when every case passed, 1 when one failed,
2 on bad usage or unreadable input.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

LAYERS_FILE = "docs/layers.txt"
DOC_FILE = "docs/architecture.md"
DOC_HEADING = "## Imports point one way"
SOURCE_EXTENSIONS = (".cc", ".h", ".cu", ".cuh", ".cpp", ".hpp", ".inc")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.M)
TEST_PATH = re.compile(r"(^|/)(testing|tests|fuzz)/|_test\.[a-z]+$|_(gpu_)?checks?\.[a-z]+$|^bench/")


class InputError(Exception):
    """Unreadable or malformed input: exit 2 with the message."""


# --- the table -------------------------------------------------------------


class Layers:
    """docs/layers.txt: rank 0 is the top line."""

    def __init__(self, text, source=LAYERS_FILE):
        self.rank = {}
        self.lines = []  # the table's lines as written (comments dropped)
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.rstrip()
            if not line or line.lstrip().startswith("#"):
                continue
            names = [n.strip() for n in re.sub(r"\(.*\)", "", line).split("|")]
            if not all(re.fullmatch(r"[a-z_][a-z0-9_]*", n) for n in names):
                raise InputError(f"{source}:{number}: expected 'folder | folder  (description)', got {raw!r}")
            for name in names:
                if name in self.rank:
                    raise InputError(f"{source}:{number}: folder '{name}' is listed twice")
                self.rank[name] = len(self.lines)
            self.lines.append(line)
        if not self.lines:
            raise InputError(f"{source}: no layers")

    def allows(self, src, dst):
        return src == dst or self.rank[dst] > self.rank[src]

    def why(self, src, dst):
        if self.rank[dst] == self.rank[src]:
            return f"{src} and {dst} are peers"
        return f"{dst} is above {src}"


# --- the build graph ---------------------------------------------------------


class Rule:
    def __init__(self, label, kind, testonly, inputs):
        self.label, self.kind, self.testonly, self.inputs = label, kind, testonly, inputs

    @property
    def is_test_code(self):
        return self.testonly or self.kind.endswith("_test")


def parse_query_xml(text):
    """Rules of `bazel query ... --output=xml`, by label (first-party only)."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise InputError(f"query output is not XML: {e}")
    rules = {}
    for r in root.iter("rule"):
        label = r.get("name", "")
        if not label.startswith("//"):
            continue
        testonly = any(b.get("name") == "testonly" and b.get("value") == "true" for b in r.findall("boolean"))
        inputs = [i.get("name") for i in r.findall("rule-input")]
        rules[label] = Rule(label, r.get("class", ""), testonly, inputs)
    if not rules:
        raise InputError("query output holds no first-party rule")
    return rules


def package_of(label):
    return label[2:].split(":", 1)[0]


def top_of(path):
    return path.split("/", 1)[0]


def is_testing_path(path):
    return "testing" in path.split("/")


def first_party_edges(rules):
    for label, rule in sorted(rules.items()):
        for dep in rule.inputs:
            if dep.startswith("//") and not dep.startswith("//visibility:"):
                yield rule, dep


def check_packages(layers, rules):
    """Packages whose top folder has no line in the table."""
    packages = {package_of(l) for l in rules} | {package_of(d) for _, d in first_party_edges(rules)}
    return sorted(f"//{p} (top folder '{top_of(p) or '(root)'}')" for p in packages if top_of(p) not in layers.rank)


def check_build_edges(layers, rules):
    """Edges against the order; edges between folders counted."""
    bad, crossing = [], 0
    for rule, dep in first_party_edges(rules):
        src, dst = top_of(package_of(rule.label)), top_of(package_of(dep))
        if src == dst or src not in layers.rank or dst not in layers.rank:
            continue
        crossing += 1
        if not layers.allows(src, dst):
            bad.append(f"{rule.label} -> {dep} ({layers.why(src, dst)})")
    return bad, crossing


def check_testing_rules(rules):
    """Rules in a testing/ package that production rules could use."""
    return [f"{label} ({rule.kind} is neither a test nor testonly)" for label, rule in sorted(rules.items())
            if is_testing_path(package_of(label)) and not rule.is_test_code]


def check_test_edges(rules):
    """Production rules that depend on a testing/ package."""
    return [f"{rule.label} -> {dep} ({rule.kind} is neither a test nor testonly)"
            for rule, dep in first_party_edges(rules)
            if not rule.is_test_code and is_testing_path(package_of(dep))]


# --- #include lines ----------------------------------------------------------


def file_owners(rules):
    """Source path -> [is test code] for each rule that lists the file."""
    owners = {}
    for rule in rules.values():
        for dep in rule.inputs:
            if dep.startswith("//") and ":" in dep:
                pkg, name = dep[2:].split(":", 1)
                path = f"{pkg}/{name}" if pkg else name
                if path.endswith(SOURCE_EXTENSIONS):
                    owners.setdefault(path, []).append(rule.is_test_code)
    return owners


def is_test_file(path, owners):
    if path in owners:
        return all(owners[path])
    return bool(TEST_PATH.search(path))


def source_files(root):
    for top in sorted(os.listdir(root)):
        if top.startswith((".", "bazel-")) or not os.path.isdir(os.path.join(root, top)):
            continue
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(x for x in dirs if not x.startswith("."))
            for f in sorted(files):
                if f.endswith(SOURCE_EXTENSIONS):
                    yield os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")


def check_includes(layers, root, owners):
    """(order violations, testing includes from production, unknown folders, files, includes)."""
    tops = {t for t in os.listdir(root) if os.path.isdir(os.path.join(root, t))}
    bad, testing, unknown = [], [], set()
    files = includes = 0
    for path in source_files(root):
        src = top_of(path)
        if src not in layers.rank:
            unknown.add(f"{path} (top folder '{src}')")
            continue
        files += 1
        with open(os.path.join(root, path), errors="replace") as f:
            text = f.read()
        production = not is_test_file(path, owners)
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            dst = top_of(inc)
            if "/" not in inc or (dst not in layers.rank and dst not in tops):
                continue  # a header beside the file, or a system library's
            line = text.count("\n", 0, m.start()) + 1
            includes += 1
            where = f'{path}:{line}: #include "{inc}"'
            if dst not in layers.rank:
                unknown.add(f"{where} (top folder '{dst}')")
            elif not layers.allows(src, dst):
                bad.append(f"{where} ({layers.why(src, dst)})")
            if production and is_testing_path(os.path.dirname(inc)):
                testing.append(f"{where} (a production source)")
    return bad, testing, sorted(unknown), files, includes


# --- the copy in docs/architecture.md ----------------------------------------


def check_doc(layers, doc_text):
    """None when the doc's block shows the table's lines, else what differs."""
    at = doc_text.find("\n" + DOC_HEADING + "\n")
    if at < 0:
        return f"no '{DOC_HEADING}' heading"
    section = doc_text[at + 1:]
    end = section.find("\n## ")
    m = re.search(r"\n```[a-z]*\n(.*?)\n```", section if end < 0 else section[:end], re.S)
    if not m:
        return f"no code block after '{DOC_HEADING}'"
    shown = [l.rstrip() for l in m.group(1).splitlines()]
    if shown == layers.lines:
        return None
    for i, (a, b) in enumerate(zip(shown + [""] * len(layers.lines), layers.lines + [""] * len(shown))):
        if a != b:
            return f"line {i + 1} of the block: {a!r}, the table has {b!r}"
    return "the block differs from the table"


# --- cases -------------------------------------------------------------------


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


def check_tree(report, root, layers, rules):
    unknown_pkgs = check_packages(layers, rules)
    report.case("layers: every package has a line in " + LAYERS_FILE, unknown_pkgs,
                f"{len({package_of(l) for l in rules})} packages")
    bad, crossing = check_build_edges(layers, rules)
    report.case("layers: build dependencies point down", bad,
                f"{crossing} edges between top folders, {len(rules)} rules")
    report.case("layers: production rules use no testing/ package", check_test_edges(rules),
                f"{sum(not r.is_test_code for r in rules.values())} production rules")
    report.case("layers: every rule in a testing/ package is a test or testonly", check_testing_rules(rules))
    bad, testing, unknown, files, includes = check_includes(layers, root, file_owners(rules))
    report.case("layers: every source folder has a line in " + LAYERS_FILE, unknown)
    report.case("layers: #include lines point down", bad, f"{includes} first-party includes in {files} files")
    report.case("layers: production sources include no testing/ header", testing)
    try:
        with open(os.path.join(root, DOC_FILE)) as f:
            problem = check_doc(layers, f.read())
    except OSError as e:
        problem = f"cannot read it: {e.strerror}"
    report.case(f"layers: {DOC_FILE} shows {LAYERS_FILE}", [problem] if problem else [])


# --- the self-check: planted inputs, each with exactly one known fault -------

PLANTED_LAYERS = """\
# planted table
tests                (top)
runtime
compiler
kernels
base | proto
"""

PLANTED_RULES = {
    # label: (class, testonly, inputs)
    "//base:status": ("cc_library", False, ["//base:status.h", "@system_absl//:absl"]),
    "//proto:job": ("cc_library", False, ["//proto:job.pb.h"]),
    "//kernels:registry": ("cc_library", False, ["//base:status", "//kernels:registry.h"]),
    "//kernels:fast": ("cc_library", False, ["//kernels:registry", "//compiler/ir:ir", "//kernels:fast.cc"]),
    "//compiler/ir:ir": ("cc_library", False, ["//kernels:registry", "//proto:job", "//compiler/ir:ir.h"]),
    "//compiler/testing:doubles": ("cc_library", True, ["//compiler/ir:ir", "//compiler/testing:doubles.h"]),
    "//compiler:ir_test": ("cc_test", True, ["//compiler/testing:doubles", "//compiler:ir_test.cc"]),
    "//runtime:train": ("cc_library", False, ["//compiler/ir:ir", "//runtime:train.cc"]),
    "//runtime:loom": ("cc_binary", False, ["//runtime:train"]),
    "//tests/cli:cli_test": ("cc_test", True, ["//runtime:loom", "//compiler/testing:doubles"]),
}

PLANTED_SOURCES = {
    "base/status.h": "#pragma once\n",
    "kernels/registry.h": '#include "base/status.h"\n#include "absl/status/status.h"\n',
    "kernels/fast.cc": '#include "kernels/registry.h"\n\n#include "compiler/ir/ir.h"\n',
    "compiler/ir/ir.h": '#include "kernels/registry.h"\n#include "proto/job.pb.h"\n#include <vector>\n',
    "compiler/testing/doubles.h": '#include "compiler/ir/ir.h"\n',
    "compiler/ir_test.cc": '#include "compiler/testing/doubles.h"\n',
    "runtime/train.cc": '#include "compiler/ir/ir.h"\n#include "compiler/testing/doubles.h"\n',
}


def planted_xml(rules):
    out = ["<?xml version='1.1' encoding='UTF-8' standalone='no'?>", '<query version="2">']
    for label, (kind, testonly, inputs) in rules.items():
        out.append(f'  <rule class="{kind}" location="/planted/BUILD:1:1" name="{label}">')
        out.append(f'    <boolean name="testonly" value="{str(testonly).lower()}"/>')
        out += [f'    <rule-input name="{i}"/>' for i in inputs]
        out.append("  </rule>")
    out.append("</query>")
    return "\n".join(out)


def plant_tree(root, sources):
    for path, text in sources.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write(text)


def expect(got, want):
    """[] when got == want, else what differs (the case's problems)."""
    if list(got) == list(want):
        return []
    return [f"expected {w}" for w in want if w not in got] + [f"unexpected {g}" for g in got if g not in want]


def self_check(report):
    layers = Layers(PLANTED_LAYERS, "planted table")
    rules = parse_query_xml(planted_xml(PLANTED_RULES))
    bad, _ = check_build_edges(layers, rules)
    report.case("self-check: the one upward build edge (kernels -> compiler) is reported, alone",
                expect(bad, ["//kernels:fast -> //compiler/ir:ir (compiler is above kernels)"]))
    peers = dict(PLANTED_RULES, **{"//base:status": ("cc_library", False, ["//proto:job"])})
    bad, _ = check_build_edges(layers, parse_query_xml(planted_xml(peers)))
    report.case("self-check: a build edge between peers (base -> proto) is reported beside the upward one",
                expect(bad, ["//base:status -> //proto:job (base and proto are peers)",
                             "//kernels:fast -> //compiler/ir:ir (compiler is above kernels)"]))
    leak = dict(PLANTED_RULES, **{"//runtime:train": ("cc_library", False, ["//compiler/testing:doubles"])})
    report.case("self-check: a production rule using a testing/ package is reported, alone",
                expect(check_test_edges(parse_query_xml(planted_xml(leak))),
                       ["//runtime:train -> //compiler/testing:doubles (cc_library is neither a test nor testonly)"]))
    loose = dict(PLANTED_RULES, **{"//compiler/testing:doubles": ("cc_library", False, ["//compiler/ir:ir"])})
    report.case("self-check: a rule in a testing/ package that is not testonly is reported, alone",
                expect(check_testing_rules(parse_query_xml(planted_xml(loose))),
                       ["//compiler/testing:doubles (cc_library is neither a test nor testonly)"]))
    stray = dict(PLANTED_RULES, **{"//deploy:operator": ("cc_binary", False, ["//runtime:train"])})
    report.case("self-check: a package outside the table is reported",
                expect(check_packages(layers, parse_query_xml(planted_xml(stray))),
                       ["//deploy (top folder 'deploy')"]))
    with tempfile.TemporaryDirectory() as root:
        plant_tree(root, PLANTED_SOURCES)
        bad, testing, unknown, _, _ = check_includes(layers, root, file_owners(rules))
    report.case("self-check: the one upward #include (kernels -> compiler) is reported, alone",
                expect(bad + unknown, ['kernels/fast.cc:3: #include "compiler/ir/ir.h" (compiler is above kernels)']))
    report.case("self-check: a production source including a testing/ header is reported, alone",
                expect(testing, ['runtime/train.cc:2: #include "compiler/testing/doubles.h" (a production source)']))
    doc = "# A\n\n" + DOC_HEADING + "\n\n```\n" + "\n".join(layers.lines) + "\n```\n"
    swapped = doc.replace("runtime\ncompiler", "compiler\nruntime")
    report.case("self-check: the docs copy is accepted as is and refused with two lines swapped",
                expect([check_doc(layers, doc), check_doc(layers, swapped)],
                       [None, "line 2 of the block: 'compiler', the table has 'runtime'"]))


def run_query(root):
    cmd = ["bazel", "query", "--noshow_progress", "--color=no", "//...", "--output=xml"]
    p = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if p.returncode != 0:
        raise InputError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p.stdout


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--self-check", action="store_true", help="run only the planted cases")
    ap.add_argument("--query-xml", metavar="FILE", help="output of bazel query '//...' --output=xml")
    ap.add_argument("--root", default=".", help="the repository root (default: .)")
    args = ap.parse_args(argv)
    report = Report()
    try:
        self_check(report)
        if not args.self_check:
            with open(os.path.join(args.root, LAYERS_FILE)) as f:
                layers = Layers(f.read())
            if args.query_xml:
                with open(args.query_xml) as f:
                    xml_text = f.read()
            else:
                xml_text = run_query(args.root)
            check_tree(report, args.root, layers, parse_query_xml(xml_text))
    except InputError as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"check_layers: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
