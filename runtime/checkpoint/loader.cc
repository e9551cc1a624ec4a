#include "runtime/checkpoint/loader.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/crc32c.h"
#include "runtime/checkpoint/file_io.h"

namespace loom::runtime::checkpoint {
namespace {

constexpr size_t kVerifyChunk = 4u << 20;

std::string ShapeStr(const std::vector<int64_t>& v) { return ShapeToString(v); }

// Checks one shard's safetensors entry against its record; with kFull, its checksum.
absl::Status CheckShard(const SafetensorsReader& f, const TensorRecord& t, const ShardRecord& s, Verify verify) {
  const TensorEntry* e = f.index().Find(s.key);
  std::string what = absl::StrCat(f.path(), ": tensor '", t.name, "' shard '", s.key, "'");
  if (e == nullptr) return absl::DataLossError(absl::StrCat(what, ": missing from the file"));
  if (e->dtype != t.dtype || e->shape != s.lengths || f.index().data_start + e->begin != s.byte_begin ||
      f.index().data_start + e->end != s.byte_end) {
    return absl::DataLossError(absl::StrCat(what, ": file entry (", SafetensorsDTypeName(e->dtype), " ",
                                            ShapeStr(e->shape), ") disagrees with the manifest (",
                                            SafetensorsDTypeName(t.dtype), " ", ShapeStr(s.lengths), ")"));
  }
  if (verify != Verify::kFull) return absl::OkStatus();
  std::vector<char> buf(std::min<uint64_t>(kVerifyChunk, e->nbytes()));
  uint32_t crc = 0;
  for (uint64_t off = 0; off < e->nbytes(); off += buf.size()) {
    uint64_t n = std::min<uint64_t>(buf.size(), e->nbytes() - off);
    LOOM_RETURN_IF_ERROR(f.ReadBytes(*e, off, buf.data(), n));
    crc = Crc32cExtend(crc, buf.data(), n);
  }
  if (crc != s.crc32c) {
    return absl::DataLossError(absl::StrCat("checksum mismatch in ", what, " (bytes [", s.byte_begin, ", ",
                                            s.byte_end, ")): manifest says ", s.crc32c, ", data gives ", crc));
  }
  return absl::OkStatus();
}

}  // namespace

std::string LoadResult::Explain() const {
  std::string out;
  for (const std::string& s : skipped) absl::StrAppend(&out, "skipped ", s, "\n");
  absl::StrAppend(&out, "loaded ", ckpt.dir, " (step ", ckpt.step, ")", skipped.empty() ? "" : ", an older checkpoint");
  return out;
}

absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> ListCheckpoints(const std::string& root) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(root));
  std::vector<std::pair<int64_t, std::string>> out;
  for (const std::string& n : names) {
    int64_t step;
    if (ParseStepDirName(n, &step)) out.emplace_back(step, absl::StrCat(root, "/", n));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

absl::StatusOr<std::string> ReadLatestPointer(const std::string& root) {
  auto text = ReadSmallFile(absl::StrCat(root, "/", kLatestName), 4096);
  if (absl::IsNotFound(text.status())) return std::string();
  if (!text.ok()) return text.status();
  return std::string(absl::StripSuffix(*text, "\n"));
}

absl::StatusOr<CheckpointInfo> OpenCheckpoint(const std::string& dir, Verify verify) {
  CheckpointInfo info;
  info.dir = dir;
  std::string mpath = absl::StrCat(dir, "/", kManifestName);
  LOOM_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(mpath, kMaxManifestBytes));
  LOOM_ASSIGN_OR_RETURN(info.manifest, ParseManifest(text, mpath));
  info.step = info.manifest.step;
  std::string base = dir.substr(dir.rfind('/') + 1);
  int64_t dir_step;
  if (ParseStepDirName(base, &dir_step) && dir_step != info.step) {
    return absl::DataLossError(absl::StrCat(mpath, ": step ", info.step, " does not match the folder name"));
  }
  std::map<std::string, std::unique_ptr<SafetensorsReader>> files;
  for (const TensorRecord& t : info.manifest.tensors) {
    for (const ShardRecord& s : t.shards) {
      auto it = files.find(s.file);
      if (it == files.end()) {
        LOOM_ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::Open(absl::StrCat(dir, "/", s.file)));
        it = files.emplace(s.file, std::make_unique<SafetensorsReader>(std::move(r))).first;
      }
      LOOM_RETURN_IF_ERROR(CheckShard(*it->second, t, s, verify));
    }
  }
  return info;
}

