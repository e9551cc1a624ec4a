#include "deploy/operator/operator_command.h"

#include <yaml-cpp/yaml.h>

#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "deploy/operator/reconciler.h"

namespace loom::deploy::operator_ {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

Json Convert(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      Json o = Json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = Convert(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      Json a = Json::array();
      for (const auto& e : n) a.push_back(Convert(e));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const std::string s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted: a string
      int64_t i;
      double d;
      if (absl::SimpleAtoi(s, &i)) return i;
      if (s == "true" || s == "True") return true;
      if (s == "false" || s == "False") return false;
      if (s == "null" || s == "~") return nullptr;
      if (s.find_first_of("0123456789") != std::string::npos && absl::SimpleAtod(s, &d) &&
          s.find_first_not_of("0123456789.eE+-") == std::string::npos)
        return d;
      return s;
    }
    default:
      return nullptr;
  }
}

struct Flags {
  std::string kubeconfig, context, ns, image, render;
  int resync_s = 30;
  int poll_ms = 5000;
  int max_gpus_per_node = 0;
  bool once = false;
};

absl::StatusOr<Flags> Parse(const std::vector<std::string>& args) {
  Flags f;
  auto env = [](const char* k) {
    const char* v = std::getenv(k);
    return std::string(v ? v : "");
  };
  f.kubeconfig = env("KUBECONFIG");
  f.ns = env("LOOM_OPERATOR_NAMESPACE");
  f.image = env("LOOM_OPERATOR_IMAGE");
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], v;
    bool has_eq = false;
    if (auto eq = a.find('='); eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_eq = true;
    }
    auto value = [&]() -> absl::StatusOr<std::string> {
      if (has_eq) return v;
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(a, ": needs a value"));
      return args[++i];
    };
    if (a == "--once") {
      f.once = true;
      continue;
    }
    std::string* target = a == "--kubeconfig"  ? &f.kubeconfig
                          : a == "--context"   ? &f.context
                          : a == "--namespace" ? &f.ns
                          : a == "--image"     ? &f.image
                          : a == "--render"    ? &f.render
                                               : nullptr;
    if (a == "--poll-ms") {
      auto s = value();
      if (!s.ok()) return s.status();
      if (!absl::SimpleAtoi(*s, &f.poll_ms) || f.poll_ms <= 0)
        return absl::InvalidArgumentError(absl::StrCat("--poll-ms: expected a positive integer, got '", *s, "'"));
      continue;
    }
    if (a == "--max-gpus-per-node") {
      auto s = value();
      if (!s.ok()) return s.status();
      if (!absl::SimpleAtoi(*s, &f.max_gpus_per_node) || f.max_gpus_per_node <= 0)
        return absl::InvalidArgumentError(
            absl::StrCat("--max-gpus-per-node: expected a positive integer, got '", *s, "'"));
      continue;
    }
    if (a == "--resync-s") {
      auto s = value();
      if (!s.ok()) return s.status();
      if (!absl::SimpleAtoi(*s, &f.resync_s) || f.resync_s <= 0)
        return absl::InvalidArgumentError(absl::StrCat("--resync-s: expected a positive integer, got '", *s, "'"));
      continue;
    }
    if (!target) return absl::InvalidArgumentError(absl::StrCat("unknown flag '", args[i], "'"));
    auto s = value();
    if (!s.ok()) return s.status();
    *target = *s;
  }
  return f;
}

// Names to reconcile, each at a due time.
class WorkQueue {
 public:
  void Add(const std::string& name, absl::Time at) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = due_.find(name);
    if (it == due_.end() || at < it->second) due_[name] = at;
    cv_.notify_all();
  }
  // Waits for the earliest due name (empty on stop).
  std::string Next() {
    std::unique_lock<std::mutex> l(mu_);
    while (!g_stop) {
      std::string best;
      absl::Time t = absl::InfiniteFuture();
      for (auto& [n, at] : due_)
        if (at < t) best = n, t = at;
      absl::Time now = absl::Now();
      if (!best.empty() && t <= now) {
        due_.erase(best);
        return best;
      }
      absl::Duration wait = best.empty() ? absl::Milliseconds(500) : std::min(t - now, absl::Milliseconds(500));
      cv_.wait_for(l, absl::ToChronoMilliseconds(wait));
    }
    return "";
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, absl::Time> due_;
};

