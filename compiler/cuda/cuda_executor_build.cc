// CudaExecutor (cuda_executor_impl.h): Build turns one planned Launch into a
// closure over fixed device pointers (calls_) and its description (desc_),
// dispatching on the launch kind. GEMMs (cuBLASLt, epilogues, batches),
// pointwise kernels and strided copies (the generator of
// kernels/cuda/codegen/pointwise.h), fill and copy_back are built here; the
// other kinds in cuda_executor_kernels.cc, _attention.cc and _optimizer.cc.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor_impl.h"
#include "compiler/cuda/pointwise_body.h"
#include "kernels/cuda/fill.h"
#include "kernels/cuda/gemm.h"

namespace loom::compiler::cuda::cuda_executor_internal {

namespace {

std::vector<int64_t> Contig(const Shape& s) {
  Strides c = ContiguousStrides(s);
  return std::vector<int64_t>(c.begin(), c.end());
}

loom::kernels::cuda::Epilogue ToEpilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone: break;
    case GemmEpilogue::kBias: return loom::kernels::cuda::Epilogue::kBias;
    case GemmEpilogue::kBiasGeluAux: return loom::kernels::cuda::Epilogue::kBiasGeluAux;
    case GemmEpilogue::kDGelu: return loom::kernels::cuda::Epilogue::kDGelu;
  }
  return loom::kernels::cuda::Epilogue::kNone;
}

}  // namespace

// A strided copy/cast through the pointwise generator (an empty body).
absl::StatusOr<Call> Impl::CopyCall(int in, int64_t in_offset, std::vector<int64_t> in_strides, Shape out_shape,
                                    int out, int64_t out_offset, std::vector<int64_t> out_strides) {
  cg::PwSpec spec;
  bodies_.push_back(std::make_unique<cg::PwBody>(cg::CopyBody()));
  spec.body = bodies_.back().get();
  spec.inputs = {{Dt(in), std::move(in_strides), in_offset}};
  spec.out_shape = std::vector<int64_t>(out_shape.begin(), out_shape.end());
  spec.out_dtype = Dt(out);
  spec.out_strides = std::move(out_strides);
  spec.out_offset = out_offset;
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<cg::PointwiseKernel> k, cg::PointwiseKernel::Uncompiled(spec));
  const cg::PointwiseKernel* kp = k.get();
  kernels_.push_back(std::move(k));
  const void* src = Ptr(in);
  void* dst = Ptr(out);
  cudaStream_t s = stream_;
  return Call([kp, src, dst, s]() { return kp->Launch({src}, dst, s); });
}

absl::Status Impl::Build(const Launch& l) {
  std::string desc = absl::StrCat(LaunchKindName(l.kind), " ", l.op);
  std::vector<std::string> dts;
  int64_t bytes = 0;
  for (int v : l.inputs) {
    dts.push_back(std::string(DTypeName(Dt(v))));
    bytes += plan_.Bytes(v);
  }
  dts.push_back("->");
  for (int v : l.outputs) {
    dts.push_back(std::string(DTypeName(Dt(v))));
    bytes += plan_.Bytes(v);
  }
  absl::StrAppend(&desc, " [", absl::StrJoin(dts, " "), "] ", bytes, "B");
  absl::Status st;
  switch (l.kind) {
    case LaunchKind::kGemm: st = BuildGemm(l, &desc); break;
    case LaunchKind::kPointwise: st = BuildPointwise(l); break;
    case LaunchKind::kCopy:
    case LaunchKind::kSliceBackward:
    case LaunchKind::kConcat: st = BuildCopies(l); break;
    case LaunchKind::kFill: {
      const kern::Dt dt = ToDt(Dt(l.outputs[0]));
      const int64_t n = Numel(l.outputs[0]);
      const double value = l.attrs.GetFloat("value", 0.0);
      void* dst = Ptr(l.outputs[0]);
      cudaStream_t s = stream_;
      calls_.push_back([=]() { return CudaErr(kern::Fill(dt, n, value, dst, s), "fill"); });
      break;
    }
    case LaunchKind::kEmbedding:
    case LaunchKind::kEmbeddingBackward:
    case LaunchKind::kEmbeddingBackwardSorted: st = BuildEmbedding(l); break;
    case LaunchKind::kSumTo: st = BuildSumTo(l); break;
    case LaunchKind::kRowReduce: st = BuildRowReduce(l); break;
    case LaunchKind::kLayerNorm: st = BuildLayerNorm(l, &desc); break;
    case LaunchKind::kLayerNormBackward: st = BuildLayerNormBackward(l); break;
    case LaunchKind::kRmsNorm:
    case LaunchKind::kRmsNormBackward: st = BuildRmsNorm(l); break;
    case LaunchKind::kRope: st = BuildRope(l); break;
    case LaunchKind::kCrossEntropy:
    case LaunchKind::kCrossEntropyBackward:
    case LaunchKind::kCrossEntropyFused: st = BuildCrossEntropy(l); break;
    case LaunchKind::kSdpa:
    case LaunchKind::kSdpaBackward: st = BuildAttention(l, &desc); break;
    case LaunchKind::kGradNorm: st = BuildGradNorm(l, &desc); break;
    case LaunchKind::kAdamW: st = BuildAdamW(l, &desc); break;
    case LaunchKind::kCopyBack: st = BuildCopyBack(l); break;
    case LaunchKind::kCollective: st = BuildCollective(l); break;
    case LaunchKind::kVocabOnehot: st = BuildVocabOnehot(l); break;
  }
  LOOM_RETURN_IF_ERROR(st);
  desc_.push_back(std::move(desc));
  return absl::OkStatus();
}

