// Registers backend "cuda:gloo": a StagedBackend over the CUDA copier and an
// inner "gloo" backend on its own store prefix and connections.
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/staging/cuda_copier.h"
#include "collectives/staging/staged_backend.h"

namespace loom::collectives::staging {
namespace {

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
  return std::shared_ptr<Backend>(std::make_shared<StagedBackend>("cuda:gloo", *inner, std::move(copier), o));
}

const bool kRegistered = RegisterBackend("cuda:gloo", CreateCudaGloo);

}  // namespace
}  // namespace loom::collectives::staging
