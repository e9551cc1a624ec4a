#include "runtime/checkpoint/export.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/safetensors.h"

namespace loom::runtime::checkpoint {

absl::Status WriteSafetensorsStreamed(const std::string& out_path, const std::vector<TensorToWrite>& entries,
                                      const std::map<std::string, std::string>& metadata,
                                      const std::function<absl::StatusOr<Tensor>(size_t)>& produce) {
  LOOM_ASSIGN_OR_RETURN(std::string header, BuildSafetensorsHeader(entries, metadata));
  std::string tmp = absl::StrCat(out_path, ".tmp.", getpid());
  absl::Status s = [&]() -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(ScopedFd fd, CreateFile(tmp));
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
    LOOM_RETURN_IF_ERROR(WriteAll(fd.get(), tmp, len, 8));
    LOOM_RETURN_IF_ERROR(WriteAll(fd.get(), tmp, header.data(), header.size()));
    for (size_t i = 0; i < entries.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(Tensor t, produce(i));
      if (t.dtype() != entries[i].dtype || std::vector<int64_t>(t.shape().begin(), t.shape().end()) != entries[i].shape)
        return absl::InternalError(absl::StrCat("safetensors writer: tensor '", entries[i].name, "' is ",
                                                t.DebugString(), ", the header says ",
                                                ShapeToString(entries[i].shape)));
      Tensor c = t.Contiguous();
      LOOM_RETURN_IF_ERROR(WriteAll(fd.get(), tmp, c.raw_data(), c.nbytes()));
    }
    LOOM_RETURN_IF_ERROR(FsyncFile(fd.get(), tmp));
    return RenamePath(tmp, out_path);
  }();
  if (!s.ok()) unlink(tmp.c_str());
  return s;
}

absl::Status ExportConsolidated(const CheckpointInfo& ckpt, const std::string& out_path,
                                const std::map<std::string, std::string>& rename) {
  const Manifest& m = ckpt.manifest;
  std::vector<TensorToWrite> entries;
  for (const TensorRecord& t : m.tensors) {
    auto it = rename.find(t.name);
    entries.push_back({it == rename.end() ? t.name : it->second, t.dtype, t.shape, nullptr});
  }
  std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"loom.step", absl::StrCat(m.step)}, {"loom.layout", m.layout}};
  LOOM_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(ckpt));
  return WriteSafetensorsStreamed(out_path, entries, meta,
                                  [&](size_t i) { return reader.ReadFull(m.tensors[i].name); });
}

absl::Status ExportCheckpoint(const std::string& ckpt_path, const std::string& out_path) {
  if (PathExists(absl::StrCat(ckpt_path, "/", kManifestName))) {
    LOOM_ASSIGN_OR_RETURN(CheckpointInfo info, OpenCheckpoint(ckpt_path, Verify::kFull));
    return ExportConsolidated(info, out_path);
  }
  LOOM_ASSIGN_OR_RETURN(LoadResult r, LoadLatest(ckpt_path, Verify::kFull));
  return ExportConsolidated(r.ckpt, out_path);
}

absl::StatusOr<ImportedTensors> ImportConsolidated(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::Open(path));
  ImportedTensors out;
  out.metadata = r.index().metadata;
  for (const TensorEntry& e : r.index().tensors) {
    LOOM_ASSIGN_OR_RETURN(Tensor t, r.ReadTensor(e.name));
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

SaveRequest RequestFromTensors(const std::vector<std::pair<std::string, Tensor>>& tensors, int64_t step) {
  SaveRequest req;
  req.step = step;
  for (const auto& [name, t] : tensors) {
    TensorToSave s;
    s.name = name;
    s.dtype = t.dtype();
    s.global_shape.assign(t.shape().begin(), t.shape().end());
    s.spec = "R";
    s.shards.push_back({0, std::vector<int64_t>(t.ndim(), 0), t});
    req.tensors.push_back(std::move(s));
  }
  return req;
}

}  // namespace loom::runtime::checkpoint
