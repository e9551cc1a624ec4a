// The SDPA dispatcher without a GPU: argument validation (InvalidArgument
// naming the argument, Unimplemented naming the feature), the candidate lists,
// selection by injected timings (fastest wins, tuned once per shape key, the
// backward's coordinate descent, deterministic excludes atomic dQ and cuDNN's
// backward, cuDNN picked when fastest), Choice() strings and the cache file
// round trip.
#include "kernels/cuda/attention/sdpa_dispatch.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cuda/attention/flash_attention.h"

namespace loom::kernels::cuda::attention {
namespace {

SdpaArgs Valid(int64_t d = 128, DType dt = DType::kBF16) {
  static char dummy[64];
  SdpaArgs a;
  a.dtype = dt;
  a.batch = 2, a.heads = 8, a.kv_heads = 2, a.seq_q = 256, a.seq_k = 256, a.head_dim = d;
  a.q = a.k = a.v = dummy;
  a.o = dummy;
  a.lse = reinterpret_cast<float*>(dummy);
  a.dout = dummy, a.dq = dummy, a.dk = dummy, a.dv = dummy, a.workspace = dummy;
  return a;
}

void ExpectCode(const SdpaArgs& a, absl::StatusCode code, const char* word, bool backward = false) {
  absl::Status s = SdpaValidate(a, backward);
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(std::string(s.message()).find(word), std::string::npos) << s;
}

TEST(SdpaDispatch, Validation) {
  EXPECT_TRUE(SdpaValidate(Valid(), true).ok());
  SdpaArgs a = Valid();
  static char mask[4];
  a.attn_mask = mask;
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "mask_shape");  // none given
  for (std::vector<int64_t> ok : std::vector<std::vector<int64_t>>{{256}, {256, 256}, {2, 1, 1, 256}, {8, 256, 1}}) {
    a.mask_shape = ok;
    EXPECT_TRUE(SdpaValidate(a, true).ok()) << SdpaValidate(a, true);
  }
  a.mask_shape = {3, 256, 256};  // heads are 8
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "mask_shape");
  a.mask_shape = {1, 1, 1, 1, 256};
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "mask_shape");
  a.mask_shape = {256};
  a.mask_dtype = DType::kF16;  // q is bf16
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "mask_dtype");
  a.mask_dtype = DType::kBF16;
  EXPECT_TRUE(SdpaValidate(a, false).ok());
  a = Valid();
  a.mask_shape = {256};
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "attn_mask");
  a = Valid();
  a.dropout_p = 0.1f;
  EXPECT_TRUE(SdpaValidate(a, true).ok());
  a.dropout_p = 1.5f;
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "dropout_p");
  a.dropout_p = -0.1f;
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "dropout_p");
  a = Valid();
  a.dtype = DType::kI32;
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "dtype");
  a = Valid();
  a.kv_heads = 3;
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "kv_heads");
  a = Valid();
  a.head_dim = 300;
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "head_dim");
  a = Valid();
  a.seq_k = 0;
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "seq_k");
  a = Valid();
  a.scale = NAN;
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "scale");
  a = Valid();
  a.dout = nullptr;
  EXPECT_TRUE(SdpaValidate(a, false).ok());
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "dout", true);
  a = Valid();
  a.workspace = nullptr;
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "workspace", true);
  // Select validates too, before any timing.
  int calls = 0;
  SdpaDispatcher d([&](const SdpaCandidate&, const SdpaArgs&, bool) -> absl::StatusOr<double> {
    ++calls;
    return 1.0;
  });
  a = Valid();
  a.dropout_p = 1.0f;
  EXPECT_EQ(d.Select(a, false).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 0);
}

