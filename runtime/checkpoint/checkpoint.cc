#include "runtime/checkpoint/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/safetensors.h"

namespace loom::runtime::checkpoint {
namespace {

constexpr const char* kTmpPrefix = ".tmp.";

std::vector<int64_t> ShapeVec(const Tensor& t) { return std::vector<int64_t>(t.shape().begin(), t.shape().end()); }

// Committed step folders under root, newest first.
absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> StepDirs(const std::string& root) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(root));
  std::vector<std::pair<int64_t, std::string>> out;
  for (const std::string& n : names) {
    int64_t step;
    if (ParseStepDirName(n, &step)) out.emplace_back(step, n);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

absl::Status ApplyRetention(const std::string& root, int keep_last) {
  if (keep_last <= 0) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(auto dirs, StepDirs(root));
  for (size_t i = static_cast<size_t>(keep_last); i < dirs.size(); ++i) {
    std::string doomed = absl::StrCat(root, "/", kTmpPrefix, "del.", dirs[i].second);
    LOOM_RETURN_IF_ERROR(RenamePath(absl::StrCat(root, "/", dirs[i].second), doomed));
    LOOM_RETURN_IF_ERROR(RemoveTree(doomed));
  }
  return FsyncDir(root);
}

}  // namespace

std::string StepDirName(int64_t step) {
  char buf[32];
  snprintf(buf, sizeof(buf), "step_%012lld", static_cast<long long>(step));
  return buf;
}

bool ParseStepDirName(const std::string& name, int64_t* step) {
  if (!absl::StartsWith(name, "step_") || name.size() < 6 || name.size() > 24) return false;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return absl::SimpleAtoi(name.substr(5), step);
}

std::string RankFileName(int64_t rank) {
  char buf[40];
  snprintf(buf, sizeof(buf), "rank%05lld.safetensors", static_cast<long long>(rank));
  return buf;
}

absl::Status CleanStale(const std::string& root) {
  if (!IsDirectory(root)) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(root));
  for (const std::string& n : names) {
    // Leftover save folders, retention victims and latest.tmp.<pid> files.
    if (absl::StartsWith(n, kTmpPrefix) || absl::StrContains(n, ".tmp.")) {
      LOOM_RETURN_IF_ERROR(RemoveTree(absl::StrCat(root, "/", n)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> BeginSave(const std::string& root, int64_t step) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("checkpoint save: step: negative (", step, ")"));
  LOOM_RETURN_IF_ERROR(MakeDir(root));
  if (PathExists(absl::StrCat(root, "/", StepDirName(step)))) {
    return absl::AlreadyExistsError(absl::StrCat("checkpoint save: ", root, "/", StepDirName(step), " already exists"));
  }
  std::string tmp = absl::StrCat(root, "/", kTmpPrefix, StepDirName(step));
  LOOM_RETURN_IF_ERROR(RemoveTree(tmp));
  LOOM_RETURN_IF_ERROR(MakeDir(tmp));
  return tmp;
}

absl::StatusOr<std::vector<WrittenShard>> WriteRankShards(const std::string& tmp_dir, int64_t rank,
                                                          const std::vector<RankShard>& shards) {
  std::map<std::string, int> per_tensor;
  for (const RankShard& s : shards) ++per_tensor[s.tensor];
  std::vector<Tensor> contiguous;
  std::vector<TensorToWrite> w;
  for (const RankShard& s : shards) {
    const bool loaded = !s.data.defined() && s.load;
    if (!loaded && (!s.data.defined() || s.data.device() != Device::CPU())) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint save: tensor '", s.tensor, "' rank ", rank, ": shard data must be a host tensor"));
    }
    const std::vector<int64_t> shape = loaded ? s.shape : ShapeVec(s.data);
    if (s.offsets.size() != shape.size()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint save: tensor '", s.tensor, "' rank ", rank,
                                                     ": offsets has ", s.offsets.size(), " entries for a ",
                                                     shape.size(), "-d shard"));
    }
    std::string key = per_tensor[s.tensor] == 1 ? s.tensor : absl::StrCat(s.tensor, "@", absl::StrJoin(s.offsets, ","));
    if (!loaded) {
      contiguous.push_back(s.data.Contiguous());
      w.push_back({key, s.data.dtype(), shape, contiguous.back().raw_data(), nullptr});
      continue;
    }
    TensorToWrite t{key, s.dtype, shape, nullptr, nullptr};
    t.produce = [&s, shape, rank](const std::function<absl::Status(const void*)>& sink) -> absl::Status {
      LOOM_ASSIGN_OR_RETURN(Tensor data, s.load());
      if (!data.defined() || data.device() != Device::CPU() || data.dtype() != s.dtype || ShapeVec(data) != shape)
        return absl::InternalError(absl::StrCat("checkpoint save: tensor '", s.tensor, "' rank ", rank,
                                                ": loaded data is not the declared host ", DTypeName(s.dtype), " [",
                                                absl::StrJoin(shape, ", "), "]"));
      const Tensor c = data.Contiguous();
      return sink(c.raw_data());
    };
    w.push_back(std::move(t));
  }
  std::string file = RankFileName(rank);
  LOOM_ASSIGN_OR_RETURN(std::vector<WrittenTensor> written,
                        WriteSafetensors(absl::StrCat(tmp_dir, "/", file), w, {{"loom.rank", absl::StrCat(rank)}}));
  std::vector<WrittenShard> out;
  for (size_t i = 0; i < shards.size(); ++i) {
    WrittenShard ws;
    ws.tensor = shards[i].tensor;
    ws.record.file = file;
    ws.record.key = w[i].name;
    ws.record.rank = rank;
    ws.record.offsets = shards[i].offsets;
    ws.record.lengths = w[i].shape;
    ws.record.byte_begin = written[i].file_begin;
    ws.record.byte_end = written[i].file_end;
    ws.record.crc32c = written[i].crc32c;
    out.push_back(std::move(ws));
  }
  return out;
}

