#!/usr/bin/env python3
"""Checks that every symbol the call-path section of docs/architecture.md
names is defined where it says.

  /usr/bin/python3 scripts/check_doc_paths.py                # self-check, then the docs
  /usr/bin/python3 scripts/check_doc_paths.py --self-check   # planted cases only

The section is the one headed

  ## From `loom run job.yaml` to a kernel launch

and runs to the next "## " heading. Each of its list items ("- " or "1. ")
that starts with a code span of the form `path/file.cc: ns::Class::Function`
is one entry: the file (relative to the repository root; .cc, .h, .cu or
.cuh) must exist and define that function. Definitions come from Universal
Ctags (`ctags --kinds-C++=f`: function definitions, not declarations), each
qualified by its scope with anonymous namespaces left out, so
`loom::train::Session::Run` names Session::Run inside loom::train's
anonymous namespace, and `main` the global main.

It prints one line per case, `PASS: ...` or `FAIL: ...`, and exits 0 when
every case passed, 1 when one failed, 2 on bad input (no such section, no
entries, ctags missing). Before the docs it runs its self-check: a planted
section whose entries name a defined function, a missing function, a
function only declared and a missing file; the checker must report exactly
the three faults.

Standard library only (Debian's /usr/bin/python3); scripts/test.sh runs it as
a phase of its own and counts its PASS/FAIL lines.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

DOC = "docs/architecture.md"
HEADING = "## From `loom run job.yaml` to a kernel launch"
ENTRY = re.compile(r"^\s*(?:[-*]|\d+\.)\s+`(?P<file>[\w./-]+\.(?:cc|h|cu|cuh)): (?P<sym>[A-Za-z_~][\w:~]*)`")


class BadInput(Exception):
    pass


def section_entries(text, heading=HEADING):
    """(line number, file, symbol) of every entry of the section."""
    lines = text.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == heading)
    except StopIteration:
        raise BadInput(f"no section headed '{heading}'")
    out = []
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("## "):
            break
        m = ENTRY.match(lines[i])
        if m:
            out.append((i + 1, m.group("file"), m.group("sym")))
    if not out:
        raise BadInput(f"the section '{heading}' names no `file: symbol` entries")
    return out


def definitions(path):
    """Qualified names of the functions defined in `path` (ctags)."""
    cmd = ["ctags", "--languages=C++", "--langmap=C++:+.cu.cuh", "--kinds-C++=f", "--fields=+Z", "-o", "-", path]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    except FileNotFoundError:
        raise BadInput("ctags is not installed (Universal Ctags)")
    except subprocess.CalledProcessError as e:
        raise BadInput(f"ctags failed on {path}: {e.stderr.strip()}")
    names = set()
    for line in out.splitlines():
        fields = line.split("\t")
        name, scope = fields[0], ""
        for f in fields[3:]:
            if f.startswith("scope:"):
                scope = f.split(":", 2)[2]  # scope:<kind>:<qualified name>
        parts = [p for p in scope.split("::") if p and not p.startswith("__anon")] + [name]
        names.add("::".join(parts))
    return names


class Report:
    def __init__(self, out=sys.stdout):
        self.failed = 0
        self.out = out

    def case(self, name, problem):
        if problem:
            self.failed += 1
            print(f"FAIL: {name}: {problem}", file=self.out)
        else:
            print(f"PASS: {name}", file=self.out)


def check(root, doc_text, report, label="docs path"):
    """Reports one case per entry; returns the entries that failed."""
    failed = []
    cache = {}
    for lineno, rel, sym in section_entries(doc_text):
        path = os.path.join(root, rel)
        name = f"{label}: {rel}: {sym} (line {lineno})"
        if not os.path.isfile(path):
            problem = f"no file {rel}"
        else:
            if rel not in cache:
                cache[rel] = definitions(path)
            problem = "" if sym in cache[rel] else f"{rel} defines no function {sym}"
            if problem:
                last = sym.split("::")[-1]
                near = sorted(n for n in cache[rel] if n.split("::")[-1] == last)
                if near:
                    problem += f" (it defines {', '.join(near)})"
        report.case(name, problem)
        if problem:
            failed.append((rel, sym))
    return failed


# --- the self-check: a planted section with known faults ---------------------

PLANTED_DOC = f"""# Planted

{HEADING}

1. `src/a.cc: main` defined.
2. `src/a.cc: demo::Widget::Run` defined, inside an anonymous namespace.
3. `src/a.cc: demo::Widget::Stop` planted fault: declared, never defined.
4. `src/a.cc: demo::Launch` planted fault: no such function.
5. `src/gone.cc: demo::Launch` planted fault: no such file.
- `src/b.cu: demo::kern::Fill` defined in a .cu file.

Text that mentions `src/a.cc: demo::Nothing` outside a list item is no entry.

## Next section

- `src/a.cc: demo::AfterTheSection` is outside the section.
"""

PLANTED_SOURCES = {
    "src/a.cc": """namespace demo {
namespace {
class Widget {
 public:
  int Run();
  void Stop();
};
int Widget::Run() { return 1; }
}  // namespace
}  // namespace demo
int main() { return 0; }
""",
    "src/b.cu": """namespace demo::kern {
__global__ void FillKernel(float* p) { p[0] = 1; }
int Fill(float* p) {
  FillKernel<<<1, 1>>>(p);
  return 0;
}
}  // namespace demo::kern
""",
}

PLANTED_FAULTS = [("src/a.cc", "demo::Widget::Stop"), ("src/a.cc", "demo::Launch"), ("src/gone.cc", "demo::Launch")]


def self_check(report):
    root = tempfile.mkdtemp(prefix="check_doc_paths.")
    try:
        for rel, text in PLANTED_SOURCES.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        quiet = Report(out=open(os.devnull, "w"))
        got = check(root, PLANTED_DOC, quiet, label="planted")
        entries = len(section_entries(PLANTED_DOC))
    finally:
        shutil.rmtree(root)
    problem = ""
    if got != PLANTED_FAULTS:
        problem = f"reported {got}, planted {PLANTED_FAULTS}"
    elif entries != 6:
        problem = f"parsed {entries} entries, the planted section has 6"
    report.case("self-check: the planted missing function, declared-only function and missing file are reported, "
                "alone", problem)


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    report = Report()
    try:
        self_check(report)
        if "--self-check" not in argv:
            with open(os.path.join(root, DOC)) as f:
                check(root, f.read(), report)
    except BadInput as e:
        print(f"check_doc_paths: {e}", file=sys.stderr)
        return 2
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
