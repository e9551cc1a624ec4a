// CudaExecutor (cuda_executor_impl.h): Build turns one planned Launch into a
// closure over fixed device pointers (calls_) and its description (desc_).
// GEMMs (cuBLASLt, epilogues, batches), pointwise kernels and strided copies
// (codegen), fill and copy_back are here; the other kinds go to BuildKernel,
// BuildAttention, BuildOptimizer, and BuildRowwise first.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "compiler/cuda/cuda_executor_impl.h"
#include "kernels/cuda/gemm.h"

namespace loom::compiler::cuda::cuda_executor_internal {

namespace {

std::vector<int64_t> Contig(const Shape& s) {
  Strides c = ContiguousStrides(s);
  return std::vector<int64_t>(c.begin(), c.end());
}

}  // namespace

// A strided copy/cast through codegen (empty body).
absl::StatusOr<Call> Impl::CopyCall(int in, int64_t in_offset, std::vector<int64_t> in_strides, Shape out_shape,
                                    int out, int64_t out_offset, std::vector<int64_t> out_strides) {
  auto body = std::make_unique<Graph>("copy");
  const int x = body->AddInput("x", {g_dtype_or(in), out_shape});
  body->AddOutput(x);
  cg::PwSpec spec;
  spec.body = body.get();
  spec.inputs = {{Dt(in), std::move(in_strides), in_offset}};
  spec.out_shape = std::vector<int64_t>(out_shape.begin(), out_shape.end());
  spec.out_dtype = Dt(out);
  spec.out_strides = std::move(out_strides);
  spec.out_offset = out_offset;
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<cg::PointwiseKernel> k, cg::PointwiseKernel::Compile(spec));
  const cg::PointwiseKernel* kp = k.get();
  kernels_.push_back(std::move(k));
  bodies_.push_back(std::move(body));
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
  cudaStream_t s = stream_;
  void* scratch = scratch_;
  const auto& in = l.inputs;
  const auto& out = l.outputs;
  LOOM_ASSIGN_OR_RETURN(const bool generated, BuildRowwise(l, &desc));
  if (generated) {
    desc_.push_back(std::move(desc));
    return absl::OkStatus();
  }
  switch (l.kind) {
    case LaunchKind::kGemm: {
      const GemmPlan& m = l.gemm;
      loom::cuda::GemmArgs ga;
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
      ga.stream = s;
      switch (m.epilogue) {
        case GemmEpilogue::kNone: break;
        case GemmEpilogue::kBias:
          ga.epilogue = loom::cuda::Epilogue::kBias;
          ga.bias = Ptr(in[2]);
          break;
        case GemmEpilogue::kBiasGeluAux:
          ga.epilogue = loom::cuda::Epilogue::kBiasGeluAux;
          ga.bias = Ptr(in[2]);
          ga.aux = Ptr(out[1]);
          break;
        case GemmEpilogue::kDGelu:
          ga.epilogue = loom::cuda::Epilogue::kDGelu;
          ga.aux = const_cast<void*>(Ptr(in[2]));
          break;
        case GemmEpilogue::kDGeluBgrad:
          ga.epilogue = loom::cuda::Epilogue::kDGeluBgrad;
          ga.aux = const_cast<void*>(Ptr(in[2]));
          ga.bias_grad = Ptr(out[1]);
          break;
      }
      absl::StrAppend(&desc, " m=", m.m, " n=", m.n, " k=", m.k, " tA=", m.trans_a, " tB=", m.trans_b,
                      " epi=", GemmEpilogueName(m.epilogue), m.batch > 1 ? absl::StrCat(" batch=", m.batch) : "");
      const int64_t ea = DTypeSize(m.ab_dtype), ed = DTypeSize(m.d_dtype);
      const GemmPlan mp = m;
      float* ws = static_cast<float*>(scratch);
      const kern::Dt bdt = ToDt(m.d_dtype);
      calls_.push_back([ga, mp, ea, ed, ws, bdt, s]() {
        for (int64_t b = 0; b < mp.batch; ++b) {
          loom::cuda::GemmArgs x = ga;
          x.a = static_cast<const char*>(ga.a) + b * mp.stride_a * ea;
          x.b = static_cast<const char*>(ga.b) + b * mp.stride_b * ea;
          x.d = static_cast<char*>(ga.d) + b * mp.stride_d * ed;
          absl::Status st = loom::cuda::Gemm(x);
          if (st.code() == absl::StatusCode::kUnimplemented && x.epilogue == loom::cuda::Epilogue::kDGeluBgrad) {
            // No cuBLASLt algorithm with the fused bias gradient: dgelu, then column sums.
            x.epilogue = loom::cuda::Epilogue::kDGelu;
            x.bias_grad = nullptr;
            LOOM_RETURN_IF_ERROR(loom::cuda::Gemm(x));
            st = CudaErr(kern::SumRows(bdt, bdt, mp.m, mp.n, x.d, ga.bias_grad, ws, s), "dgelu bias grad");
          }
          LOOM_RETURN_IF_ERROR(st);
        }
        return absl::OkStatus();
      });
      break;
    }
    case LaunchKind::kPointwise: {
      const Node& n = g_.nodes()[l.node];
      const Graph* body = nullptr;
      if (n.op == kFusedOp) {
        body = n.subgraph.get();
      } else {
        std::vector<TensorMeta> metas;
        for (int v : n.inputs) metas.push_back(g_.meta(v));
        LOOM_ASSIGN_OR_RETURN(Graph b, cg::MakeSingleOpBody(n.op, n.attrs, metas));
        bodies_.push_back(std::make_unique<Graph>(std::move(b)));
        body = bodies_.back().get();
      }
      cg::PwSpec spec;
      spec.body = body;
      const Shape& os = Sh(out[0]);
      for (int v : in) spec.inputs.push_back({Dt(v), cg::BroadcastStrides(Sh(v), os), 0});
      spec.out_shape = std::vector<int64_t>(os.begin(), os.end());
      spec.out_dtype = Dt(out[0]);
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<cg::PointwiseKernel> k, cg::PointwiseKernel::Compile(spec));
      const cg::PointwiseKernel* kp = k.get();
      kernels_.push_back(std::move(k));
      std::vector<const void*> ptrs;
      for (int v : in) ptrs.push_back(Ptr(v));
      void* dst = Ptr(out[0]);
      calls_.push_back([kp, ptrs, dst, s]() { return kp->Launch(ptrs, dst, s); });
      break;
    }
    case LaunchKind::kCopy: {
      const CopyGeom& c = l.copies.at(0);
      LOOM_ASSIGN_OR_RETURN(Call call, CopyCall(in[0], c.src_offset, c.src_strides, c.shape, out[0], c.dst_offset,
                                                c.dst_strides));
      calls_.push_back(std::move(call));
      break;
    }
    case LaunchKind::kSliceBackward: {
      const CopyGeom& c = l.copies.at(0);
      LOOM_ASSIGN_OR_RETURN(Call call, CopyCall(in[0], c.src_offset, c.src_strides, c.shape, out[0], c.dst_offset,
                                                c.dst_strides));
      void* dst = Ptr(out[0]);
      const int64_t nb = plan_.Bytes(out[0]);
      calls_.push_back([call, dst, nb, s]() {
        LOOM_CU(cudaMemsetAsync(dst, 0, nb, s), "slice_backward: zero");
        return call();
      });
      break;
    }
    case LaunchKind::kConcat: {
      std::vector<Call> parts;
      for (size_t k = 0; k < in.size(); ++k) {
        const CopyGeom& c = l.copies.at(k);
        LOOM_ASSIGN_OR_RETURN(Call call, CopyCall(in[k], c.src_offset, c.src_strides, c.shape, out[0],
                                                  c.dst_offset, c.dst_strides));
        parts.push_back(std::move(call));
      }
      calls_.push_back([parts]() {
        for (const Call& c : parts) LOOM_RETURN_IF_ERROR(c());
        return absl::OkStatus();
      });
      break;
    }
    case LaunchKind::kFill: {
      const kern::Dt dt = ToDt(Dt(out[0]));
      const int64_t n = Numel(out[0]);
      const double value = l.attrs.GetFloat("value", 0.0);
      void* dst = Ptr(out[0]);
      calls_.push_back([=]() { return CudaErr(kern::Fill(dt, n, value, dst, s), "fill"); });
      break;
    }
    case LaunchKind::kEmbedding:
    case LaunchKind::kEmbeddingBackward:
    case LaunchKind::kSumTo:
    case LaunchKind::kLayerNorm:
    case LaunchKind::kLayerNormBackward:
    case LaunchKind::kRmsNorm:
    case LaunchKind::kRmsNormBackward:
    case LaunchKind::kRope:
    case LaunchKind::kCrossEntropy:
    case LaunchKind::kCrossEntropyBackward:
    case LaunchKind::kCrossEntropyFused: LOOM_RETURN_IF_ERROR(BuildKernel(l, s, scratch)); break;
    case LaunchKind::kSdpa:
    case LaunchKind::kSdpaBackward: LOOM_RETURN_IF_ERROR(BuildAttention(l, s, scratch, &desc)); break;
    case LaunchKind::kGradNorm:
    case LaunchKind::kAdamW: LOOM_RETURN_IF_ERROR(BuildOptimizer(l, s, scratch, &desc)); break;
    case LaunchKind::kCopyBack: {
      const int k = l.copy_back_input;
      const int iv = g_.inputs()[k].value;
      if (Dt(in[0]) != Dt(iv)) {
        LOOM_ASSIGN_OR_RETURN(Call c, CopyCall(in[0], 0, Contig(Sh(in[0])), Sh(in[0]), iv, 0, {}));
        calls_.push_back(std::move(c));
      } else {
        const void* src = Ptr(in[0]);
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
      break;
    }
  }
  desc_.push_back(std::move(desc));
  return absl::OkStatus();
}

}  // namespace loom::compiler::cuda::cuda_executor_internal