// A forward without lse is an inference one: valid, tuned under its own key
// (its candidates write o alone, so their times differ from the training
// forward's), with the timer seeing the null lse; a backward without lse is
// refused naming it.
TEST(SdpaDispatch, InferenceForwardHasItsOwnKey) {
  SdpaArgs a = Valid();
  a.lse = nullptr;
  EXPECT_TRUE(SdpaValidate(a, false).ok()) << SdpaValidate(a, false);
  ExpectCode(a, absl::StatusCode::kInvalidArgument, "lse", /*backward=*/true);
  const std::string key = SdpaDispatcher::Key(a, false);
  EXPECT_NE(key, SdpaDispatcher::Key(Valid(), false));
  EXPECT_NE(key.find("inference"), std::string::npos) << key;
  EXPECT_EQ(SdpaDispatcher::Key(a, true), SdpaDispatcher::Key(Valid(), true)) << "lse is the backward's input";
  int training = 0, inference = 0;
  SdpaDispatcher d([&](const SdpaCandidate& c, const SdpaArgs& x, bool) -> absl::StatusOr<double> {
    ++(x.lse == nullptr ? inference : training);
    // cuDNN is fastest for inference here, flash variant 2 for training.
    if (c.kind == SdpaCandidate::kCudnn) return x.lse == nullptr ? 0.5 : 2.0;
    return c.fwd_variant == 2 ? 1.0 : 3.0;
  });
  auto inf = d.Select(a, false);
  ASSERT_TRUE(inf.ok()) << inf.status();
  EXPECT_EQ(inf->pick.kind, SdpaCandidate::kCudnn);
  auto train = d.Select(Valid(), false);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->pick.kind, SdpaCandidate::kFlash);
  EXPECT_EQ(train->pick.fwd_variant, 2);
  EXPECT_EQ(inference, FlashForwardVariants() + 1);
  EXPECT_EQ(training, FlashForwardVariants() + 1);
}

// Strided operands: the flash layer names the bad stride field (checked
// before any launch); the dispatcher refuses strides the math fallback would
// have to take, and tunes strided shapes under their own key.
TEST(SdpaDispatch, Strides) {
  alignas(16) static char buf[256];
  FlashAttnArgs f;
  f.batch = 2, f.heads = 4, f.kv_heads = 4, f.seq_q = f.seq_k = 128, f.head_dim = 64;
  f.q = f.k = f.v = f.o = buf;
  f.lse = reinterpret_cast<float*>(buf);
  f.dout = f.dq = f.dk = f.dv = f.workspace = buf;
  auto expect = [&](const char* field, const char* word, bool backward = false) {
    absl::Status s = backward ? FlashAttentionBackward(f) : FlashAttentionForward(f);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find(field), std::string::npos) << s;
    EXPECT_NE(std::string(s.message()).find(word), std::string::npos) << s;
  };
  f.q_strides.row = 32;  // < head_dim
  expect("q_strides", "head_dim");
  f.q_strides = {0, 0, 3 * 4 * 64 + 4};  // rows not 16-byte aligned
  expect("q_strides", "multiple of 8");
  f.q_strides = {128 * 3 * 256, 64, 3 * 256};  // a [B, T, 3, H, D] window: fine
  f.k = buf + 2;                               // but a misaligned base pointer
  expect("k", "16-byte aligned");
  f.k = buf;
  f.dv_strides.head = -64;
  expect("dv_strides", "non-negative", /*backward=*/true);
  SdpaArgs a = Valid(64, DType::kF32);
  a.q_strides.row = 3 * 8 * 64;
  ExpectCode(a, absl::StatusCode::kUnimplemented, "strides");
  a = Valid(96);  // flash takes D 64/128 only
  a.dq_strides.row = 3 * 8 * 96;
  ExpectCode(a, absl::StatusCode::kUnimplemented, "strides", /*backward=*/true);
  a = Valid(64);
  a.o_strides.row = 8 * 64;
  EXPECT_TRUE(SdpaValidate(a, false).ok());
  EXPECT_NE(SdpaDispatcher::Key(a, false), SdpaDispatcher::Key(Valid(64), false));
}