absl::StatusOr<LoadResult> LoadLatest(const std::string& root, Verify verify) {
  LOOM_ASSIGN_OR_RETURN(auto dirs, ListCheckpoints(root));
  LoadResult result;
  for (const auto& [step, dir] : dirs) {
    auto info = OpenCheckpoint(dir, verify);
    if (info.ok()) {
      result.ckpt = std::move(*info);
      return result;
    }
    result.skipped.push_back(absl::StrCat(dir.substr(dir.rfind('/') + 1), ": ", info.status().message()));
  }
  return absl::NotFoundError(absl::StrCat("no usable checkpoint under ", root,
                                          result.skipped.empty() ? "" : ": ", absl::StrJoin(result.skipped, "; ")));
}

absl::StatusOr<ResumePoint> PrepareResume(const std::string& root, Verify verify) {
  ResumePoint out;
  LOOM_ASSIGN_OR_RETURN(auto dirs, ListCheckpoints(root));
  if (dirs.empty()) return out;
  absl::StatusOr<LoadResult> latest = LoadLatest(root, verify);
  if (!latest.ok() && !absl::IsNotFound(latest.status())) return latest.status();
  if (latest.ok()) out.latest = std::move(*latest);
  for (const auto& [step, dir] : dirs) {
    if (out.latest && step <= out.latest->ckpt.step) continue;
    const std::string base = absl::StrCat(root, "/corrupt.", dir.substr(dir.rfind('/') + 1), ".",
                                          absl::ToUnixSeconds(absl::Now()));
    std::string to = base;
    for (int n = 1; PathExists(to); ++n) to = absl::StrCat(base, ".", n);  // moved aside before, same second
    LOOM_RETURN_IF_ERROR(RenamePath(dir, to));
    out.quarantined.push_back(to);
  }
  if (!out.quarantined.empty()) LOOM_RETURN_IF_ERROR(FsyncDir(root));
  return out;
}

absl::StatusOr<CheckpointReader> CheckpointReader::Open(const CheckpointInfo& ckpt) {
  CheckpointReader r;
  r.ckpt_ = ckpt;
  return r;
}

absl::StatusOr<const SafetensorsReader*> CheckpointReader::File(const std::string& file) {
  auto it = files_.find(file);
  if (it == files_.end()) {
    LOOM_ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::Open(absl::StrCat(ckpt_.dir, "/", file)));
    it = files_.emplace(file, std::make_unique<SafetensorsReader>(std::move(r))).first;
  }
  return it->second.get();
}

absl::StatusOr<Tensor> CheckpointReader::ReadFull(const std::string& name) {
  const TensorRecord* t = ckpt_.manifest.Find(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(ckpt_.dir, ": no tensor named '", name, "'"));
  return ReadSlice(name, std::vector<int64_t>(t->shape.size(), 0), t->shape);
}