int Render(const Flags& f) {
  std::ifstream in(f.render);
  if (!in) {
    std::cerr << "loom_operator: cannot read " << f.render << "\n";
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto job = YamlToJson(ss.str());
  if (!job.ok()) {
    std::cerr << "loom_operator: " << job.status().message() << "\n";
    return 2;
  }
  if (!job->contains("metadata") || !(*job)["metadata"].contains("name") || !job->contains("spec")) {
    std::cerr << "loom_operator: " << f.render << ": not a TrainingJob (metadata.name, spec)\n";
    return 2;
  }
  Json& md = (*job)["metadata"];
  if (!md.contains("namespace")) md["namespace"] = f.ns.empty() ? "default" : f.ns;
  if (!md.contains("uid")) md["uid"] = "00000000-0000-0000-0000-000000000000";
  ReconcilerOptions opts;
  if (!f.image.empty()) opts.default_image = f.image;
  Json out = Reconciler::DesiredChildren(*job, opts);
  for (Json& o : out)
    if (o["kind"] == "Secret") o["data"]["token"] = "";
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace

absl::StatusOr<Json> YamlToJson(const std::string& yaml) {
  try {
    return Convert(YAML::Load(yaml));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("yaml: ", e.what()));
  }
}

int RunOperatorCommand(const std::vector<std::string>& args) {
  auto flags = Parse(args);
  if (!flags.ok()) {
    std::cerr << "loom_operator: " << flags.status().message() << "\n";
    return 2;
  }
  const Flags& f = *flags;
  if (!f.render.empty()) return Render(f);

  auto cfg = f.kubeconfig.empty() ? LoadInClusterConfig() : LoadKubeconfig(f.kubeconfig, f.context);
  if (!cfg.ok()) {
    std::cerr << "loom_operator: " << cfg.status().message() << "\n";
    return 1;
  }
  const std::string ns = f.ns.empty() ? cfg->ns : f.ns;
  KubeClient api(*cfg);
  ReconcilerOptions opts;
  if (!f.image.empty()) opts.default_image = f.image;
  opts.poll_interval = absl::Milliseconds(f.poll_ms);
  opts.max_gpus_per_node = f.max_gpus_per_node;
  WorkQueue queue;
  // Each live job's WatchJob stream re-queues its TrainingJob on every event,
  // so status follows the coordinator without waiting for the poll.
  if (!f.once) opts.on_job_event = [&queue](const std::string&, const std::string& name) { queue.Add(name, absl::Now()); };
  Reconciler reconciler(&api, MakeGrpcCoordinatorClient, opts);
  auto list = api.List(kTrainingJobs, ns);
  if (!list.ok()) {
    std::cerr << "loom_operator: " << list.status().message() << "\n";
    return 1;
  }
  if (f.once) {
    int rc = 0;
    for (const Json& j : (*list)["items"]) {
      auto r = reconciler.Reconcile(ns, j["metadata"]["name"]);
      if (!r.ok()) {
        std::cerr << "reconcile " << ns << "/" << j["metadata"]["name"].get<std::string>() << ": "
                  << r.status().message() << "\n";
        rc = 1;
      }
    }
    return rc;
  }

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto enqueue_list = [&](const Json& l) {
    for (const Json& j : l["items"]) queue.Add(j["metadata"]["name"], absl::Now());
  };
  std::thread jobs_watch([&] {
    api.ListWatch(
        kTrainingJobs, ns, {}, enqueue_list,
        [&](const std::string&, const Json& obj) {
          queue.Add(obj["metadata"]["name"], absl::Now());
          return true;
        },
        &g_stop, 10);
  });
  std::thread pods_watch([&] {
    api.ListWatch(
        kPods, ns, {}, [](const Json&) {},
        [&](const std::string&, const Json& obj) {
          const Json& labels = obj["metadata"].value("labels", Json::object());
          if (labels.contains(kJobLabel)) queue.Add(labels[kJobLabel], absl::Now());
          return true;
        },
        &g_stop, 10);
  });
  std::thread resync([&] {
    while (!g_stop) {
      for (int i = 0; i < f.resync_s * 10 && !g_stop; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (g_stop) break;
      if (auto l = api.List(kTrainingJobs, ns); l.ok()) enqueue_list(*l);
    }
  });
  std::cerr << "loom_operator: watching TrainingJobs in namespace " << ns << " at " << cfg->host << ":" << cfg->port
            << "\n";
  std::map<std::string, int> failures;
  while (!g_stop) {
    std::string name = queue.Next();
    if (name.empty()) break;
    auto r = reconciler.Reconcile(ns, name);
    if (!r.ok()) {
      int n = ++failures[name];
      absl::Duration backoff = std::min(absl::Milliseconds(200) * (1 << std::min(n, 8)), absl::Seconds(60));
      std::cerr << "reconcile " << ns << "/" << name << ": " << r.status().message() << " (retry in "
                << absl::FormatDuration(backoff) << ")\n";
      queue.Add(name, absl::Now() + backoff);
      continue;
    }
    failures.erase(name);
    if (r->requeue && !r->gone) queue.Add(name, absl::Now() + r->requeue_after);
  }
  jobs_watch.join();
  pods_watch.join();
  resync.join();
  return 0;
}

}  // namespace loom::deploy::operator_
