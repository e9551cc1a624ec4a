#include "collectives/gloo/gloo_backend.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/algorithms/reduce.h"
#include "collectives/gloo/gloo_transport.h"
#include "collectives/transport/tcp_transport.h"
#include "gloo/allgather.h"
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/alltoallv.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/math.h"
#include "gloo/reduce.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/types.h"

namespace loom::collectives::gloo {
namespace {

static_assert(kAutomatic == internal::kAutoSocketBuffer);  // tcp_socket_buffer_bytes

// gloo::rendezvous::Store over our Store. Gloo expects exceptions on failure.
class StoreAdapter : public ::gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<store::Store> store, absl::Duration timeout)
      : store_(std::move(store)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status s = store_->Set(key, absl::string_view(data.data(), data.size()));
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_->WaitGet(key, timeout_);
    if (!v.ok()) throw std::runtime_error(v.status().ToString());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_))); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    absl::Status s = store_->Wait(keys, absl::Milliseconds(timeout.count()));
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }

 private:
  std::shared_ptr<store::Store> store_;
  absl::Duration timeout_;
};

std::chrono::milliseconds Remaining(absl::Time deadline) {
  int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return std::chrono::milliseconds(ms < 1 ? 1 : ms);
}

uint32_t GlooTag(const algorithms::Comm& c) { return static_cast<uint32_t>((c.tag_base >> 16) & 0x7fffffff); }

bool GlooReduces(DType dt) {
  return dt == DType::kF32 || dt == DType::kF64 || dt == DType::kF16 || dt == DType::kI32 ||
         dt == DType::kI64;
}

// Calls fn(T{}) with the Gloo element type of a natively reducible dtype.
template <typename Fn>
void VisitGlooType(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::kF32: fn(float{}); break;
    case DType::kF64: fn(double{}); break;
    case DType::kF16: fn(::gloo::float16{}); break;
    case DType::kI32: fn(int32_t{}); break;
    case DType::kI64: fn(int64_t{}); break;
    default: break;
  }
}

template <typename T>
void (*ReduceFn(ReduceOp op))(void*, const void*, const void*, size_t) {
  switch (op) {
    case ReduceOp::kProduct: return &::gloo::product<T>;
    case ReduceOp::kMin: return &::gloo::min<T>;
    case ReduceOp::kMax: return &::gloo::max<T>;
    default: return &::gloo::sum<T>;
  }
}

bool AllEqual(absl::Span<const size_t> v) {
  for (size_t x : v) if (x != v[0]) return false;
  return true;
}

template <typename F>
absl::Status Guard(absl::string_view what, F&& f) {
  try {
    f();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return GlooError(absl::StrCat("gloo ", what), e);
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<Backend>> GlooBackend::Create(const BackendContext& ctx) {
  if (ctx.gloo_transport != "tcp" && ctx.gloo_transport != "gloo") {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo_transport: expected tcp or gloo, got '", ctx.gloo_transport, "'"));
  }
  if (ctx.gloo_native_min_bytes < kAutomatic) {
    return absl::InvalidArgumentError(absl::StrCat("gloo_native_min_bytes: expected a byte count or ", kAutomatic,
                                                   " (automatic), got ", ctx.gloo_native_min_bytes));
  }
  std::shared_ptr<::gloo::rendezvous::Context> context;
  absl::Status s = Guard("rendezvous", [&] {
    ::gloo::transport::tcp::attr attr;
    attr.hostname = CollectivesHost();
    attr.ai_family = AF_INET;
    auto dev = ::gloo::transport::tcp::CreateDevice(attr);
    context = std::make_shared<::gloo::rendezvous::Context>(ctx.rank, ctx.size);
    context->setTimeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(ctx.timeout)));
    StoreAdapter adapter(ctx.store, ctx.timeout);
    context->connectFullMesh(adapter, dev);
  });
  if (!s.ok()) return s;
  // The shared algorithms (latency-bound sizes and what libgloo lacks) run
  // over Loom's TcpTransport, or over Gloo's unbound buffers with
  // gloo_transport "gloo" (see the header for why).
  std::unique_ptr<transport::Transport> transport;
  ExtraChannels extra;  // channels 1.. (channels.h)
  size_t native_min = kNativeMinBytes;
  if (ctx.gloo_transport == "gloo") {
    transport = std::make_unique<GlooTransport>(context);
    native_min = 0;
  } else {
    transport::TcpTransport::Options o;
    o.host = CollectivesHost();
    o.timeout = ctx.timeout;
    o.socket_buffer_bytes = ctx.tcp_socket_buffer_bytes;
    LOOM_ASSIGN_OR_RETURN(transport, transport::TcpTransport::Connect(ctx.store, ctx.rank, ctx.size, o));
    LOOM_ASSIGN_OR_RETURN(
        extra, ConnectExtraChannels(
                   ctx.store, ctx.rank, ctx.size, ctx.timeout, ChannelOptionsOf(ctx),
                   [&](std::shared_ptr<store::Store> s) -> absl::StatusOr<std::unique_ptr<transport::Transport>> {
                     return transport::TcpTransport::Connect(s, ctx.rank, ctx.size, o);
                   }));
  }
  // gloo_native_min_bytes: where Gloo's own algorithms take over (every op,
  // whatever the channel count), for comparing the two.
  size_t allreduce_native_min = SIZE_MAX;
  if (ctx.gloo_native_min_bytes != kAutomatic) {
    native_min = allreduce_native_min = static_cast<size_t>(ctx.gloo_native_min_bytes);
  }
  auto b = std::make_shared<GlooBackend>(context, std::move(transport), native_min);
  b->allreduce_native_min_bytes_ = allreduce_native_min;
  b->SetChannels(std::move(extra));
  b->Configure(ctx);
  return std::shared_ptr<Backend>(b);
}

