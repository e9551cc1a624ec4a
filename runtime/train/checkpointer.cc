#include "runtime/train/checkpointer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace loom::runtime::train {
namespace {

std::string RecordsPath(const std::string& tmp, int64_t rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "/.records.%05lld", static_cast<long long>(rank));
  return tmp + buf;
}

// One line per shard: tensor key file rank begin end crc ndim offsets... lengths...
std::string RecordLine(const checkpoint::WrittenShard& w) {
  const checkpoint::ShardRecord& r = w.record;
  std::string s = absl::StrCat(w.tensor, " ", r.key, " ", r.file, " ", r.rank, " ", r.byte_begin, " ", r.byte_end,
                               " ", r.crc32c, " ", r.offsets.size());
  for (int64_t o : r.offsets) absl::StrAppend(&s, " ", o);
  for (int64_t l : r.lengths) absl::StrAppend(&s, " ", l);
  return s + "\n";
}

absl::Status ReadRecords(const std::string& path, std::map<std::string, std::vector<checkpoint::ShardRecord>>* out) {
  std::ifstream in(path);
  if (!in) return absl::InternalError(absl::StrCat("checkpoint save: missing shard records ", path));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tensor;
    checkpoint::ShardRecord r;
    size_t nd = 0;
    ls >> tensor >> r.key >> r.file >> r.rank >> r.byte_begin >> r.byte_end >> r.crc32c >> nd;
    r.offsets.resize(nd);
    r.lengths.resize(nd);
    for (auto& o : r.offsets) ls >> o;
    for (auto& l : r.lengths) ls >> l;
    if (!ls) return absl::InternalError(absl::StrCat("checkpoint save: bad shard record in ", path, ": ", line));
    (*out)[tensor].push_back(std::move(r));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpointer>> Checkpointer::Create(const v1::JobSpec& spec,
                                                                   parallel::Trainer& trainer,
                                                                   collectives::ProcessGroup* world) {
  std::unique_ptr<Checkpointer> c(new Checkpointer());
  c->spec_ = spec;
  c->trainer_ = &trainer;
  c->world_ = world;
  c->coords_ = trainer.mesh().Coordinates(trainer.rank());
  const int world_size = world != nullptr ? world->size() : 1;
  if (trainer.mesh().num_ranks() != world_size)
    return absl::InternalError(absl::StrCat("checkpoint: the mesh ", trainer.mesh().ToString(), " is not the world of ",
                                            world_size, " rank(s)"));
  // The state's specs are checked now; its data is read only when saved.
  for (const auto& st : trainer.StateLayout())
    if (st.spec.has_partial())
      return absl::InternalError(
          absl::StrCat("checkpoint: input '", st.name, "' is partial (", st.spec.ToString(), ")"));
  return c;
}

absl::StatusOr<std::vector<parallel::Trainer::StateTensor>> Checkpointer::Saved() const {
  if (trainer_->state_on_device()) return trainer_->StateLayout();  // no data: moved a tensor at a time
  LOOM_ASSIGN_OR_RETURN(auto state, trainer_->State());
  for (const auto& st : state)
    if (st.spec.has_partial())
      return absl::InternalError(
          absl::StrCat("checkpoint: input '", st.name, "' is partial (", st.spec.ToString(), ")"));
  return state;
}

absl::Status Checkpointer::Barrier() {
  if (world_ == nullptr) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(auto w, world_->Barrier({}));
  return w->Wait();
}

absl::Status Checkpointer::Save(const std::string& root, const data::SamplerState& sampler, int keep,
                                checkpoint::CommitGate* gate) {
  const std::string tmp = absl::StrCat(root, "/.tmp.", checkpoint::StepDirName(trainer_->step()));
  absl::Status s = SaveSteps(root, tmp, sampler, keep, gate);
  if (!s.ok() && trainer_->rank() == 0) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);  // what the ranks wrote before one failed
  }
  return s;
}

