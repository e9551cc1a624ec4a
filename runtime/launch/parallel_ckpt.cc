#include "runtime/launch/parallel_ckpt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/init_from.h"
#include "runtime/checkpoint/loader.h"
#include "runtime/jobspec/jobspec.h"

namespace loom::launch {
namespace {

absl::Status WorldBarrier(collectives::ProcessGroup& world) {
  LOOM_ASSIGN_OR_RETURN(auto w, world.Barrier({}));
  return w->Wait();
}

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

absl::StatusOr<std::unique_ptr<ParallelState>> ParallelState::Create(const v1::JobSpec& spec,
                                                                     parallel::ParallelTrainer& trainer,
                                                                     const dtensor::MeshShape& mesh, int rank) {
  std::unique_ptr<ParallelState> s(new ParallelState());
  s->spec_ = spec;
  s->trainer_ = &trainer;
  s->mesh_ = mesh;
  s->rank_ = rank;
  s->coords_ = mesh.Coordinates(rank);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const models::ParamInfo& p : trainer.param_info()) shapes[p.name] = std::vector<int64_t>(p.shape.begin(), p.shape.end());
  const compiler::Graph& g = trainer.program().graph;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const std::string& name = g.inputs()[k].name;
    const int ki = static_cast<int>(k);
    // Saved: parameters and AdamW state; not the per-step inputs (batch, lr,
    // step, an imported model's dropout step) nor its constant buffers.
    const compiler::InputKind kind = g.inputs()[k].kind;
    if (kind == compiler::InputKind::kInput || kind == compiler::InputKind::kConst) continue;
    std::string base = name;
    if (!shapes.count(base) && base.size() > 2 && (absl::EndsWith(base, ".m") || absl::EndsWith(base, ".v")))
      base = base.substr(0, base.size() - 2);
    auto it = shapes.find(base);
    if (it == shapes.end())
      return absl::InternalError(absl::StrCat("checkpoint: program input '", name, "' is neither a parameter nor its AdamW state"));
    Saved sv;
    sv.input = ki;
    sv.name = name;
    sv.global_shape = it->second;
    sv.spec = trainer.specs().at(name);
    if (sv.spec.has_partial())
      return absl::InternalError(absl::StrCat("checkpoint: input '", name, "' is partial (", sv.spec.ToString(), ")"));
    s->saved_.push_back(std::move(sv));
  }
  // Initial parameters from init_from, unless a checkpoint will be resumed.
  if (!spec.init_from().empty()) {
    bool resume = false;
    std::error_code ec;
    if (!spec.checkpoint().dir().empty() && std::filesystem::is_directory(spec.checkpoint().dir(), ec)) {
      LOOM_ASSIGN_OR_RETURN(auto list, checkpoint::ListCheckpoints(spec.checkpoint().dir()));
      resume = !list.empty();
    }
    if (!resume) LOOM_RETURN_IF_ERROR(s->LoadInit(spec.init_from(), shapes));
  }
  return s;
}

absl::Status ParallelState::LoadInit(const std::string& path,
                                     const std::map<std::string, std::vector<int64_t>>& params) {
  LOOM_ASSIGN_OR_RETURN(auto source, checkpoint::InitSource::Open(path, spec_.model()));
  if (rank_ == 0) {
    std::printf("initial parameters: %s\n", source->Describe().c_str());
    std::fflush(stdout);
  }
  for (const Saved& sv : saved_) {
    if (!params.count(sv.name)) continue;  // AdamW moments start from zero
    LOOM_ASSIGN_OR_RETURN(auto ranges, dtensor::LocalBlock(sv.global_shape, sv.spec, coords_));
    std::vector<int64_t> off, len;
    for (const auto& r : ranges) {
      off.push_back(r.offset);
      len.push_back(r.length);
    }
    if (std::find(len.begin(), len.end(), 0) != len.end()) continue;
    LOOM_ASSIGN_OR_RETURN(Tensor block, source->ReadBlock(sv.name, off, len));
    LOOM_RETURN_IF_ERROR(trainer_->mutable_program_inputs()[sv.input].CopyFrom(block));
  }
  return absl::OkStatus();
}