// The CUBINs of every kernel Build generated (kernels_, row_kernels_): all
// at once through codegen's CompileAll, each distinct source once, on
// CudaOptions::compile_threads threads.
absl::Status Impl::CompileKernels(CudaBuildStats* stats) {
  std::vector<cg::CompileJob> jobs;
  for (const auto& k : kernels_) jobs.push_back(k->job());
  for (const auto& k : row_kernels_) jobs.push_back(k->job());
  cg::CompileAllStats cs;
  absl::StatusOr<std::vector<cg::CompiledCubin>> done = cg::CompileAll(jobs, Codegen(), o_.compile_threads, &cs);
  stats->kernels = cs.jobs;
  stats->distinct_sources = cs.distinct;
  stats->cache_hits = cs.cache_hits;
  stats->nvrtc_compiles = cs.compiled;
  stats->compile_threads = cs.threads;
  stats->nvrtc_seconds = cs.nvrtc_seconds;
  if (!done.ok()) return Annotate(done.status(), "CudaExecutor: generated kernels");
  size_t i = 0;
  for (const auto& k : kernels_) k->SetCompiled(std::move((*done)[i++]));
  for (const auto& k : row_kernels_) k->SetCompiled(std::move((*done)[i++]));
  return absl::OkStatus();
}

// One cuBLASLt GEMM (or `batch` of them) with the plan's epilogue.
absl::Status Impl::BuildGemm(const Launch& l, std::string* desc) {
  const GemmPlan& m = l.gemm;
  const auto& in = l.inputs;
  const auto& out = l.outputs;
  loom::kernels::cuda::GemmArgs ga;
  ga.dtype = m.ab_dtype;
  ga.m = m.m;
  ga.n = m.n;
  ga.k = m.k;
  ga.trans_a = m.trans_a;
  ga.trans_b = m.trans_b;
  ga.a = Ptr(in[0]);
  ga.b = Ptr(in[1]);
  ga.d = Ptr(out[0]);
  ga.d_f32 = m.ab_dtype == DType::kBF16 && m.d_dtype == DType::kF32;
  ga.stream = stream_;
  ga.epilogue = ToEpilogue(m.epilogue);
  if (m.accumulate) ga.beta = 1.0f;  // D += product (gemm_accumulate); in[2] is D itself
  if (m.epilogue == GemmEpilogue::kBias || m.epilogue == GemmEpilogue::kBiasGeluAux) ga.bias = Ptr(in[2]);
  if (m.epilogue == GemmEpilogue::kBiasGeluAux) ga.aux = Ptr(out[1]);
  if (m.epilogue == GemmEpilogue::kDGelu) ga.aux = const_cast<void*>(Ptr(in[2]));
  absl::StrAppend(desc, " m=", m.m, " n=", m.n, " k=", m.k, " tA=", m.trans_a, " tB=", m.trans_b,
                  " epi=", GemmEpilogueName(m.epilogue), m.batch > 1 ? absl::StrCat(" batch=", m.batch) : "");
  const int64_t ea = DTypeSize(m.ab_dtype), ed = DTypeSize(m.d_dtype);
  const GemmPlan mp = m;
  calls_.push_back([ga, mp, ea, ed]() {
    for (int64_t b = 0; b < mp.batch; ++b) {
      loom::kernels::cuda::GemmArgs x = ga;
      x.a = static_cast<const char*>(ga.a) + b * mp.stride_a * ea;
      x.b = static_cast<const char*>(ga.b) + b * mp.stride_b * ea;
      x.d = static_cast<char*>(ga.d) + b * mp.stride_d * ed;
      LOOM_RETURN_IF_ERROR(loom::kernels::cuda::Gemm(x));
    }
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

// A fused node or one elementwise op: one generated pointwise kernel.
absl::Status Impl::BuildPointwise(const Launch& l) {
  const auto& in = l.inputs;
  const int out = l.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cg::PwBody body, PointwiseBodyOf(g_, l.node));
  bodies_.push_back(std::make_unique<cg::PwBody>(std::move(body)));
  cg::PwSpec spec;
  spec.body = bodies_.back().get();
  const Shape& os = Sh(out);
  for (int v : in) spec.inputs.push_back({Dt(v), cg::BroadcastStrides(Sh(v), os), 0});
  spec.out_shape = std::vector<int64_t>(os.begin(), os.end());
  spec.out_dtype = Dt(out);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<cg::PointwiseKernel> k, cg::PointwiseKernel::Uncompiled(spec));
  const cg::PointwiseKernel* kp = k.get();
  kernels_.push_back(std::move(k));
  std::vector<const void*> ptrs;
  for (int v : in) ptrs.push_back(Ptr(v));
  void* dst = Ptr(out);
  cudaStream_t s = stream_;
  calls_.push_back([kp, ptrs, dst, s]() { return kp->Launch(ptrs, dst, s); });
  return absl::OkStatus();
}

// kCopy (one strided copy), kSliceBackward (zero-fill, then the copy into the
// window), kConcat (one copy per input into its window).
absl::Status Impl::BuildCopies(const Launch& l) {
  const auto& in = l.inputs;
  const int out = l.outputs[0];
  std::vector<Call> parts;
  for (size_t k = 0; k < l.copies.size(); ++k) {
    const CopyGeom& c = l.copies[k];
    LOOM_ASSIGN_OR_RETURN(Call call, CopyCall(in[k], c.src_offset, c.src_strides, c.shape, out, c.dst_offset,
                                              c.dst_strides));
    parts.push_back(std::move(call));
  }
  if (l.kind == LaunchKind::kCopy) {
    calls_.push_back(std::move(parts.at(0)));
  } else if (l.kind == LaunchKind::kSliceBackward) {
    void* dst = Ptr(out);
    const int64_t nb = plan_.Bytes(out);
    cudaStream_t s = stream_;
    calls_.push_back([call = parts.at(0), dst, nb, s]() {
      LOOM_CU(cudaMemsetAsync(dst, 0, nb, s), "slice_backward: zero");
      return call();
    });
  } else {
    calls_.push_back([parts]() {
      for (const Call& c : parts) LOOM_RETURN_IF_ERROR(c());
      return absl::OkStatus();
    });
  }
  return absl::OkStatus();
}

// An output that updates graph input k but was not written in place: a copy
// (or cast) into the input's buffer, then its bf16 shadow refreshed.
absl::Status Impl::BuildCopyBack(const Launch& l) {
  const int k = l.copy_back_input;
  const int iv = g_.inputs()[k].value;
  if (plan_.split[k])  // split_master leaves a parameter that is copied back plain
    return absl::InternalError(absl::StrCat("copy_back: input ", g_.inputs()[k].name, " is stored split"));
  const int src_v = l.inputs[0];
  cudaStream_t s = stream_;
  if (Dt(src_v) != Dt(iv)) {
    LOOM_ASSIGN_OR_RETURN(Call c, CopyCall(src_v, 0, Contig(Sh(src_v)), Sh(src_v), iv, 0, {}));
    calls_.push_back(std::move(c));
  } else {
    const void* src = Ptr(src_v);
    void* dst = input_buf_[k];
    const int64_t nb = plan_.Bytes(iv);
    calls_.push_back([=]() {
      LOOM_CU(cudaMemcpyAsync(dst, src, nb, cudaMemcpyDeviceToDevice, s), "copy_back");
      return absl::OkStatus();
    });
  }
  if (shadow_buf_[k]) {
    float* src = static_cast<float*>(input_buf_[k]);
    void* dst = shadow_buf_[k];
    const int64_t n = Numel(iv);
    auto prev = calls_.back();
    calls_.back() = [=]() {
      LOOM_RETURN_IF_ERROR(prev());
      return CudaErr(kern::CastF32ToBF16(n, src, dst, s), "copy_back: shadow");
    };
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler::cuda::cuda_executor_internal