absl::Status Checkpointer::SaveSteps(const std::string& root, const std::string& tmp,
                                     const data::SamplerState& sampler, int keep, checkpoint::CommitGate* gate) {
  const int rank = trainer_->rank();
  const int64_t world_size = trainer_->mesh().num_ranks();
  const dtensor::MeshShape& mesh = trainer_->mesh();
  // device: cuda: each tensor is read back from the GPU when its bytes are
  // written, so the host holds one at a time (Saved).
  const bool streamed = trainer_->state_on_device();
  LOOM_ASSIGN_OR_RETURN(auto saved, Saved());
  if (rank == 0) LOOM_RETURN_IF_ERROR(checkpoint::BeginSave(root, trainer_->step()).status());
  LOOM_RETURN_IF_ERROR(Barrier());
  std::vector<checkpoint::RankShard> shards;
  for (const auto& sv : saved) {
    bool owner = true;
    for (int d = 0; d < mesh.ndim(); ++d)
      if (sv.spec.placements[d].is_replicate() && coords_[d] != 0) owner = false;
    if (!owner) continue;
    LOOM_ASSIGN_OR_RETURN(auto ranges, dtensor::LocalBlock(sv.global_shape, sv.spec, coords_));
    checkpoint::RankShard rs;
    rs.tensor = sv.name;
    bool empty = false;
    for (const auto& r : ranges) {
      rs.offsets.push_back(r.offset);
      empty |= r.length == 0;
    }
    if (empty) continue;
    if (streamed) {
      rs.dtype = sv.dtype;
      for (const auto& r : ranges) rs.shape.push_back(r.length);
      rs.load = [trainer = trainer_, name = sv.name] { return trainer->ReadState(name); };
    } else {
      rs.data = sv.local.is_contiguous() ? sv.local : sv.local.Clone();
    }
    shards.push_back(std::move(rs));
  }
  {
    LOOM_ASSIGN_OR_RETURN(auto written, checkpoint::WriteRankShards(tmp, rank, shards));
    std::ofstream out(RecordsPath(tmp, rank) + ".part");
    for (const auto& w : written) out << RecordLine(w);
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("checkpoint save: writing ", RecordsPath(tmp, rank)));
    std::error_code ec;
    std::filesystem::rename(RecordsPath(tmp, rank) + ".part", RecordsPath(tmp, rank), ec);
    if (ec) return absl::InternalError(absl::StrCat("checkpoint save: ", ec.message()));
  }
  LOOM_RETURN_IF_ERROR(Barrier());
  if (rank != 0) return absl::OkStatus();
  std::map<std::string, std::vector<checkpoint::ShardRecord>> records;
  for (int64_t r = 0; r < world_size; ++r) {
    LOOM_RETURN_IF_ERROR(ReadRecords(RecordsPath(tmp, r), &records));
    std::filesystem::remove(RecordsPath(tmp, r));
  }
  checkpoint::Manifest m;
  m.step = trainer_->step();
  m.world_size = world_size;
  m.sampler = sampler;
  m.job_spec = spec_.ShortDebugString();
  m.layout = mesh.ToString();
  for (const auto& sv : saved) {
    checkpoint::TensorRecord tr;
    tr.name = sv.name;
    tr.dtype = streamed ? sv.dtype : sv.local.dtype();
    tr.shape = sv.global_shape;
    tr.spec = sv.spec.ToString();
    tr.shards = std::move(records[sv.name]);
    m.tensors.push_back(std::move(tr));
  }
  checkpoint::CheckpointOptions co;
  co.keep_last = keep;
  co.gate = gate;
  return checkpoint::CommitSave(root, tmp, m, co);
}

absl::StatusOr<int64_t> Checkpointer::Restore(const std::string& root, data::Sampler* sampler, std::string* log,
                                              const checkpoint::LoadResult* chosen) {
  std::error_code ec;
  if (root.empty() || !std::filesystem::is_directory(root, ec)) return 0;
  LOOM_ASSIGN_OR_RETURN(auto list, checkpoint::ListCheckpoints(root));
  if (list.empty()) return 0;
  checkpoint::LoadResult lr;
  if (chosen != nullptr) {
    lr = *chosen;
  } else {
    LOOM_ASSIGN_OR_RETURN(lr, checkpoint::LoadLatest(root, checkpoint::Verify::kFull));
  }
  LOOM_ASSIGN_OR_RETURN(checkpoint::CheckpointReader reader, checkpoint::CheckpointReader::Open(lr.ckpt));
  // device: cuda: each tensor goes to the GPU as it is read (one on the
  // host at a time); on the CPU into the program's own tensors (Saved).
  const bool streamed = trainer_->state_on_device();
  LOOM_ASSIGN_OR_RETURN(auto saved, Saved());
  for (const auto& sv : saved) {
    const checkpoint::TensorRecord* t = reader.manifest().Find(sv.name);
    if (t == nullptr)
      return absl::FailedPreconditionError(absl::StrCat(lr.ckpt.dir, ": no tensor '", sv.name, "' for this model"));
    if (t->shape != sv.global_shape)
      return absl::FailedPreconditionError(
          absl::StrCat(lr.ckpt.dir, ": tensor '", sv.name, "' has another shape than this model's"));
    LOOM_ASSIGN_OR_RETURN(auto ranges, dtensor::LocalBlock(sv.global_shape, sv.spec, coords_));
    std::vector<int64_t> off, len;
    bool empty = false;
    for (const auto& r : ranges) {
      off.push_back(r.offset);
      len.push_back(r.length);
      empty |= r.length == 0;
    }
    if (empty) continue;
    LOOM_ASSIGN_OR_RETURN(Tensor part, reader.ReadSlice(sv.name, off, len));
    if (streamed) {
      LOOM_RETURN_IF_ERROR(trainer_->WriteState(sv.name, part.dtype() == sv.dtype ? part : part.To(sv.dtype)));
      continue;
    }
    Tensor local = sv.local;
    LOOM_RETURN_IF_ERROR(local.CopyFrom(part.dtype() == local.dtype() ? part : part.To(local.dtype())));
  }
  if (!streamed) LOOM_RETURN_IF_ERROR(trainer_->StateChanged());
  LOOM_RETURN_IF_ERROR(sampler->Restore(reader.manifest().sampler));
  trainer_->set_step(lr.ckpt.step);
  if (log) *log = lr.Explain();
  return trainer_->step();
}

}  // namespace loom::runtime::train