TEST(SdpaDispatch, Candidates) {
  SdpaDispatcher d([](const SdpaCandidate&, const SdpaArgs&, bool) -> absl::StatusOr<double> { return 1.0; });
  // Every flash variant, then cuDNN (an injected timer lists it even where
  // libcudnn is absent).
  auto fwd = d.Candidates(Valid(), false);
  ASSERT_EQ(static_cast<int>(fwd.size()), FlashForwardVariants() + 1);
  EXPECT_EQ(fwd.back().kind, SdpaCandidate::kCudnn);
  EXPECT_EQ(fwd.back().Name(128, false), "cudnn fwd (fused attention)");
  auto bwd = d.Candidates(Valid(), true);
  ASSERT_EQ(static_cast<int>(bwd.size()), FlashBackwardVariants() + 1);
  EXPECT_EQ(bwd.back().kind, SdpaCandidate::kCudnn);
  // Deterministic: no atomic dQ, so neither the atomic flash variant nor
  // cuDNN's backward; cuDNN's forward stays.
  SdpaArgs det = Valid();
  det.deterministic = true;
  for (const SdpaCandidate& c : d.Candidates(det, true)) {
    EXPECT_FALSE(FlashBwdAtomicDq(c.bwd_variant)) << c.bwd_variant;
    EXPECT_NE(c.kind, SdpaCandidate::kCudnn);
  }
  EXPECT_EQ(d.Candidates(det, false).back().kind, SdpaCandidate::kCudnn);
  // Flash does not take these: the math fallback alone, picked untimed.
  for (SdpaArgs a : {Valid(96), Valid(64, DType::kF32), Valid(32, DType::kF16)}) {
    auto c = d.Candidates(a, false);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].kind, SdpaCandidate::kMath);
    auto dec = d.Select(a, true);
    ASSERT_TRUE(dec.ok()) << dec.status();
    EXPECT_EQ(dec->pick.kind, SdpaCandidate::kMath);
    EXPECT_NE(d.Choice(a, true).find("math bwd (fallback): only candidate"), std::string::npos) << d.Choice(a, true);
  }
  EXPECT_EQ(d.timer_calls(), 0);
}

TEST(SdpaDispatch, MaskAndDropoutRunOnTheMathKernel) {
  SdpaDispatcher d([](const SdpaCandidate&, const SdpaArgs&, bool) -> absl::StatusOr<double> { return 1.0; });
  static char mask[4];
  SdpaArgs m = Valid();
  m.attn_mask = mask;
  m.mask_shape = {256, 256};
  SdpaArgs p = Valid(64);
  p.dropout_p = 0.1f;
  for (const SdpaArgs& a : {m, p}) {
    auto c = d.Candidates(a, true);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].kind, SdpaCandidate::kMath);
    ASSERT_TRUE(d.Select(a, true).ok());
    EXPECT_NE(d.Choice(a, true).find("attn_mask and dropout run on the math kernel"), std::string::npos)
        << d.Choice(a, true);
  }
  // Their shape keys differ from the plain shape's, which still times flash.
  EXPECT_NE(SdpaDispatcher::Key(m, false), SdpaDispatcher::Key(Valid(), false));
  EXPECT_NE(SdpaDispatcher::Key(p, false), SdpaDispatcher::Key(Valid(64), false));
  EXPECT_GT(d.Candidates(Valid(), false).size(), 1u);
  EXPECT_EQ(d.timer_calls(), 0);
}