int64_t CommitGate::Close() {
  std::lock_guard<std::mutex> l(mu_);
  closed_ = true;
  return last_committed_;
}

bool CommitGate::closed() {
  std::lock_guard<std::mutex> l(mu_);
  return closed_;
}

absl::Status CommitSave(const std::string& root, const std::string& tmp_dir, const Manifest& m,
                        const CheckpointOptions& options) {
  std::string name = StepDirName(m.step);
  LOOM_RETURN_IF_ERROR(ValidateManifest(m, absl::StrCat(tmp_dir, "/", kManifestName)));
  LOOM_RETURN_IF_ERROR(FsyncDir(tmp_dir));
  LOOM_RETURN_IF_ERROR(WriteFileAtomic(absl::StrCat(tmp_dir, "/", kManifestName), ManifestToJson(m)));
  std::unique_lock<std::mutex> held;
  if (options.gate != nullptr) {
    held = std::unique_lock<std::mutex>(options.gate->mu_);
    if (options.gate->closed_) {
      return absl::CancelledError(absl::StrCat("checkpoint commit of ", name, " refused: the process is stopping"));
    }
  }
  LOOM_RETURN_IF_ERROR(RenamePath(tmp_dir, absl::StrCat(root, "/", name)));
  if (options.gate != nullptr) options.gate->last_committed_ = m.step;
  LOOM_RETURN_IF_ERROR(FsyncDir(root));
  LOOM_RETURN_IF_ERROR(WriteFileAtomic(absl::StrCat(root, "/", kLatestName), absl::StrCat(name, "\n")));
  return ApplyRetention(root, options.keep_last);
}