GlooBackend::GlooBackend(std::shared_ptr<::gloo::Context> context, std::unique_ptr<transport::Transport> transport,
                         size_t native_min_bytes)
    : AlgorithmBackend("gloo", std::move(transport)),
      context_(std::move(context)),
      native_min_bytes_(native_min_bytes) {}

GlooBackend::~GlooBackend() { StopExecutor(); }

absl::Status GlooBackend::RunAllReduce(const algorithms::Comm& c, const Tensor& t, ReduceOp op,
                                       const StageHooks* hooks) {
  // With several channels Loom's sliced ring runs every all_reduce (Gloo's
  // ring drives one connection per peer from one thread).
  const size_t native_min = channels() > 1 ? allreduce_native_min_bytes_ : native_min_bytes_;
  if (!GlooReduces(t.dtype()) || t.nbytes() < native_min) return AlgorithmBackend::RunAllReduce(c, t, op, hooks);
  if (hooks && t.nbytes()) {  // Gloo's own algorithms read the whole buffer at once
    if (hooks->need) hooks->need(0, t.nbytes());
    LOOM_RETURN_IF_ERROR(hooks->ready(0, t.nbytes()));
  }
  absl::Status s = RunNativeAllReduce(c, t, op);
  if (s.ok() && hooks && t.nbytes()) hooks->done(0, t.nbytes());
  return s;
}

absl::Status GlooBackend::RunNativeAllReduce(const algorithms::Comm& c, const Tensor& t, ReduceOp op) {
  if (t.numel() == 0 || c.size() == 1) {
    if (op == ReduceOp::kAvg) algorithms::DivideInPlace(t.dtype(), t.raw_data(), t.numel(), c.size());
    return absl::OkStatus();
  }
  absl::Status s = Guard("allreduce", [&] {
    VisitGlooType(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      ::gloo::AllreduceOptions o(context_);
      T* p = static_cast<T*>(t.raw_data());
      o.setOutput(p, t.numel());
      o.setReduceFunction(ReduceFn<T>(op));
      o.setAlgorithm(t.nbytes() < kRingThresholdBytes ? ::gloo::AllreduceOptions::Algorithm::BCUBE
                                                      : ::gloo::AllreduceOptions::Algorithm::RING);
      o.setTag(GlooTag(c));
      o.setTimeout(Remaining(c.deadline));
      ::gloo::allreduce(o);
    });
  });
  if (s.ok() && op == ReduceOp::kAvg) algorithms::DivideInPlace(t.dtype(), t.raw_data(), t.numel(), c.size());
  return s;
}

absl::Status GlooBackend::RunBroadcast(const algorithms::Comm& c, const Tensor& t, int root) {
  if (t.nbytes() == 0 || c.size() == 1) return absl::OkStatus();
  if (t.nbytes() < native_min_bytes_) return AlgorithmBackend::RunBroadcast(c, t, root);
  return Guard("broadcast", [&] {
    ::gloo::BroadcastOptions o(context_);
    uint8_t* p = static_cast<uint8_t*>(t.raw_data());
    if (c.rank() == root) o.setInput(p, t.nbytes());
    o.setOutput(p, t.nbytes());
    o.setRoot(root);
    o.setTag(GlooTag(c));
    o.setTimeout(Remaining(c.deadline));
    ::gloo::broadcast(o);
  });
}