absl::StatusOr<Tensor> CheckpointReader::ReadSlice(const std::string& name, const std::vector<int64_t>& offsets,
                                                   const std::vector<int64_t>& lengths) {
  const TensorRecord* t = ckpt_.manifest.Find(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(ckpt_.dir, ": no tensor named '", name, "'"));
  const size_t nd = t->shape.size();
  if (offsets.size() != nd || lengths.size() != nd) {
    return absl::InvalidArgumentError(absl::StrCat("ReadSlice: '", name, "': offsets/lengths need ", nd, " entries"));
  }
  for (size_t d = 0; d < nd; ++d) {
    if (offsets[d] < 0 || lengths[d] < 0 || offsets[d] > t->shape[d] || lengths[d] > t->shape[d] - offsets[d]) {
      return absl::InvalidArgumentError(absl::StrCat("ReadSlice: '", name, "': dim ", d, " range [", offsets[d], ", +",
                                                     lengths[d], ") outside ", ShapeStr(t->shape)));
    }
  }
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(lengths, t->dtype));
  const uint64_t esize = DTypeSize(t->dtype);
  char* dst = static_cast<char*>(out.raw_data());
  if (out.numel() == 0) return out;
  for (const ShardRecord& s : t->shards) {
    // Intersection box, in global coordinates.
    std::vector<int64_t> lo(nd), ext(nd);
    bool empty = false;
    for (size_t d = 0; d < nd; ++d) {
      lo[d] = std::max(offsets[d], s.offsets[d]);
      int64_t hi = std::min(offsets[d] + lengths[d], s.offsets[d] + s.lengths[d]);
      ext[d] = hi - lo[d];
      if (ext[d] <= 0) empty = true;
    }
    if (empty) continue;
    // Row-major strides (elements) of the shard and of the output.
    std::vector<int64_t> sstr(nd, 1), dstr(nd, 1);
    for (size_t d = nd; d-- > 1;) {
      sstr[d - 1] = sstr[d] * s.lengths[d];
      dstr[d - 1] = dstr[d] * lengths[d];
    }
    // Contiguous runs: dims after k are whole in both the shard and the output.
    size_t k = nd == 0 ? 0 : nd - 1;
    while (k > 0 && ext[k] == s.lengths[k] && ext[k] == lengths[k]) --k;
    int64_t run = 1;
    for (size_t d = k; d < nd; ++d) run *= ext[d];
    int64_t nruns = 1;
    for (size_t d = 0; d < k; ++d) nruns *= ext[d];
    int64_t src0 = 0, dst0 = 0;
    for (size_t d = 0; d < nd; ++d) {
      src0 += (lo[d] - s.offsets[d]) * sstr[d];
      dst0 += (lo[d] - offsets[d]) * dstr[d];
    }
    LOOM_ASSIGN_OR_RETURN(const SafetensorsReader* f, File(s.file));
    const TensorEntry* e = f->index().Find(s.key);
    if (e == nullptr || e->dtype != t->dtype || e->shape != s.lengths) {
      return absl::DataLossError(absl::StrCat(f->path(), ": tensor '", name, "' shard '", s.key,
                                              "' missing or disagrees with the manifest"));
    }
    // Source element offset of the last run's end, for the dense-span read.
    int64_t src_last = src0;
    for (size_t d = 0; d < k; ++d) src_last += (ext[d] - 1) * sstr[d];
    const uint64_t span = static_cast<uint64_t>(src_last + run - src0) * esize;
    const uint64_t needed = static_cast<uint64_t>(nruns * run) * esize;
    std::vector<char> buf;
    const bool dense = span <= 2 * needed;
    if (dense) {
      buf.resize(span);
      LOOM_RETURN_IF_ERROR(f->ReadBytes(*e, static_cast<uint64_t>(src0) * esize, buf.data(), span));
      bytes_read_ += span;
    }
    std::vector<int64_t> idx(k, 0);
    for (int64_t r = 0; r < nruns; ++r) {
      int64_t so = src0, doff = dst0;
      for (size_t d = 0; d < k; ++d) {
        so += idx[d] * sstr[d];
        doff += idx[d] * dstr[d];
      }
      const uint64_t nbytes = static_cast<uint64_t>(run) * esize;
      if (dense) {
        std::memcpy(dst + doff * esize, buf.data() + (so - src0) * esize, nbytes);
      } else {
        LOOM_RETURN_IF_ERROR(f->ReadBytes(*e, static_cast<uint64_t>(so) * esize, dst + doff * esize, nbytes));
        bytes_read_ += nbytes;
      }
      for (size_t d = k; d-- > 0;) {
        if (++idx[d] < ext[d]) break;
        idx[d] = 0;
      }
    }
  }
  return out;
}

}  // namespace loom::runtime::checkpoint
