// Registers backend "cuda:gloo": a StagedBackend over the CUDA copier and an
// inner "gloo" backend on its own store prefix and connections.
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/staging/cuda_copier.h"
#include "collectives/staging/staged_backend.h"

namespace loom::collectives::staging {
namespace {

// The shared-memory group for ctx.staging_path: null for "ring", and for
// "auto" when some rank cannot share memory with the others.
absl::StatusOr<std::unique_ptr<LocalGroup>> CreateLocalGroup(const BackendContext& ctx, Copier* copier) {
  LOOM_ASSIGN_OR_RETURN(StagingPath path, ParseStagingPath(ctx.staging_path));
  if (path == StagingPath::kRing || ctx.size == 1) return std::unique_ptr<LocalGroup>();
  store::PrefixStore local_store(ctx.store, "local");
  LocalGroup::Options lo;
  lo.chunk_bytes = ctx.staging_piece_bytes;
  lo.timeout = ctx.timeout;
  std::string why_not;
  absl::StatusOr<std::unique_ptr<LocalGroup>> local =
      LocalGroup::Create(local_store, ctx.rank, ctx.size, copier, lo, &why_not);
  if (!local.ok()) return Annotate(local.status(), "cuda:gloo: the shared-memory group");
  if (*local == nullptr && path == StagingPath::kSharedMemory) {
    return absl::UnavailableError(absl::StrCat("cuda:gloo: staging_path shm: the ranks cannot share memory: ", why_not));
  }
  return local;
}

absl::StatusOr<std::shared_ptr<Backend>> CreateCudaGloo(const BackendContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Copier> copier, CreateCudaCopier());
  BackendContext inner_ctx = ctx;
  inner_ctx.store = std::make_shared<store::PrefixStore>(ctx.store, "inner");
  // The staged backend records and dumps its own ops; the inner backend's
  // file would take the CPU "gloo" backend's name.
  inner_ctx.flight_recorder_dir.clear();
  absl::StatusOr<std::shared_ptr<Backend>> inner = CreateBackend("gloo", inner_ctx);
  if (!inner.ok()) return Annotate(inner.status(), "cuda:gloo: creating the inner gloo backend");
  StagingOptions o;
  o.bucket_bytes = ctx.staging_bucket_bytes;
  o.piece_bytes = ctx.staging_piece_bytes;
  o.flight_recorder_dir = ctx.flight_recorder_dir;
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<LocalGroup> local, CreateLocalGroup(ctx, copier.get()));
  return std::shared_ptr<Backend>(
      std::make_shared<StagedBackend>("cuda:gloo", *inner, std::move(copier), o, std::move(local)));
}

const bool kRegistered = RegisterBackend("cuda:gloo", CreateCudaGloo);

}  // namespace
}  // namespace loom::collectives::staging