absl::Status GlooBackend::RunReduce(const algorithms::Comm& c, const Tensor& t, ReduceOp op, int root) {
  if (!GlooReduces(t.dtype()) || t.nbytes() < native_min_bytes_) return AlgorithmBackend::RunReduce(c, t, op, root);
  if (t.numel() == 0 || c.size() == 1) {
    if (op == ReduceOp::kAvg) algorithms::DivideInPlace(t.dtype(), t.raw_data(), t.numel(), c.size());
    return absl::OkStatus();
  }
  // Gloo may use the output as scratch on every rank: reduce a copy, keep inputs intact.
  std::vector<char> in(t.nbytes()), out(t.nbytes());
  std::memcpy(in.data(), t.raw_data(), t.nbytes());
  absl::Status s = Guard("reduce", [&] {
    VisitGlooType(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      ::gloo::ReduceOptions o(context_);
      o.setInput(reinterpret_cast<T*>(in.data()), t.numel());
      o.setOutput(reinterpret_cast<T*>(out.data()), t.numel());
      o.setRoot(root);
      o.setReduceFunction(ReduceFn<T>(op));
      o.setTag(GlooTag(c));
      o.setTimeout(Remaining(c.deadline));
      ::gloo::reduce(o);
    });
  });
  if (s.ok() && c.rank() == root) {
    std::memcpy(t.raw_data(), out.data(), t.nbytes());
    if (op == ReduceOp::kAvg) algorithms::DivideInPlace(t.dtype(), t.raw_data(), t.numel(), c.size());
  }
  return s;
}

absl::Status GlooBackend::RunAllGather(const algorithms::Comm& c, const Tensor& in, const Tensor& out_flat,
                                       absl::Span<const size_t> bytes) {
  size_t total = 0;
  for (size_t b : bytes) total += b;
  if (c.size() == 1 || total < native_min_bytes_) return AlgorithmBackend::RunAllGather(c, in, out_flat, bytes);
  if (total == 0) return absl::OkStatus();
  return Guard("allgather", [&] {
    uint8_t* out = static_cast<uint8_t*>(out_flat.raw_data());
    if (AllEqual(bytes)) {
      ::gloo::AllgatherOptions o(context_);
      o.setInput(static_cast<uint8_t*>(in.raw_data()), bytes[0]);
      o.setOutput(out, total);
      o.setTag(GlooTag(c));
      o.setTimeout(Remaining(c.deadline));
      ::gloo::allgather(o);
    } else {
      ::gloo::AllgathervOptions o(context_);
      std::vector<size_t> counts(bytes.begin(), bytes.end());
      uint8_t dummy = 0;
      o.setInput(bytes[c.rank()] ? static_cast<uint8_t*>(in.raw_data()) : &dummy, bytes[c.rank()]);
      o.setOutput(out, counts);
      o.setTag(GlooTag(c));
      o.setTimeout(Remaining(c.deadline));
      ::gloo::allgatherv(o);
    }
  });
}

absl::Status GlooBackend::RunAllToAll(const algorithms::Comm& c, const Tensor& in, absl::Span<const size_t> send_bytes,
                                      const Tensor& out, absl::Span<const size_t> recv_bytes) {
  size_t total_in = 0, total_out = 0;
  for (size_t b : send_bytes) total_in += b;
  for (size_t b : recv_bytes) total_out += b;
  if (c.size() == 1 || total_in == 0 || total_out == 0 || std::max(total_in, total_out) < native_min_bytes_) {
    return AlgorithmBackend::RunAllToAll(c, in, send_bytes, out, recv_bytes);
  }
  return Guard("alltoall", [&] {
    uint8_t* ip = static_cast<uint8_t*>(in.raw_data());
    uint8_t* op = static_cast<uint8_t*>(out.raw_data());
    if (AllEqual(send_bytes) && AllEqual(recv_bytes) && send_bytes[0] == recv_bytes[0]) {
      ::gloo::AlltoallOptions o(context_);
      o.setInput(ip, total_in);
      o.setOutput(op, total_out);
      o.setTag(GlooTag(c));
      o.setTimeout(Remaining(c.deadline));
      ::gloo::alltoall(o);
    } else {
      ::gloo::AlltoallvOptions o(context_);
      o.setInput(ip, std::vector<int64_t>(send_bytes.begin(), send_bytes.end()));
      o.setOutput(op, std::vector<int64_t>(recv_bytes.begin(), recv_bytes.end()));
      o.setTag(GlooTag(c));
      o.setTimeout(Remaining(c.deadline));
      ::gloo::alltoallv(o);
    }
  });
}

absl::Status GlooBackend::RunBarrier(const algorithms::Comm& c) {
  if (c.size() == 1) return absl::OkStatus();
  if (native_min_bytes_ > 0) return AlgorithmBackend::RunBarrier(c);
  return Guard("barrier", [&] {
    ::gloo::BarrierOptions o(context_);
    o.setTag(GlooTag(c));
    o.setTimeout(Remaining(c.deadline));
    ::gloo::barrier(o);
  });
}

namespace {
const bool kRegistered = RegisterBackend("gloo", GlooBackend::Create);
}  // namespace

}  // namespace loom::collectives::gloo