TEST(SdpaDispatch, ForwardPicksFastestOnceAndExplains) {
  // Variant 3 is fastest; 5 fails (skipped).
  std::map<int, double> ms = {{1, 1.9}, {2, 1.8}, {3, 1.7}, {4, 2.5}, {6, 2.0}, {7, 2.2}};
  int calls = 0;
  SdpaDispatcher d([&](const SdpaCandidate& c, const SdpaArgs&, bool backward) -> absl::StatusOr<double> {
    EXPECT_FALSE(backward);
    ++calls;
    if (c.kind == SdpaCandidate::kCudnn) return 2.1;
    if (c.fwd_variant == 5) return absl::InternalError("launch failed");
    auto it = ms.find(c.fwd_variant);
    return it == ms.end() ? 9.0 : it->second;
  });
  SdpaArgs a = Valid();
  EXPECT_NE(d.Choice(a, false).find("not tuned yet"), std::string::npos);
  auto dec = d.Select(a, false);
  ASSERT_TRUE(dec.ok()) << dec.status();
  EXPECT_EQ(dec->pick.fwd_variant, 3);
  EXPECT_DOUBLE_EQ(dec->ms, 1.7);
  EXPECT_EQ(calls, FlashForwardVariants() + 1);
  const std::string why = d.Choice(a, false);
  EXPECT_NE(why.find(FlashForwardVariantName(3, 128)), std::string::npos) << why;
  EXPECT_NE(why.find("1.700 ms"), std::string::npos) << why;
  EXPECT_NE(why.find("next: flash " + FlashForwardVariantName(2, 128) + " 1.800 ms"), std::string::npos) << why;
  // Cached: no more timing for the same key; another key tunes again.
  ASSERT_TRUE(d.Select(a, false).ok());
  EXPECT_EQ(calls, FlashForwardVariants() + 1);
  a.causal = true;
  ASSERT_TRUE(d.Select(a, false).ok());
  EXPECT_EQ(calls, 2 * (FlashForwardVariants() + 1));
  // Every candidate failing is an error, not a pick.
  SdpaDispatcher bad([](const SdpaCandidate&, const SdpaArgs&, bool) -> absl::StatusOr<double> {
    return absl::InternalError("no device");
  });
  EXPECT_EQ(bad.Select(Valid(), false).status().code(), absl::StatusCode::kInternal);
}

TEST(SdpaDispatch, BackwardCoordinateDescent) {
  // dK/dV variant 2 fastest at the default dQ; then dQ variant 3 faster still.
  auto timer = [](const SdpaCandidate& c, const SdpaArgs&, bool backward) -> absl::StatusOr<double> {
    EXPECT_TRUE(backward);
    if (c.kind == SdpaCandidate::kCudnn) return 1.6;
    if (c.bwd_variant == kFlashBwdAtomicVariant) return 1.5;
    double t = c.bwd_variant == 2 ? 6.0 : 7.0;
    if (c.dq_variant == 3) t -= 0.5;
    return t;
  };
  SdpaDispatcher d(timer);
  SdpaArgs a = Valid();
  auto dec = d.Select(a, true);
  ASSERT_TRUE(dec.ok()) << dec.status();
  // Atomic is fastest here and is allowed...
  EXPECT_EQ(dec->pick.bwd_variant, kFlashBwdAtomicVariant);
  // ...but not when deterministic.
  a.deterministic = true;
  dec = d.Select(a, true);
  ASSERT_TRUE(dec.ok()) << dec.status();
  EXPECT_EQ(dec->pick.bwd_variant, 2);
  EXPECT_EQ(dec->pick.dq_variant, 3);
  EXPECT_DOUBLE_EQ(dec->ms, 5.5);
  // Step one: the non-atomic dK/dV variants (both atomic-dQ ones left out);
  // step two: the other dQ variants.
  int non_atomic = 0;
  for (int v = 1; v <= FlashBackwardVariants(); ++v) non_atomic += FlashBwdAtomicDq(v) ? 0 : 1;
  EXPECT_EQ(non_atomic, FlashBackwardVariants() - 2);
  EXPECT_EQ(static_cast<int>(dec->timings.size()), non_atomic + FlashDqVariants() - 1);
  EXPECT_NE(d.Choice(a, true).find("5.500 ms"), std::string::npos) << d.Choice(a, true);
}

