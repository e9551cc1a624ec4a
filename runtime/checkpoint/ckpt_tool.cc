#include "runtime/checkpoint/ckpt_tool.h"

#include "absl/strings/numbers.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/export.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/checkpoint/safetensors.h"

namespace loom::checkpoint {

int RunCheckpointTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const char* usage =
      "usage: ckpt_tool export CKPT OUT.safetensors | import FILE ROOT [STEP] | verify ROOT | inspect FILE\n";
  if (args.empty()) {
    err << usage;
    return 2;
  }
  const std::string& cmd = args[0];
  if (cmd == "export" && args.size() == 3) {
    absl::Status s = ExportCheckpoint(args[1], args[2]);
    if (!s.ok()) {
      err << "export: " << s.message() << "\n";
      return 1;
    }
    out << "exported " << args[1] << " to " << args[2] << "\n";
    return 0;
  }
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
