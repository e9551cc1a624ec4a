#include "collectives/channels.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/usable_cpus.h"

namespace loom::collectives {

namespace {

// InvalidArgument naming the option (ProcessGroupOptions' name) and the value.
absl::Status ValidateChannelOptions(const ChannelOptions& o) {
  if (o.channels < 0 || o.channels > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("channels: expected 0 (automatic) or an integer in [1, 8], got ", o.channels));
  }
  if (o.min_slice_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel_min_slice_bytes: expected a positive byte count, got ", o.min_slice_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

int SliceCount(size_t bytes, const ChannelConfig& c) {
  size_t by_size = bytes / std::max<size_t>(c.min_slice_bytes, 1);
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(c.channels, by_size)));
}

absl::StatusOr<ChannelConfig> AgreeChannelConfig(store::Store& store, int rank, int size, absl::Duration timeout,
                                                 const ChannelOptions& options) {
  if (absl::Status s = ValidateChannelOptions(options); !s.ok()) return s;
  ChannelConfig c;
  if (size <= 1) return c;
  if (rank == 0) {
    c.channels = options.channels != 0 ? options.channels : std::clamp(UsableCpus() / (2 * size), 1, 4);
    c.min_slice_bytes = options.min_slice_bytes;
    absl::Status s = store.Set("channels", absl::StrCat(c.channels, " ", c.min_slice_bytes));
    if (!s.ok()) return s;
    return c;
  }
  auto v = store.WaitGet("channels", timeout);
  if (!v.ok()) return v.status();
  std::vector<std::string> parts = absl::StrSplit(*v, ' ');
  int64_t min_slice = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &c.channels) || c.channels < 1 ||
      c.channels > 8 || !absl::SimpleAtoi(parts[1], &min_slice) || min_slice < 1) {
    return absl::InternalError(absl::StrCat("channels: rank 0 published '", *v, "'"));
  }
  c.min_slice_bytes = static_cast<size_t>(min_slice);
  return c;
}

std::shared_ptr<store::Store> ChannelStore(std::shared_ptr<store::Store> store, int k) {
  return std::make_shared<store::PrefixStore>(std::move(store), absl::StrCat("ch", k));
}

absl::StatusOr<ExtraChannels> ConnectExtraChannels(std::shared_ptr<store::Store> store, int rank, int size,
                                                   absl::Duration timeout, const ChannelOptions& options,
                                                   const TransportFactory& connect) {
  auto c = AgreeChannelConfig(*store, rank, size, timeout, options);
  if (!c.ok()) return c.status();
  ExtraChannels extra;
  extra.config = *c;
  for (int i = 1; i < c->channels; ++i) {
    auto t = connect(ChannelStore(store, i));
    if (!t.ok()) {
      return absl::Status(t.status().code(),
                          absl::StrCat("channel ", i, " of ", c->channels, ": ", t.status().message()));
    }
    extra.transports.push_back(std::move(*t));
  }
  return extra;
}

ChannelPool::ChannelPool(ExtraChannels extra) : config_(extra.config) {
  config_.channels = 1 + static_cast<int>(extra.transports.size());
  for (auto& t : extra.transports) {
    auto w = std::make_unique<Worker>();
    w->transport = std::move(t);
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) w->thread = std::thread([this, p = w.get()] { Loop(p); });
}

ChannelPool::~ChannelPool() {
  for (auto& w : workers_) {
    absl::MutexLock l(&w->mu);
    w->stop = true;
  }
  for (auto& w : workers_) w->thread.join();
  // Transports are destroyed after their threads (Worker order).
}

void ChannelPool::Loop(Worker* w) {
  while (true) {
    std::function<absl::Status()> job;
    {
      absl::MutexLock l(&w->mu);
      w->mu.Await(absl::Condition(
          +[](Worker* x) ABSL_NO_THREAD_SAFETY_ANALYSIS { return x->stop || x->has_job; }, w));
      if (!w->has_job) return;
      job = std::move(w->job);
      w->has_job = false;
    }
    absl::Status s = job();
    absl::MutexLock l(&w->mu);
    w->status = s;
    w->done = true;
  }
}

void ChannelPool::AbortExtra(const absl::Status& reason) {
  for (auto& w : workers_) w->transport->Abort(reason);
}

absl::Status ChannelPool::Run(int slices, transport::Transport* channel0,
                              const std::function<absl::Status(int, transport::Transport*)>& fn) {
  slices = std::clamp(slices, 1, channels());
  // First failure aborts every channel so the other slices stop waiting.
  absl::Mutex first_mu;
  absl::Status first;
  auto failed = [&](const absl::Status& s) {
    {
      absl::MutexLock l(&first_mu);
      if (!first.ok()) return;
      first = s;
    }
    absl::Status reason = absl::AbortedError(absl::StrCat("another channel failed: ", s.message()));
    AbortExtra(reason);
    channel0->Abort(reason);
  };
  for (int k = 1; k < slices; ++k) {
    Worker* w = workers_[k - 1].get();
    absl::MutexLock l(&w->mu);
    w->done = false;
    w->has_job = true;
    w->job = [&fn, &failed, k, w]() {
      absl::Status s = fn(k, w->transport.get());
      if (!s.ok()) failed(s);
      return s;
    };
  }
  absl::Status s0 = fn(0, channel0);
  if (!s0.ok()) failed(s0);
  for (int k = 1; k < slices; ++k) {
    Worker* w = workers_[k - 1].get();
    absl::MutexLock l(&w->mu);
    w->mu.Await(absl::Condition(&w->done));
  }
  absl::MutexLock l(&first_mu);
  return first;
}

}  // namespace loom::collectives