std::map<std::string, Tensor> ParallelState::LocalParameters() const {
  std::map<std::string, Tensor> out;
  for (const models::ParamInfo& p : trainer_->param_info()) {
    const int k = trainer_->program().graph.FindInput(p.name);
    if (k >= 0) out.emplace(p.name, trainer_->mutable_program_inputs()[k]);
  }
  return out;
}

absl::Status ParallelState::Save(const std::string& root, const data::SamplerState& sampler, int keep,
                                 collectives::ProcessGroup& world, checkpoint::CommitGate* gate) {
  const std::string tmp = absl::StrCat(root, "/.tmp.", checkpoint::StepDirName(trainer_->step()));
  absl::Status s = SaveSteps(root, tmp, sampler, keep, world, gate);
  if (!s.ok() && rank_ == 0) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);  // what the ranks wrote before one failed
  }
  return s;
}

absl::Status ParallelState::SaveSteps(const std::string& root, const std::string& tmp,
                                      const data::SamplerState& sampler, int keep, collectives::ProcessGroup& world,
                                      checkpoint::CommitGate* gate) {
  if (rank_ == 0) LOOM_RETURN_IF_ERROR(checkpoint::BeginSave(root, trainer_->step()).status());
  LOOM_RETURN_IF_ERROR(WorldBarrier(world));
  std::vector<checkpoint::RankShard> shards;
  for (const Saved& sv : saved_) {
    bool owner = true;
    for (int d = 0; d < mesh_.ndim(); ++d)
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
    const Tensor& t = trainer_->mutable_program_inputs()[sv.input];
    rs.data = t.is_contiguous() ? t : t.Clone();
    shards.push_back(std::move(rs));
  }
  {
    LOOM_ASSIGN_OR_RETURN(auto written, checkpoint::WriteRankShards(tmp, rank_, shards));
    std::ofstream out(RecordsPath(tmp, rank_) + ".part");
    for (const auto& w : written) out << RecordLine(w);
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("checkpoint save: writing ", RecordsPath(tmp, rank_)));
    std::error_code ec;
    std::filesystem::rename(RecordsPath(tmp, rank_) + ".part", RecordsPath(tmp, rank_), ec);
    if (ec) return absl::InternalError(absl::StrCat("checkpoint save: ", ec.message()));
  }
  LOOM_RETURN_IF_ERROR(WorldBarrier(world));
  if (rank_ != 0) return absl::OkStatus();
  std::map<std::string, std::vector<checkpoint::ShardRecord>> records;
  for (int64_t r = 0; r < world.size(); ++r) {
    LOOM_RETURN_IF_ERROR(ReadRecords(RecordsPath(tmp, r), &records));
    std::filesystem::remove(RecordsPath(tmp, r));
  }
  checkpoint::Manifest m;
  m.step = trainer_->step();
  m.world_size = world.size();
  m.sampler = sampler;
  m.job_spec = spec_.ShortDebugString();
  m.layout = mesh_.ToString();
  for (const Saved& sv : saved_) {
    checkpoint::TensorRecord tr;
    tr.name = sv.name;
    tr.dtype = trainer_->mutable_program_inputs()[sv.input].dtype();
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

absl::StatusOr<int64_t> ParallelState::Restore(const std::string& root, data::Sampler* sampler, std::string* log,
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
  for (const Saved& sv : saved_) {
    const checkpoint::TensorRecord* t = reader.manifest().Find(sv.name);
    if (t == nullptr)
      return absl::FailedPreconditionError(absl::StrCat(lr.ckpt.dir, ": no tensor '", sv.name, "' for this model"));
    if (t->shape != sv.global_shape)
      return absl::FailedPreconditionError(absl::StrCat(lr.ckpt.dir, ": tensor '", sv.name, "' has another shape than this model's"));
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
    absl::Status s = trainer_->mutable_program_inputs()[sv.input].CopyFrom(part.dtype() == trainer_->mutable_program_inputs()[sv.input].dtype() ? part : part.To(trainer_->mutable_program_inputs()[sv.input].dtype()));
    LOOM_RETURN_IF_ERROR(s);
  }
  LOOM_RETURN_IF_ERROR(sampler->Restore(reader.manifest().sampler));
  trainer_->set_step(lr.ckpt.step);
  if (log) *log = lr.Explain();
  return trainer_->step();
}

}  // namespace loom::launch