TEST(SdpaDispatch, CudnnPickedWhenFastest) {
  // cuDNN beats every flash variant forward and backward: picked, named, no
  // coordinate descent after it, and kept through the cache file.
  int calls = 0;
  auto timer = [&](const SdpaCandidate& c, const SdpaArgs&, bool) -> absl::StatusOr<double> {
    ++calls;
    return c.kind == SdpaCandidate::kCudnn ? 0.5 : 1.0 + 0.01 * (c.fwd_variant + c.bwd_variant + c.dq_variant);
  };
  SdpaDispatcher d(timer);
  SdpaArgs a = Valid(64);
  a.causal = true;
  auto f = d.Select(a, false);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->pick.kind, SdpaCandidate::kCudnn);
  EXPECT_NE(d.Choice(a, false).find("cudnn fwd (fused attention): 0.500 ms, fastest of"), std::string::npos)
      << d.Choice(a, false);
  auto b = d.Select(a, true);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->pick.kind, SdpaCandidate::kCudnn);
  EXPECT_EQ(static_cast<int>(b->timings.size()), FlashBackwardVariants() + 1);  // no dQ step after cuDNN
  EXPECT_NE(d.Choice(a, true).find("cudnn bwd (fused attention): 0.500 ms"), std::string::npos) << d.Choice(a, true);
  // Deterministic backward: cuDNN is not timed; a flash variant wins.
  SdpaArgs det = a;
  det.deterministic = true;
  auto bd = d.Select(det, true);
  ASSERT_TRUE(bd.ok()) << bd.status();
  EXPECT_EQ(bd->pick.kind, SdpaCandidate::kFlash);
  // A failing cuDNN (e.g. no engine for the shape) is skipped, not fatal.
  SdpaDispatcher e([](const SdpaCandidate& c, const SdpaArgs&, bool) -> absl::StatusOr<double> {
    if (c.kind == SdpaCandidate::kCudnn) return absl::UnimplementedError("cuDNN has no engine");
    return 1.0;
  });
  auto ef = e.Select(a, false);
  ASSERT_TRUE(ef.ok()) << ef.status();
  EXPECT_EQ(ef->pick.kind, SdpaCandidate::kFlash);
  // Cache file: the cuDNN picks come back (an injected-timer dispatcher loads
  // them even without the library).
  const std::string path = ::testing::TempDir() + "/sdpa_cache_cudnn.tsv";
  ASSERT_TRUE(d.SaveCache(path).ok());
  int reloaded_calls = 0;
  SdpaDispatcher r([&](const SdpaCandidate&, const SdpaArgs&, bool) -> absl::StatusOr<double> {
    ++reloaded_calls;
    return 1.0;
  });
  ASSERT_TRUE(r.LoadCache(path).ok());
  auto rf = r.Select(a, false);
  auto rb = r.Select(a, true);
  ASSERT_TRUE(rf.ok() && rb.ok());
  EXPECT_EQ(rf->pick.kind, SdpaCandidate::kCudnn);
  EXPECT_EQ(rb->pick.kind, SdpaCandidate::kCudnn);
  EXPECT_EQ(reloaded_calls, 0);
  std::remove(path.c_str());
}

TEST(SdpaDispatch, CacheFileRoundTrip) {
  SdpaDispatcher d([](const SdpaCandidate& c, const SdpaArgs&, bool) -> absl::StatusOr<double> {
    return c.fwd_variant == 4 ? 1.0 : 2.0;
  });
  SdpaArgs a = Valid(64);
  ASSERT_TRUE(d.Select(a, false).ok());
  const std::string path = ::testing::TempDir() + "/sdpa_cache.tsv";
  ASSERT_TRUE(d.SaveCache(path).ok());
  int calls = 0;
  SdpaDispatcher e([&](const SdpaCandidate&, const SdpaArgs&, bool) -> absl::StatusOr<double> {
    ++calls;
    return 1.0;
  });
  ASSERT_TRUE(e.LoadCache(path).ok());
  auto dec = e.Select(a, false);
  ASSERT_TRUE(dec.ok()) << dec.status();
  EXPECT_EQ(dec->pick.fwd_variant, 4);
  EXPECT_EQ(calls, 0);
  EXPECT_NE(e.Choice(a, false).find("from cache file"), std::string::npos) << e.Choice(a, false);
  EXPECT_EQ(e.LoadCache(path + ".missing").code(), absl::StatusCode::kNotFound);
  std::remove(path.c_str());
}

