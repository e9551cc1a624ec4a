#include "runtime/checkpoint/ckpt_tool.h"

#include <optional>

#include "absl/strings/numbers.h"
#include "base/flags.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/export.h"
#include "runtime/checkpoint/hf_export.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/checkpoint/safetensors.h"

namespace loom::runtime::checkpoint {

namespace {

// export [--format loom|hf] [--family gpt|llama] SRC OUT
int RunExport(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string format = "loom", family;
  std::vector<std::string> pos;
  FlagSet fs("loom export", "SRC OUT",
             "One safetensors file from a checkpoint (--format loom), or the Hugging Face layout from a run\n"
             "folder or checkpoint (--format hf).");
  fs.String("format", &format, "loom|hf", "the output layout (default loom)")
      .String("family", &family, "gpt|llama", "the Hugging Face model family (with --format hf)")
      .Positionals(&pos, "SRC OUT", 2, 2);
  if (std::optional<int> rc = fs.Parse(args, out, err)) return *rc;
  if (format != "loom" && format != "hf") {
    err << "export: --format: expected loom or hf, got '" << format << "'\n";
    return 2;
  }
  if (format == "loom" && !family.empty()) {
    err << "export: --family applies to --format hf\n";
    return 2;
  }
  absl::Status s = format == "hf" ? ExportHf(pos[0], pos[1], family) : ExportCheckpoint(pos[0], pos[1]);
  if (!s.ok()) {
    err << "export: " << s.message() << "\n";
    return absl::IsInvalidArgument(s) ? 2 : 1;
  }
  out << "exported " << pos[0] << " to " << pos[1] << (format == "hf" ? " (Hugging Face layout)" : "") << "\n";
  return 0;
}

}  // namespace

int RunCheckpointTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const char* usage =
      "usage: loom checkpoint verify ROOT | loom checkpoint inspect FILE.safetensors\n"
      "       loom export [--format loom|hf] [--family gpt|llama] SRC OUT | loom import FILE ROOT [STEP]\n";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    (args.empty() ? err : out) << usage;
    return args.empty() ? 2 : 0;
  }
  const std::string& cmd = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "export") return RunExport(rest, out, err);
  std::vector<std::string> pos;
  if (cmd == "import") {
    FlagSet fs("loom import", "FILE ROOT [STEP]", "Turns a safetensors file into a checkpoint at step STEP (default 0).");
    if (std::optional<int> rc = fs.Positionals(&pos, "FILE ROOT", 2, 3).Parse(rest, out, err)) return *rc;
    int64_t step = 0;
    if (pos.size() == 3 && !absl::SimpleAtoi(pos[2], &step)) return fs.UsageError("STEP: not an integer: " + pos[2], err);
    auto imported = ImportConsolidated(pos[0]);
    if (!imported.ok()) {
      err << "import: " << imported.status().message() << "\n";
      return 1;
    }
    absl::Status s = CleanStale(pos[1]);
    if (s.ok()) s = SaveCheckpoint(pos[1], RequestFromTensors(imported->tensors, step));
    if (!s.ok()) {
      err << "import: " << s.message() << "\n";
      return 1;
    }
    out << "imported " << imported->tensors.size() << " tensors into " << pos[1] << "/" << StepDirName(step) << "\n";
    return 0;
  }
  if (cmd == "verify" || cmd == "inspect") {
    FlagSet fs("loom checkpoint " + cmd, cmd == "verify" ? "ROOT" : "FILE.safetensors",
               cmd == "verify" ? "Loads the latest checkpoint under ROOT with full verification and explains it."
                               : "Lists a safetensors file's metadata and tensors.");
    if (std::optional<int> rc = fs.Positionals(&pos, cmd == "verify" ? "ROOT" : "FILE", 1, 1).Parse(rest, out, err))
      return *rc;
  }
  if (cmd == "verify") {
    auto r = LoadLatest(pos[0], Verify::kFull);
    if (!r.ok()) {
      err << "verify: " << r.status().message() << "\n";
      return 1;
    }
    out << r->Explain() << "\n";
    return 0;
  }
  if (cmd == "inspect") {
    auto r = SafetensorsReader::Open(pos[0]);
    if (!r.ok()) {
      err << "inspect: " << r.status().message() << "\n";
      return 1;
    }
    for (const auto& [k, v] : r->index().metadata) out << "metadata " << k << " = " << v << "\n";
    for (const TensorEntry& t : r->index().tensors) {
      out << t.name << " " << SafetensorsDTypeName(t.dtype) << " " << ShapeToString(t.shape) << " bytes [" << t.begin
          << ", " << t.end << ")\n";
    }
    return 0;
  }
  err << "unknown checkpoint command '" << cmd << "'\n" << usage;
  return 2;
}

}  // namespace loom::runtime::checkpoint