absl::Status SaveCheckpoint(const std::string& root, const SaveRequest& req, const CheckpointOptions& options) {
  Manifest m;
  m.step = req.step;
  m.world_size = req.world_size;
  m.sampler = req.sampler;
  m.job_spec = req.job_spec;
  m.layout = req.layout;
  m.extra = req.extra;
  std::map<int64_t, std::vector<RankShard>> by_rank;
  std::map<std::string, size_t> index;
  for (const TensorToSave& t : req.tensors) {
    TensorRecord rec;
    rec.name = t.name;
    rec.dtype = t.dtype;
    rec.shape = t.global_shape;
    rec.spec = t.spec;
    if (!index.emplace(t.name, m.tensors.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint save: tensors: duplicate name '", t.name, "'"));
    }
    m.tensors.push_back(std::move(rec));
    for (const ShardData& s : t.shards) {
      if (s.data.defined() && s.data.dtype() != t.dtype) {
        return absl::InvalidArgumentError(absl::StrCat("checkpoint save: tensor '", t.name, "': shard dtype ",
                                                       DTypeName(s.data.dtype()), " != ", DTypeName(t.dtype)));
      }
      if (s.rank < 0 || s.rank >= req.world_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint save: tensor '", t.name, "': shard rank ", s.rank, " outside world_size"));
      }
      by_rank[s.rank].push_back({t.name, s.offsets, s.data});
    }
  }
  LOOM_ASSIGN_OR_RETURN(std::string tmp, BeginSave(root, req.step));
  absl::Status status;
  for (const auto& [rank, shards] : by_rank) {
    auto written = WriteRankShards(tmp, rank, shards);
    if (!written.ok()) {
      status = written.status();
      break;
    }
    for (WrittenShard& w : *written) m.tensors[index[w.tensor]].shards.push_back(std::move(w.record));
  }
  if (status.ok()) status = CommitSave(root, tmp, m, options);
  if (!status.ok()) RemoveTree(tmp).IgnoreError();  // best effort; CleanStale catches the rest
  return status;
}

SaveRequest SnapshotRequest(const SaveRequest& req, const SaveRequest* reuse) {
  SaveRequest copy = req;
  for (size_t i = 0; i < copy.tensors.size(); ++i) {
    for (size_t k = 0; k < copy.tensors[i].shards.size(); ++k) {
      ShardData& s = copy.tensors[i].shards[k];
      if (!s.data.defined()) continue;
      if (reuse != nullptr && i < reuse->tensors.size() && k < reuse->tensors[i].shards.size()) {
        Tensor old = reuse->tensors[i].shards[k].data;
        // use_count 2: `reuse` and `old` (nobody else holds the buffer).
        if (old.defined() && old.dtype() == s.data.dtype() && old.shape() == s.data.shape() && old.is_contiguous() &&
            old.storage() && old.storage().use_count() == 2 && old.CopyFrom(s.data).ok()) {
          s.data = old;
          continue;
        }
      }
      s.data = s.data.Clone();
    }
  }
  return copy;
}

AsyncCheckpointer::AsyncCheckpointer(std::string root, CheckpointOptions options)
    : root_(std::move(root)), options_(options) {}

AsyncCheckpointer::~AsyncCheckpointer() { Wait().IgnoreError(); }

absl::Status AsyncCheckpointer::Wait() {
  if (thread_.joinable()) thread_.join();
  absl::Status s = result_;
  result_ = absl::OkStatus();
  return s;
}

absl::Status AsyncCheckpointer::SaveAsync(const SaveRequest& req) {
  LOOM_RETURN_IF_ERROR(Wait());
  auto snapshot = std::make_shared<SaveRequest>(SnapshotRequest(req, last_snapshot_.get()));
  last_snapshot_ = snapshot;
  done_ = false;
  thread_ = std::thread([this, snapshot] {
    result_ = SaveCheckpoint(root_, *snapshot, options_);
    done_ = true;
  });
  return absl::OkStatus();
}

}  // namespace loom::runtime::checkpoint