// The TuningCache: a timed decision is recorded under the device's tag; a
// later dispatcher (another process: the file reopened) with the same tag runs
// the same pick untimed, one with another tag times again. MayRunCudnn says
// whether a cuDNN plan can be needed.
TEST(SdpaDispatch, TuningCacheAcrossProcessesAndDevices) {
  const std::string path = ::testing::TempDir() + "/sdpa_tuning.tsv";
  std::remove(path.c_str());
  auto timer = [](const SdpaCandidate& c, const SdpaArgs&, bool) -> absl::StatusOr<double> {
    if (c.kind == SdpaCandidate::kCudnn) return 0.5;
    return c.fwd_variant == 2 ? 0.8 : 1.0;
  };
  SdpaArgs flash_shape = Valid(64), cudnn_shape = Valid(128);
  {
    TuningCache tc;
    ASSERT_TRUE(tc.Open(path).ok());
    // cuDNN is fastest for D128 only here: D64 picks flash variant 2.
    SdpaDispatcher d([&](const SdpaCandidate& c, const SdpaArgs& a, bool b) -> absl::StatusOr<double> {
      if (c.kind == SdpaCandidate::kCudnn && a.head_dim == 64) return 2.0;
      return timer(c, a, b);
    });
    d.SetTuningCache(&tc, "GPU-A sm90");
    EXPECT_TRUE(d.MayRunCudnn(flash_shape, false)) << "undecided";
    auto f = d.Select(flash_shape, false);
    auto c = d.Select(cudnn_shape, false);
    ASSERT_TRUE(f.ok() && c.ok());
    EXPECT_EQ(f->pick.kind, SdpaCandidate::kFlash);
    EXPECT_EQ(f->pick.fwd_variant, 2);
    EXPECT_EQ(c->pick.kind, SdpaCandidate::kCudnn);
    EXPECT_FALSE(d.MayRunCudnn(flash_shape, false));
    EXPECT_TRUE(d.MayRunCudnn(cudnn_shape, false));
    EXPECT_EQ(tc.size(), 2u);
  }
  TuningCache again;
  ASSERT_TRUE(again.Open(path).ok());
  int calls = 0;
  SdpaDispatcher same([&](const SdpaCandidate&, const SdpaArgs&, bool) -> absl::StatusOr<double> {
    ++calls;
    return 1.0;
  });
  same.SetTuningCache(&again, "GPU-A sm90");
  EXPECT_FALSE(same.MayRunCudnn(flash_shape, false)) << "known from the file before any Select";
  EXPECT_TRUE(same.MayRunCudnn(cudnn_shape, false));
  EXPECT_TRUE(same.MayRunCudnn(flash_shape, true)) << "the backward was never tuned";
  auto f = same.Select(flash_shape, false);
  auto c = same.Select(cudnn_shape, false);
  ASSERT_TRUE(f.ok() && c.ok());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(f->pick.kind, SdpaCandidate::kFlash);
  EXPECT_EQ(f->pick.fwd_variant, 2);
  EXPECT_DOUBLE_EQ(f->ms, 0.8);
  EXPECT_EQ(c->pick.kind, SdpaCandidate::kCudnn);
  EXPECT_NE(same.Choice(flash_shape, false).find("from the tuning cache"), std::string::npos);
  SdpaDispatcher other([&](const SdpaCandidate&, const SdpaArgs&, bool) -> absl::StatusOr<double> {
    ++calls;
    return 1.0;
  });
  other.SetTuningCache(&again, "GPU-B sm80");
  EXPECT_TRUE(other.MayRunCudnn(flash_shape, false));
  ASSERT_TRUE(other.Select(flash_shape, false).ok());
  EXPECT_GT(calls, 0) << "another device tunes again";
  std::remove(path.c_str());
}

