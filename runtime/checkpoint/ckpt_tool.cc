#include "runtime/checkpoint/ckpt_tool.h"

#include "absl/strings/numbers.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/export.h"
#include "runtime/checkpoint/hf_export.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/checkpoint/safetensors.h"

namespace loom::checkpoint {

namespace {

// export [--format loom|hf] [--family gpt|llama] SRC OUT
int RunExport(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const char* usage = "usage: export [--format loom|hf] [--family gpt|llama] SRC OUT.safetensors\n";
  std::string format = "loom", family;
  std::vector<std::string> pos;
  for (size_t i = 1; i < args.size(); ++i) {
    if ((args[i] == "--format" || args[i] == "--family") && i + 1 < args.size()) {
      (args[i] == "--format" ? format : family) = args[i + 1];
      ++i;
    } else if (!args[i].empty() && args[i][0] == '-') {
      err << "export: unknown flag '" << args[i] << "'\n" << usage;
      return 2;
    } else {
      pos.push_back(args[i]);
    }
  }
  if (pos.size() != 2) {
    err << usage;
    return 2;
  }
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
      "usage: ckpt_tool export [--format loom|hf] [--family gpt|llama] SRC OUT.safetensors | import FILE ROOT [STEP] |"
      " verify ROOT | inspect FILE\n";
  if (args.empty()) {
    err << usage;
    return 2;
  }
  const std::string& cmd = args[0];
  if (cmd == "export") return RunExport(args, out, err);
  if (cmd == "import" && (args.size() == 3 || args.size() == 4)) {
    int64_t step = 0;
    if (args.size() == 4 && !absl::SimpleAtoi(args[3], &step)) {
      err << "import: STEP: not an integer: " << args[3] << "\n";
      return 2;
    }
    auto imported = ImportConsolidated(args[1]);
    if (!imported.ok()) {
      err << "import: " << imported.status().message() << "\n";
      return 1;
    }
    absl::Status s = CleanStale(args[2]);
    if (s.ok()) s = SaveCheckpoint(args[2], RequestFromTensors(imported->tensors, step));
    if (!s.ok()) {
      err << "import: " << s.message() << "\n";
      return 1;
    }
    out << "imported " << imported->tensors.size() << " tensors into " << args[2] << "/" << StepDirName(step) << "\n";
    return 0;
  }
  if (cmd == "verify" && args.size() == 2) {
    auto r = LoadLatest(args[1], Verify::kFull);
    if (!r.ok()) {
      err << "verify: " << r.status().message() << "\n";
      return 1;
    }
    out << r->Explain() << "\n";
    return 0;
  }
  if (cmd == "inspect" && args.size() == 2) {
    auto r = SafetensorsReader::Open(args[1]);
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
  err << usage;
  return 2;
}

}  // namespace loom::checkpoint