TEST(SdpaDispatch, WorkspaceCoversEveryCandidate) {
  SdpaArgs a = Valid(64);
  FlashAttnArgs f;
  f.batch = a.batch, f.heads = a.heads, f.kv_heads = a.kv_heads, f.seq_q = a.seq_q, f.seq_k = a.seq_k;
  f.head_dim = a.head_dim;
  EXPECT_GE(SdpaBackwardWorkspaceBytes(a), FlashAttentionBwdWorkspaceBytes(f));
  // Where the math kernel is the only candidate it sets the need: delta, one
  // f32 per query row (its backward takes no dK/dV accumulators).
  SdpaArgs m = Valid(96);
  EXPECT_EQ(SdpaBackwardWorkspaceBytes(m), m.batch * m.heads * m.seq_q * 4);
  m = Valid(64, DType::kF32);
  EXPECT_EQ(SdpaBackwardWorkspaceBytes(m), m.batch * m.heads * m.seq_q * 4);
  // A ds_limit_bytes below this shape's dS leaves the stored-dS variants out
  // of the candidates and of the workspace.
  SdpaArgs nods = Valid(64);
  nods.ds_limit_bytes = 0;
  SdpaDispatcher d([](const SdpaCandidate&, const SdpaArgs&, bool) -> absl::StatusOr<double> { return 1.0; });
  for (const SdpaCandidate& c : d.Candidates(nods, true)) EXPECT_FALSE(FlashBwdUsesDs(c.bwd_variant)) << c.bwd_variant;
  EXPECT_LT(SdpaBackwardWorkspaceBytes(nods), SdpaBackwardWorkspaceBytes(Valid(64)));
  nods.ds_limit_bytes = -1;
  EXPECT_EQ(SdpaValidate(nods, true).code(), absl::StatusCode::kInvalidArgument);
  // With every candidate (cuDNN's plan, when the library loads here) the
  // figure never drops below the flash/math need; the forward needs none of
  // Loom's own.
  EXPECT_GE(SdpaWorkspaceBytes(a, true), SdpaBackwardWorkspaceBytes(a));
  EXPECT_GE(SdpaWorkspaceBytes(a, false), 0);
}

// The executor's direct-flash route: every field carried over, variants left
// at their defaults.
TEST(SdpaDispatch, FlashArgsFromSdpa) {
  SdpaArgs a = Valid(64);
  a.causal = true, a.scale = 0.25f, a.deterministic = true;
  a.ds_limit_bytes = 12345;
  a.q_strides = {3072, 64, 2304};
  a.dv_strides = {8 * 256 * 64, 256 * 64, 128};
  const FlashAttnArgs f = FlashArgsFromSdpa(a);
  EXPECT_EQ(f.batch, a.batch);
  EXPECT_EQ(f.heads, a.heads);
  EXPECT_EQ(f.kv_heads, a.kv_heads);
  EXPECT_EQ(f.seq_q, a.seq_q);
  EXPECT_EQ(f.seq_k, a.seq_k);
  EXPECT_EQ(f.head_dim, 64);
  EXPECT_TRUE(f.causal);
  EXPECT_TRUE(f.deterministic);
  EXPECT_EQ(f.ds_limit_bytes, 12345);
  EXPECT_EQ(f.scale, 0.25f);
  EXPECT_EQ(f.q_strides.batch, 3072);
  EXPECT_EQ(f.q_strides.row, 2304);
  EXPECT_EQ(f.dv_strides.row, 128);
  EXPECT_EQ(f.q, a.q);
  EXPECT_EQ(f.workspace, a.workspace);
  EXPECT_EQ(f.fwd_variant, 0);
  EXPECT_EQ(f.bwd_variant, 0);
  EXPECT_TRUE(FlashAttentionValidate(f, true).ok()) << FlashAttentionValidate(f, true);
}

}  // namespace
}  // namespace loom::kernels::cuda::attention
